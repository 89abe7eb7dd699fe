"""`berth deschedule --policy POLICY FILE...`: each strategy on a small cluster, the no-loop rule
(no eviction without a better node, the cooldown), PodDisruptionBudgets, priorities and limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth.schemas.descheduler import parse_policy
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from berth.cli import app
from berth.core.descheduling import plan_evictions
from berth.deschedule import run_deschedule


def node(name: str, *, cpu: str = "4", gpus: int = 0, labels: dict | None = None, taints: list | None = None) -> dict:
    allocatable = {"cpu": cpu, "memory": "8Gi", "pods": "20"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"allocatable": allocatable},
    }
    if taints:
        doc["spec"] = {"taints": taints}
    return doc


def pod(
    name: str,
    node_name: str | None = None,
    *,
    cpu: str = "1",
    owner: str | None = "ReplicaSet",
    labels: dict | None = None,
    gpus: int = 0,
    fraction: str | None = None,
    devices: str | None = None,
    priority: int | None = None,
    **spec: Any,
) -> dict:
    resources: dict[str, Any] = {"requests": {"cpu": cpu}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "labels": labels or {"app": name.rsplit("-", 1)[0]},
    }
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0], "uid": "u", "controller": True}
        ]
    annotations = {}
    if fraction:
        annotations["gpu-fraction"] = fraction
    if devices:
        annotations["berth.io/gpu-devices"] = devices
    if annotations:
        metadata["annotations"] = annotations
    body: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": resources}], **spec}
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}


def v1alpha1(strategies: dict, **top: Any) -> dict:
    return {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy", "strategies": strategies, **top}


def v1alpha2(deschedule: list[str] = (), balance: list[str] = (), config: list | None = None, **top: Any) -> dict:
    profile = {
        "name": "p",
        "pluginConfig": config or [],
        "plugins": {"deschedule": {"enabled": list(deschedule)}, "balance": {"enabled": list(balance)}},
    }
    return {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": [profile], **top}


def deschedule(tmp_path: Path, policy: dict, objects: list[dict], *extra: str) -> tuple[int, list[dict], dict, str]:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    result = CliRunner().invoke(
        app, ["deschedule", "--policy", str(tmp_path / "policy.yaml"), str(tmp_path / "cluster.yaml"), *extra]
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    summary = lines[-1]["summary"] if lines and "summary" in lines[-1] else {}
    return result.exit_code, [line for line in lines if "summary" not in line], summary, result.stderr


NO_SCHEDULE = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
TAINTS = v1alpha1({"RemovePodsViolatingNodeTaints": {"enabled": True}})


def test_a_pod_on_a_node_tainted_since_is_evicted_to_an_untainted_node(tmp_path: Path) -> None:
    code, evictions, summary, _ = deschedule(
        tmp_path, TAINTS, [node("a", taints=[NO_SCHEDULE]), node("b"), pod("web-1", "a"), pod("bare", "a", owner=None)]
    )
    assert code == 0
    assert evictions == [
        {
            "pod": "default/web-1",
            "node": "a",
            "strategy": "RemovePodsViolatingNodeTaints",
            "reason": "node a has taint maintenance=true:NoSchedule the pod does not tolerate",
            "target_node": "b",
        }
    ]
    assert summary["by_strategy"] == {"RemovePodsViolatingNodeTaints": 1}


def test_no_eviction_when_the_engine_has_no_better_node_and_it_counts_as_a_loop_prevented(tmp_path: Path) -> None:
    # b is tainted too: the pod would only come back (to a) or stay pending.
    code, evictions, summary, _ = deschedule(
        tmp_path, TAINTS, [node("a", taints=[NO_SCHEDULE]), node("b", taints=[NO_SCHEDULE]), pod("web-1", "a")]
    )
    assert code == 0 and evictions == []
    assert summary["loops_prevented"] == {"RemovePodsViolatingNodeTaints": 1}
    assert summary["refused"] == {"RemovePodsViolatingNodeTaints": {"no-better-node": 1}}


def test_tolerated_and_excluded_taints_evict_nothing(tmp_path: Path) -> None:
    tolerant = pod("web-1", "a", tolerations=[{"key": "maintenance", "operator": "Exists"}])
    _, evictions, _, _ = deschedule(tmp_path, TAINTS, [node("a", taints=[NO_SCHEDULE]), node("b"), tolerant])
    assert evictions == []
    excluded = v1alpha1(
        {"RemovePodsViolatingNodeTaints": {"enabled": True, "params": {"excludedTaints": ["maintenance"]}}}
    )
    _, evictions, _, _ = deschedule(tmp_path, excluded, [node("a", taints=[NO_SCHEDULE]), node("b"), pod("web-1", "a")])
    assert evictions == []


def test_node_affinity_violation_moves_the_pod_to_a_matching_node(tmp_path: Path) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]
            }
        }
    }
    cluster = [
        node("a", labels={"disk": "hdd"}),
        node("b", labels={"disk": "hdd"}),
        node("c", labels={"disk": "ssd"}),
        pod("db-1", "a", affinity=affinity, owner="StatefulSet"),
        pod("db-2", "c", affinity=affinity, owner="StatefulSet"),
    ]
    _, evictions, _, _ = deschedule(tmp_path, v1alpha2(deschedule=["RemovePodsViolatingNodeAffinity"]), cluster)
    assert [(e["pod"], e["node"], e["target_node"]) for e in evictions] == [("default/db-1", "a", "c")]
    assert evictions[0]["reason"].startswith("violates node affinity on node a")


def test_inter_pod_anti_affinity_moves_one_of_the_two_pods(tmp_path: Path) -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    cluster = [node("a"), node("b"), pod("cache-1", "a", affinity=anti), pod("cache-2", "a", affinity=anti)]
    policy = v1alpha2(deschedule=["RemovePodsViolatingInterPodAntiAffinity"])
    _, evictions, _, _ = deschedule(tmp_path, policy, cluster)
    assert [(e["pod"], e["target_node"]) for e in evictions] == [("default/cache-1", "b")]
    # With no third place to go, nothing moves: the pod would violate wherever it lands.
    _, evictions, summary, _ = deschedule(tmp_path, policy, [*cluster[:1], *cluster[2:]])
    assert evictions == [] and summary["loops_prevented"] == {"RemovePodsViolatingInterPodAntiAffinity": 2}


LOW = v1alpha1(
    {
        "LowNodeUtilization": {
            "enabled": True,
            "params": {
                "nodeResourceUtilizationThresholds": {
                    "thresholds": {"cpu": 20, "pods": 20},
                    "targetThresholds": {"cpu": 50, "pods": 50},
                }
            },
        }
    }
)


def _busy_cluster() -> list[dict]:
    return [node("a"), node("b"), node("c"), *(pod(f"busy-{i}", "a", cpu="700m") for i in range(5))]


def test_low_node_utilization_drains_the_hot_node_to_below_its_targets_only(tmp_path: Path) -> None:
    _, evictions, summary, _ = deschedule(tmp_path, LOW, _busy_cluster())
    # a holds 3.5 of 4 CPUs (88 %): three pods leave, then it is at 1.4 (35 %), below 50 %.
    assert len(evictions) == 3
    assert {e["node"] for e in evictions} == {"a"} and {e["target_node"] for e in evictions} <= {"b", "c"}
    assert all(e["strategy"] == "LowNodeUtilization" for e in evictions)
    assert evictions[0]["reason"] == "node a is overutilized (cpu 88% > 50%)"
    assert summary["evictions"] == 3


def test_low_node_utilization_needs_an_underutilized_node(tmp_path: Path) -> None:
    cluster = [node("a"), node("b"), *(pod(f"busy-{i}", "a", cpu="700m") for i in range(5)), pod("mid-0", "b", cpu="1")]
    _, evictions, _, _ = deschedule(tmp_path, LOW, cluster)
    assert evictions == []


def test_a_pod_disruption_budget_blocks_the_eviction(tmp_path: Path) -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }
    cluster = [node("a", taints=[NO_SCHEDULE]), node("b"), pod("web-1", "a"), pod("web-2", "a"), pod("web-3", "a")]
    _, evictions, summary, _ = deschedule(tmp_path, TAINTS, [*cluster, pdb])
    # Three healthy, two must stay available: one eviction, the others refused by the budget.
    assert [e["pod"] for e in evictions] == ["default/web-1"]
    assert summary["refused"]["RemovePodsViolatingNodeTaints"]["pdb"] == 2


def test_priorities_system_critical_and_local_storage_are_protected(tmp_path: Path) -> None:
    cluster = [
        node("a", taints=[NO_SCHEDULE]),
        node("b"),
        pod("high-1", "a", priority=1000),
        pod("critical-1", "a", priority=2_000_000_000),
        pod("scratch-1", "a", volumes=[{"name": "tmp", "emptyDir": {}}]),
        pod("daemon-1", "a", owner="DaemonSet"),
        pod("low-1", "a", priority=10),
    ]
    policy = v1alpha1(
        {"RemovePodsViolatingNodeTaints": {"enabled": True, "params": {"thresholdPriority": 1000}}},
        evictLocalStoragePods=False,
    )
    _, evictions, _, _ = deschedule(tmp_path, policy, cluster)
    assert [e["pod"] for e in evictions] == ["default/low-1"]
    allowing = v1alpha1(
        {"RemovePodsViolatingNodeTaints": {"enabled": True}}, evictLocalStoragePods=True, evictSystemCriticalPods=True
    )
    _, evictions, _, _ = deschedule(tmp_path, allowing, cluster)
    assert sorted(e["pod"] for e in evictions) == [
        "default/critical-1",
        "default/high-1",
        "default/low-1",
        "default/scratch-1",
    ]


def test_per_node_and_per_namespace_limits(tmp_path: Path) -> None:
    cluster = [node("a", taints=[NO_SCHEDULE]), node("b", cpu="16"), *(pod(f"web-{i}", "a") for i in range(3))]
    per_node = v1alpha1({"RemovePodsViolatingNodeTaints": {"enabled": True}}, maxNoOfPodsToEvictPerNode=1)
    _, evictions, summary, _ = deschedule(tmp_path, per_node, cluster)
    assert len(evictions) == 1 and summary["refused"]["RemovePodsViolatingNodeTaints"]["limit-node"] == 2
    per_namespace = v1alpha2(deschedule=["RemovePodsViolatingNodeTaints"], maxNoOfPodsToEvictPerNamespace=2)
    _, evictions, summary, _ = deschedule(tmp_path, per_namespace, cluster)
    assert len(evictions) == 2 and summary["refused"]["RemovePodsViolatingNodeTaints"]["limit-namespace"] == 1


def test_a_workload_evicted_within_the_cooldown_is_left_alone(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"workload": "default/ReplicaSet/web", "evicted_at": "2026-01-01T11:30:00Z"}) + "\n")
    cluster = [node("a", taints=[NO_SCHEDULE]), node("b"), pod("web-1", "a")]
    args = ("--history", str(history), "--now", "2026-01-01T12:00:00Z")
    _, evictions, summary, _ = deschedule(tmp_path, TAINTS, cluster, *args)
    assert evictions == [] and summary["loops_prevented"] == {"RemovePodsViolatingNodeTaints": 1}
    _, evictions, _, _ = deschedule(tmp_path, TAINTS, cluster, *args, "--cooldown", "600")
    assert [e["pod"] for e in evictions] == ["default/web-1"]


def _fragmented_gpus() -> list[dict]:
    # g1: two half-GPU pods on its two devices, so no whole GPU is free; g2: a trainer on
    # device 0, 300 milli used on device 1. A pending pod wants one whole GPU.
    return [
        node("g1", cpu="16", gpus=2),
        node("g2", cpu="16", gpus=2),
        pod("infer-a", "g1", fraction="0.5", devices="0"),
        pod("infer-b", "g1", fraction="0.5", devices="1"),
        pod("train-a", "g2", gpus=1, devices="0"),
        pod("infer-c", "g2", fraction="0.3", devices="1"),
        pod("big-0", None, gpus=1, owner=None),
    ]


def test_gpu_defragmentation_moves_one_share_so_the_pending_pod_gets_a_whole_gpu(tmp_path: Path) -> None:
    _, evictions, summary, _ = deschedule(tmp_path, v1alpha2(balance=["GpuDefragmentation"]), _fragmented_gpus())
    assert len(evictions) == 1
    (eviction,) = evictions
    # The engine packs the moved share next to the other one on g1 (device 0 full), which frees
    # device 1 for the pending pod: g1 strands nothing any more, g2 its 700 milli.
    assert (eviction["pod"], eviction["node"], eviction["strategy"]) == ("default/infer-b", "g1", "GpuDefragmentation")
    assert eviction["target_node"] in ("g1", "g2")
    assert eviction["reason"] == "makes room on node g1 for pending pod default/big-0 (1 whole GPU(s))"
    assert summary["pending_given_room"] == ["default/big-0 -> g1"]
    assert summary["stranded_gpu_milli"]["before"] == 1700
    assert summary["stranded_gpu_milli"]["after"] < summary["stranded_gpu_milli"]["before"]


def test_gpu_defragmentation_never_moves_pods_of_higher_priority_than_the_pending_one(tmp_path: Path) -> None:
    cluster = _fragmented_gpus()
    for doc in cluster:
        if doc["kind"] == "Pod" and doc["metadata"]["name"].startswith("infer-"):
            doc["spec"]["priority"] = 100
    _, evictions, summary, _ = deschedule(tmp_path, v1alpha2(balance=["GpuDefragmentation"]), cluster)
    # Only the trainer on g2 may move (priority 0), and no whole GPU is free elsewhere for it.
    assert evictions == [] and summary["refused"] == {"GpuDefragmentation": {"moved-pods-fit-nowhere": 1}}
    assert summary["stranded_gpu_milli"] == {"before": 1700, "after": 1700}


def test_gpu_defragmentation_can_empty_a_node_for_a_scale_down(tmp_path: Path) -> None:
    cluster = [
        node("g1", cpu="16", gpus=2),
        node("g2", cpu="16", gpus=2),
        pod("infer-a", "g1", fraction="0.5", devices="0"),
        pod("infer-b", "g2", fraction="0.25", devices="0"),
    ]
    config = [{"name": "GpuDefragmentation", "args": {"nodesToFree": 1}}]
    _, evictions, summary, _ = deschedule(tmp_path, v1alpha2(balance=["GpuDefragmentation"], config=config), cluster)
    assert len(evictions) == 1
    assert summary["nodes_freed"] == [evictions[0]["node"]]
    assert evictions[0]["target_node"] != evictions[0]["node"]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (
            {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy", "strategies": {"PodLifeTime": {}}},
            "PodLifeTime",
        ),
        ({"apiVersion": "v1", "kind": "DeschedulerPolicy"}, "apiVersion: expected descheduler/v1alpha1"),
    ],
)
def test_a_policy_berth_cannot_run_exits_2_with_one_line(tmp_path: Path, policy: dict, message: str) -> None:
    code, evictions, _, err = deschedule(tmp_path, policy, [node("a")])
    assert code == 2 and evictions == []
    assert err.startswith("error: ") and str(tmp_path / "policy.yaml") in err and message in err
    assert len(err.strip().splitlines()) == 1


def test_missing_inputs_exit_3(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(TAINTS))
    result = CliRunner().invoke(
        app, ["deschedule", "--policy", str(tmp_path / "policy.yaml"), str(tmp_path / "nope.yaml")]
    )
    assert result.exit_code == 3 and "no such file or directory" in result.stderr


ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
EVERY_STRATEGY = v1alpha2(
    deschedule=[
        "RemovePodsViolatingNodeTaints",
        "RemovePodsViolatingNodeAffinity",
        "RemovePodsViolatingInterPodAntiAffinity",
    ],
    balance=["LowNodeUtilization", "GpuDefragmentation"],
    config=[
        {"name": "LowNodeUtilization", "args": {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}}},
    ],
)


@pytest.mark.parametrize(
    "cluster",
    [
        pytest.param(_busy_cluster(), id="hot-node"),
        pytest.param(_fragmented_gpus(), id="fragmented-gpus"),
        pytest.param(
            [
                node("a", taints=[NO_SCHEDULE]),
                node("b"),
                node("c"),
                pod("cache-1", "a", affinity=ANTI),
                pod("cache-2", "a", affinity=ANTI),
            ],
            id="taint-and-anti-affinity",
        ),
    ],
)
def test_the_planned_cluster_needs_no_second_round(cluster: list[dict]) -> None:
    # No eviction loop: run again on the state the plan leads to (without any cooldown), and
    # every strategy finds nothing more to do.
    policy = parse_policy(EVERY_STRATEGY)
    first = run_deschedule(cluster, policy)
    assert first.plan.evictions, "the cluster was meant to need descheduling"
    second = plan_evictions(first.engine, policy)
    assert second.evictions == []


def test_evictions_and_loops_prevented_are_counted_per_strategy(tmp_path: Path) -> None:
    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name, {"strategy": "RemovePodsViolatingNodeTaints"}) or 0.0

    evictions, prevented = (
        sample("berth_descheduler_evictions_total"),
        sample("berth_descheduler_loops_prevented_total"),
    )
    deschedule(tmp_path, TAINTS, [node("a", taints=[NO_SCHEDULE]), node("b"), pod("web-1", "a")])
    deschedule(tmp_path, TAINTS, [node("a", taints=[NO_SCHEDULE]), node("b", taints=[NO_SCHEDULE]), pod("web-1", "a")])
    assert sample("berth_descheduler_evictions_total") == evictions + 1
    assert sample("berth_descheduler_loops_prevented_total") == prevented + 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--evict", "{tmp}/cluster.yaml"], "--evict needs --kubeconfig"),
        (["--kubeconfig", "{tmp}/kubeconfig", "{tmp}/cluster.yaml"], "give manifest files or --kubeconfig, not both"),
    ],
)
def test_live_only_options_are_refused_with_files(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(TAINTS))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([node("a")]))
    argv = ["deschedule", "--policy", str(tmp_path / "policy.yaml"), *(a.format(tmp=tmp_path) for a in args)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and says in result.stderr and result.stdout == ""
