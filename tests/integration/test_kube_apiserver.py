"""A real kube-apiserver (our own etcd + apiserver, or BERTH_KUBECONFIG), fake GPU nodes, and the
stock kube-scheduler binding plain pods on them.

The first run builds the binaries (~10 minutes on 2 cores, see berth_dev.devstack.gobuild); after
that a control plane starts in ~5-15 s. Tests that start control planes of their own (clean stop,
SIGKILLed parent, ``up --with-kubernetes``) need the cached binaries: skipped without them, failed
in CI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from berth_dev.devstack.fakenodes import (
    FAKE_NODE_LABEL,
    TOPOLOGY_ANNOTATION,
    create_fake_nodes,
    delete_fake_nodes,
    gpu_topology,
    parse_taint,
)
from berth_dev.devstack.kube import KubeConnection, KubeControlPlane, KubeSchedulerProcess
from berth_dev.devstack.procs import pids_mentioning
from kubernetes.client import ApiClient, CoreV1Api, VersionApi
from kubernetes.client.exceptions import ApiException

from tests.orphans import assert_children_die_with_their_parent, wait_until_gone

pytestmark = pytest.mark.integration

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@pytest.fixture
def api(kube_apiserver: KubeConnection) -> Iterator[ApiClient]:
    with kube_apiserver.api_client() as client:
        yield client


@pytest.fixture
def namespace(api: ApiClient) -> str:
    """A fresh namespace. Not deleted afterwards: without kube-controller-manager's namespace
    controller a deleted namespace stays Terminating forever, which is no better."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def _pod(
    name: str, *, scheduler: str | None = None, gpus: int = 0, node_selector: dict[str, str] | None = None
) -> dict:
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}  # extended resources: limits == requests
    spec = {"containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"name": name}, "spec": spec}


# --- pure helpers -------------------------------------------------------------------------------


def test_gpu_topology_has_two_nvlink_islands_of_four_for_eight_gpus() -> None:
    devices = gpu_topology(8)["devices"]
    assert [d["index"] for d in devices] == list(range(8))
    assert devices[0] == {"index": 0, "numa": 0, "nvlink": [1, 2, 3]}
    assert devices[5] == {"index": 5, "numa": 1, "nvlink": [4, 6, 7]}
    assert gpu_topology(2)["devices"] == [
        {"index": 0, "numa": 0, "nvlink": [1]},
        {"index": 1, "numa": 0, "nvlink": [0]},
    ]


def test_parse_taint_accepts_kubectl_syntax() -> None:
    assert parse_taint("gpu=h100:NoSchedule") == {"key": "gpu", "value": "h100", "effect": "NoSchedule"}
    assert parse_taint("dedicated:NoExecute") == {"key": "dedicated", "effect": "NoExecute"}
    with pytest.raises(ValueError):
        parse_taint("no-effect")


# --- the apiserver ------------------------------------------------------------------------------


def test_apiserver_answers(kube_apiserver: KubeConnection, api: ApiClient) -> None:
    version = VersionApi(api).get_code()
    assert version.major == "1" and version.minor.startswith("34"), version
    names = {ns.metadata.name for ns in CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system"} <= names
    assert kube_apiserver.server.startswith("https://")


def test_namespace_and_pod_for_berth_can_be_created(api: ApiClient, namespace: str) -> None:
    core = CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("waits-for-berth", scheduler="berth", gpus=1))
    pod = core.read_namespaced_pod("waits-for-berth", namespace)
    assert pod.spec.scheduler_name == "berth"
    assert pod.spec.node_name is None  # nobody named berth has bound it
    assert pod.status.phase == "Pending"
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}


def test_service_account_token_authenticates_without_permissions(
    kube_apiserver: KubeConnection, namespace: str
) -> None:
    plane = kube_apiserver.control_plane
    if plane is None:
        pytest.skip("mints tokens through our own control plane's helper")
    path = plane.service_account_kubeconfig(namespace, "berth-decider")
    with KubeConnection.from_kubeconfig(path).api_client() as sa_api:
        with pytest.raises(ApiException) as denied:
            CoreV1Api(sa_api).list_node()
    assert denied.value.status == 403  # authenticated (not 401), and RBAC grants nothing yet
    assert "system:serviceaccount:" + namespace + ":berth-decider" in denied.value.body


# --- fake GPU nodes ---------------------------------------------------------------------------


def test_fake_nodes_have_gpu_labels_capacity_topology_and_are_ready(api: ApiClient) -> None:
    run = uuid.uuid4().hex[:8]
    prefix = f"gpu-{run}-"
    names = create_fake_nodes(
        api,
        4,
        gpus=8,
        prefix=prefix,
        zones=("zone-a", "zone-b"),
        spot_fraction=0.5,
        taints=("dedicated=gpu:NoSchedule",),
        labels={"berth.io/test-run": run},
    )
    try:
        assert names == [f"{prefix}{i:04d}" for i in range(4)]
        nodes = {n.metadata.name: n for n in CoreV1Api(api).list_node(label_selector=f"berth.io/test-run={run}").items}
        assert sorted(nodes) == names
        for index, name in enumerate(names):
            node = nodes[name]
            labels = node.metadata.labels
            assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
            assert labels["nvidia.com/gpu.memory"] == "81559"
            assert labels["nvidia.com/gpu.count"] == "8"
            assert labels["topology.kubernetes.io/zone"] == ("zone-a", "zone-b")[index % 2]
            assert labels[FAKE_NODE_LABEL] == "true"
            for resources in (node.status.capacity, node.status.allocatable):
                assert resources["nvidia.com/gpu"] == "8"
                assert resources["cpu"] == "192" and resources["memory"] == "2Ti" and resources["pods"] == "110"
            topology = json.loads(node.metadata.annotations[TOPOLOGY_ANNOTATION])
            assert topology == gpu_topology(8)
            ready = [c for c in node.status.conditions if c.type == "Ready"]
            assert ready and ready[0].status == "True"
            taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
            assert taints == [("dedicated", "gpu", "NoSchedule")]  # and no node.kubernetes.io/not-ready
        capacity_types = sorted(n.metadata.labels["karpenter.sh/capacity-type"] for n in nodes.values())
        assert capacity_types == ["on-demand", "on-demand", "spot", "spot"]
        # A second run updates the same nodes instead of failing.
        assert create_fake_nodes(api, 4, prefix=prefix, labels={"berth.io/test-run": run}) == names
    finally:
        assert delete_fake_nodes(api, label_selector=f"berth.io/test-run={run}") == 4
    assert CoreV1Api(api).list_node(label_selector=f"berth.io/test-run={run}").items == []


def test_a_thousand_fake_nodes(api: ApiClient) -> None:
    run = uuid.uuid4().hex[:8]
    started = time.monotonic()
    names = create_fake_nodes(api, 1000, prefix=f"bulk-{run}-", labels={"berth.io/test-run": run})
    elapsed = time.monotonic() - started
    try:
        listed = CoreV1Api(api).list_node(label_selector=f"berth.io/test-run={run}").items
        assert len(listed) == len(names) == 1000
        assert all(n.status.allocatable["nvidia.com/gpu"] == "8" for n in listed)
        print(f"\n1000 fake nodes in {elapsed:.1f} s ({1000 / elapsed:.0f} nodes/s)")
        assert elapsed < 180, f"creating 1000 fake nodes took {elapsed:.0f} s"
    finally:
        delete_fake_nodes(api, label_selector=f"berth.io/test-run={run}")


# --- kube-scheduler binds plain pods on fake nodes (what the head-to-head benchmark needs) ----------


def test_kube_scheduler_binds_plain_pods_on_fake_nodes(
    kube_apiserver: KubeConnection, api: ApiClient, namespace: str
) -> None:
    if kube_apiserver.control_plane is None:
        pytest.skip("starts a kube-scheduler of its own: only against our own control plane")
    run = uuid.uuid4().hex[:8]
    core = CoreV1Api(api)
    names = create_fake_nodes(api, 10, prefix=f"sched-{run}-", labels={"berth.io/test-run": run})
    try:
        with KubeSchedulerProcess(kube_apiserver.control_plane) as scheduler:
            started = time.monotonic()
            for i in range(20):
                # Only onto this test's nodes: the session's apiserver holds other tests' nodes too.
                core.create_namespaced_pod(namespace, _pod(f"plain-{i:02d}", node_selector={"berth.io/test-run": run}))
            deadline = time.monotonic() + 60
            while True:
                pods = core.list_namespaced_pod(namespace).items
                bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
                if len(bound) == 20 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - started
            assert len(bound) == 20, f"only {len(bound)}/20 bound; scheduler log: {scheduler.log_path}"
            assert set(bound.values()) <= set(names)
            assert len(set(bound.values())) > 1  # spread over nodes, not piled on one
            metrics = scheduler.metrics()
            # At least ours: pending default-scheduler pods of other tests on this apiserver count too.
            scheduled = re.search(
                r'scheduler_schedule_attempts_total\{profile="default-scheduler",'
                r'result="scheduled"\} (\d+)',
                metrics,
            )
            assert scheduled is not None and int(scheduled.group(1)) >= 20, metrics[-2000:]
            print(f"\nkube-scheduler bound 20 pods on 10 fake nodes in {elapsed:.2f} s")
    finally:
        delete_fake_nodes(api, label_selector=f"berth.io/test-run={run}")


# --- our launcher leaves nothing behind -----------------------------------------------------------


@pytest.mark.usefixtures("cached_kube_binaries")
def test_control_plane_stop_leaves_nothing_behind() -> None:
    with KubeControlPlane() as kube:
        data_dir = str(kube.data_dir)
        assert kube.is_answering()
        assert sorted(pids_mentioning(data_dir)) == sorted([kube.etcd_pid, kube.apiserver_pid])
        kubeconfig = kube.kubeconfig_path
        assert kubeconfig.stat().st_mode & 0o077 == 0  # holds a system:masters token
    assert pids_mentioning(data_dir) == []
    assert not Path(data_dir).exists()


_KILLED_PARENT_SCRIPT = """
import json, time
from berth_dev.devstack.kube import KubeControlPlane
kube = KubeControlPlane().start()
print(json.dumps({"pids": [kube.etcd_pid, kube.apiserver_pid], "markers": [str(kube.data_dir)] * 2}), flush=True)
time.sleep(600)
"""


@pytest.mark.usefixtures("cached_kube_binaries")
def test_control_plane_dies_when_its_parent_is_killed() -> None:
    assert_children_die_with_their_parent(_KILLED_PARENT_SCRIPT)


@pytest.mark.usefixtures("cached_kube_binaries", "local_binaries")
def test_cli_up_with_kubernetes_nodes_down(tmp_path: Path) -> None:
    env = {**os.environ, "BERTH_RUN_DIR": str(tmp_path)}
    env.pop("BERTH_KUBECONFIG", None)
    cli = [sys.executable, "-m", "berth_dev.devstack"]

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *command], env=env, capture_output=True, text=True, timeout=240)

    try:
        started = run("up", "--with-kubernetes")
        assert started.returncode == 0, started.stderr
        printed = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
        assert set(printed) == {"BERTH_KAFKA_BOOTSTRAP", "BERTH_DATABASE_URL", "BERTH_KUBECONFIG"}
        state = json.loads((tmp_path / "devstack.json").read_text())
        kube = state["kubernetes"]
        pids, markers = [kube["etcd_pid"], kube["apiserver_pid"]], [kube["data_dir"]] * 2

        shown = run("status")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert shown.stdout.count("answering") == 3 and "not answering" not in shown.stdout

        made = run("nodes", "3", "--prefix", "cli-")
        assert made.returncode == 0, made.stderr
        with KubeConnection.from_kubeconfig(printed["BERTH_KUBECONFIG"]).api_client() as api:
            assert sorted(n.metadata.name for n in CoreV1Api(api).list_node().items) == [
                "cli-0000",
                "cli-0001",
                "cli-0002",
            ]

        stopped = run("down")
        assert stopped.returncode == 0, stopped.stderr
        assert "kubernetes" in stopped.stdout
        assert wait_until_gone(pids, markers, timeout=5) == []
        assert not Path(kube["data_dir"]).exists()
    finally:
        run("down")
