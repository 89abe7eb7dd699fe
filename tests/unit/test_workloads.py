"""Workload loaders and generators: counts, determinism, the trace's CSV mapping, manifests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from berth_dev.workloads import (
    WorkloadError,
    from_documents,
    generate_workload,
    generated_documents,
    load_workload,
    parse_generator,
    pool_policies,
    replica_pod,
    write_documents,
)
from berth_dev.workloads.alibaba import GPU_MEMORY_MIB

from berth.kube.manifests import LABEL_GPU_PRODUCT

NODES_CSV = """\
sn,cpu_milli,memory_mib,gpu,model
openb-node-0001,64000,262144,2,V100M32
openb-node-0002,96000,786432,8,G2
openb-node-0003,32000,131072,0,
"""
PODS_CSV = """\
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0001,12000,16384,1,1000,,LS,Running,100,1100,100
openb-pod-0002,6000,12288,1,460,V100M16|V100M32,BE,Running,150,400,160
openb-pod-0003,88000,327680,8,1000,,LS,Pending,120,130,
openb-pod-0004,4000,8192,0,0,,Burstable,Succeeded,110,200,110
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES_CSV)
    pods = tmp_path / "pods.csv"
    pods.write_text(PODS_CSV)
    return pods


# --- the demo generator --------------------------------------------------------------------------


def test_demo_has_the_promised_mix():
    workload = generate_workload("demo")
    summary = workload.summary()
    assert summary["gpu_nodes"] >= 100 and summary["pods"] >= 1000
    assert summary["fractional_gpu_pods"] > 0 and summary["mig_pods"] > 0 and summary["cpu_only_pods"] > 0
    assert summary["pod_groups"] >= 2 and summary["gang_pods"] >= 8
    assert summary["spot_notices"] >= 1 and summary["queue_lag_samples"] >= 10 and summary["node_removals"] >= 1
    sizes = {t.pod.whole_gpus for t in workload.pods}
    assert {1, 2, 4, 8, 16} <= sizes  # 16 fits on no node
    assert {t.pod.gpu_fraction_milli for t in workload.pods} >= {250, 500}
    eight_gpu_nodes = [n for n in workload.nodes if len(n.gpus) == 8]
    assert any(n.capacity_type == "spot" for n in eight_gpu_nodes)
    assert any(d.nvlink_peers for n in eight_gpu_nodes for d in n.gpus)
    assert any(d.mig for n in workload.nodes for d in n.gpus)
    products = {n.labels.get(LABEL_GPU_PRODUCT) for n in workload.nodes}
    assert any(t.pod.node_selector.get(LABEL_GPU_PRODUCT) not in (None, *products) for t in workload.pods)
    assert not workload.warnings
    # arrivals in order, timeline events on real nodes
    times = [t.at_s for t in workload.pods]
    assert times == sorted(times)
    names = {n.name for n in workload.nodes}
    assert all(s.node in names for s in workload.spot_notices)
    assert all(s.node in {n.name for n in workload.nodes if n.capacity_type == "spot"} for s in workload.spot_notices)


def test_generators_are_deterministic_and_seeded():
    assert generated_documents("demo:3") == generated_documents("demo:3")
    assert generated_documents("demo:3") != generated_documents("demo:4")
    assert generate_workload("demo:3") == generate_workload("demo:3")
    assert generated_documents("bench:2", nodes=20, pods=50, rate=10.0) == generated_documents(
        "bench:2", nodes=20, pods=50, rate=10.0
    )


def test_generated_manifests_load_back_to_the_same_workload(tmp_path: Path):
    path = tmp_path / "demo.yaml"
    written = write_documents(generated_documents("demo:5"), path)
    loaded = load_workload(path)
    generated = generate_workload("demo:5")
    assert written == len(list(yaml.safe_load_all(path.read_text())))
    assert loaded.nodes == generated.nodes and loaded.pods == generated.pods
    assert loaded.policies == generated.policies and loaded.pools == generated.pools
    assert loaded.spot_notices == generated.spot_notices and loaded.queue_lag == generated.queue_lag


def test_bench_generator_counts_and_rate():
    workload = generate_workload("bench:1", nodes=30, pods=200, rate=100.0)
    assert len(workload.nodes) == 30 and len(workload.pods) == 200
    assert workload.pods[-1].at_s == pytest.approx(199 / 100.0)
    assert all(t.run_s is None for t in workload.pods)


def test_generator_spec_parsing():
    assert parse_generator("demo") == ("demo", 1)
    assert parse_generator("bench:42") == ("bench", 42)
    with pytest.raises(WorkloadError, match="unknown generator 'chaos'"):
        parse_generator("chaos")
    with pytest.raises(WorkloadError, match="seed"):
        parse_generator("demo:x")


def test_pools_file_and_replicas_follow_the_agent_pools():
    workload = generate_workload("demo")
    pools = pool_policies(workload)["pools"]
    assert set(pools) == {"serving/llama-70b", "serving/embedder"}
    assert pools["serving/llama-70b"]["tokens_per_second_per_replica"] == 2500
    llama = next(p for p in workload.pools if p.name == "llama-70b")
    replica = replica_pod(llama, 3, workload.policies)
    assert replica.name == "llama-70b-3" and replica.scheduler_name == "berth"
    assert replica.whole_gpus == 4 and replica.priority == 100000
    assert replica.labels["berth.io/agent-pool"] == "llama-70b"


# --- the Alibaba trace ---------------------------------------------------------------------------


def test_trace_nodes_map_to_gpu_devices_without_nvlink(trace: Path):
    workload = load_workload(trace)
    v100, g2, cpu = workload.nodes
    assert v100.name == "openb-node-0001"
    assert v100.allocatable == {"cpu": 64000, "memory": 262144 * 2**20, "pods": 110, "nvidia.com/gpu": 2}
    assert [d.model for d in v100.gpus] == ["V100M32", "V100M32"]
    assert all(d.memory_mib == GPU_MEMORY_MIB["V100M32"] and d.nvlink_peers == () for d in v100.gpus)
    assert v100.labels[LABEL_GPU_PRODUCT] == "V100M32" and v100.labels["nvidia.com/gpu.memory"] == "32768"
    assert len(g2.gpus) == 8 and "nvidia.com/gpu.memory" not in g2.labels  # unknown model memory
    assert cpu.gpus == () and "nvidia.com/gpu" not in cpu.allocatable


def test_trace_pods_map_requests_fractions_affinity_and_times(trace: Path):
    workload = load_workload(trace)
    by_name = {t.pod.name: t for t in workload.pods}
    assert [t.pod.name for t in workload.pods] == [
        "openb-pod-0001",
        "openb-pod-0004",
        "openb-pod-0003",
        "openb-pod-0002",
    ]  # by creation time
    whole = by_name["openb-pod-0001"]
    assert whole.pod.requests == {"cpu": 12000, "memory": 16384 * 2**20, "nvidia.com/gpu": 1}
    assert whole.pod.gpu_fraction_milli is None and whole.at_s == 0 and whole.run_s == 1000
    assert whole.pod.scheduler_name == "berth" and whole.pod.labels["alibaba.com/qos"] == "LS"
    share = by_name["openb-pod-0002"]
    assert share.pod.gpu_fraction_milli == 460 and "nvidia.com/gpu" not in share.pod.requests
    assert share.pod.annotations["gpu-fraction"] == "0.46"
    term = share.pod.affinity.node_affinity.required[0].match_expressions[0]
    assert (term.key, term.operator, term.values) == (LABEL_GPU_PRODUCT, "In", ("V100M16", "V100M32"))
    assert share.at_s == 50 and share.run_s == 240
    never_scheduled = by_name["openb-pod-0003"]
    assert never_scheduled.pod.whole_gpus == 8 and never_scheduled.run_s is None
    cpu_only = by_name["openb-pod-0004"]
    assert cpu_only.pod.requests == {"cpu": 4000, "memory": 8192 * 2**20}


def test_trace_errors_name_the_row(tmp_path: Path, trace: Path):
    bad = tmp_path / "bad.csv"
    bad.write_text(PODS_CSV.splitlines()[0] + "\nopenb-pod-9,1000,1024,2,500,,LS,Running,0,10,0\n")
    with pytest.raises(WorkloadError, match=r"bad\.csv:2: pod 'openb-pod-9': a share of 500 milli"):
        load_workload(bad, nodes_csv=trace.with_name("openb_node_list_gpu_node.csv"))
    bad.write_text(PODS_CSV.splitlines()[0] + "\nopenb-pod-9,lots,1024,0,0,,LS,Running,0,10,0\n")
    with pytest.raises(WorkloadError, match=r"bad\.csv:2: cpu_milli: 'lots' is not a whole number"):
        load_workload(bad, nodes_csv=trace.with_name("openb_node_list_gpu_node.csv"))
    with pytest.raises(WorkloadError, match="not a pod list"):
        load_workload(trace.with_name("openb_node_list_gpu_node.csv"))


def test_trace_directory_uses_the_default_files(tmp_path: Path, trace: Path):
    trace.rename(tmp_path / "openb_pod_list_default.csv")
    assert len(load_workload(tmp_path).pods) == 4


# --- manifests with a timeline -------------------------------------------------------------------

MANIFESTS = textwrap.dedent("""\
    apiVersion: v1
    kind: Node
    metadata: {name: gpu-a, labels: {karpenter.sh/capacity-type: spot}}
    status: {capacity: {cpu: "32", memory: 128Gi, pods: "110", nvidia.com/gpu: "4"}}
    ---
    apiVersion: v1
    kind: Pod
    metadata:
      name: late
      namespace: ml
      annotations: {sim.berth.io/arrival-seconds: "30", sim.berth.io/run-seconds: "60"}
    spec:
      schedulerName: berth
      containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: early, namespace: ml}
    spec: {schedulerName: berth, containers: [{name: c}]}
    ---
    apiVersion: sim.berth.io/v1alpha1
    kind: Timeline
    metadata: {name: t}
    spec:
      spotNotices: [{node: gpu-a, atSeconds: 10, noticeSeconds: 30, provider: gcp}]
      queueLagBursts: [{pool: chat, namespace: ml, atSeconds: 5, durationSeconds: 10,
                        intervalSeconds: 5, peakTokens: 1000, tokenRate: 50}]
    """)


def test_manifests_with_timeline(tmp_path: Path):
    path = tmp_path / "w.yaml"
    path.write_text(MANIFESTS)
    workload = load_workload(path)
    assert [(t.pod.name, t.at_s, t.run_s) for t in workload.pods] == [("early", 0.0, None), ("late", 30.0, 60.0)]
    [notice] = workload.spot_notices
    assert (notice.node, notice.at_s, notice.notice_s, notice.provider) == ("gpu-a", 10, 30, "gcp")
    assert [(q.at_s, q.tokens_in_queue) for q in workload.queue_lag] == [(5, 0), (10, 1000), (15, 0)]
    assert any("ml/chat" in w and "not an AgentPool" in w for w in workload.warnings)


def test_manifest_errors_name_the_object_and_field():
    docs = list(yaml.safe_load_all(MANIFESTS))
    docs[1]["metadata"]["annotations"]["sim.berth.io/arrival-seconds"] = "soon"
    with pytest.raises(WorkloadError, match=r"Pod ml/late: metadata.annotations.sim.berth.io/arrival-seconds"):
        from_documents(docs)
    docs = list(yaml.safe_load_all(MANIFESTS))
    docs[3]["spec"]["spotNotices"][0]["node"] = "gpu-zz"
    with pytest.raises(WorkloadError, match="node 'gpu-zz' is not a Node"):
        from_documents(docs)
    docs = list(yaml.safe_load_all(MANIFESTS))
    docs[3]["spec"]["spotNotices"][0]["atSecond"] = 3
    with pytest.raises(WorkloadError, match=r"Timeline \(document 4\): spec.spotNotices.0.atSecond"):
        from_documents(docs)


def test_a_v1_list_may_hold_the_timeline():
    docs = list(yaml.safe_load_all(MANIFESTS))
    workload = from_documents([{"apiVersion": "v1", "kind": "List", "items": docs}])
    assert len(workload.pods) == 2 and len(workload.spot_notices) == 1
