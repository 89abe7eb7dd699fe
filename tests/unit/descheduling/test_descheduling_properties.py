"""Properties of descheduling plans on small random clusters: deterministic, every eviction has a
different node the pod is allowed on, limits hold, and a second run with the first run's
evictions as history moves none of those workloads again (no eviction loop)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from berth.schemas.descheduler import parse_policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.core.descheduling import plan_evictions, workload_of
from berth.deschedule import run_deschedule

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
POLICY = parse_policy(
    {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "maxNoOfPodsToEvictPerNode": 2,
        "profiles": [
            {
                "name": "p",
                "pluginConfig": [
                    {"name": "LowNodeUtilization", "args": {"thresholds": {"cpu": 30}, "targetThresholds": {"cpu": 60}}}
                ],
                "plugins": {
                    "deschedule": {
                        "enabled": ["RemovePodsViolatingNodeTaints", "RemovePodsViolatingInterPodAntiAffinity"]
                    },
                    "balance": {"enabled": ["LowNodeUtilization"]},
                },
            }
        ],
    }
)


@st.composite
def clusters(draw: Any) -> list[dict[str, Any]]:
    count = draw(st.integers(2, 4))
    tainted = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    docs: list[dict[str, Any]] = []
    for i in range(count):
        doc: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"}},
        }
        if tainted[i]:
            doc["spec"] = {"taints": [TAINT]}
        docs.append(doc)
    for j in range(draw(st.integers(0, 8))):
        app = draw(st.sampled_from(["a", "b"]))
        spec: dict[str, Any] = {
            "nodeName": f"n{draw(st.integers(0, count - 1))}",
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"requests": {"cpu": f"{draw(st.sampled_from([500, 1000, 1500]))}m"}},
                }
            ],
        }
        if app == "a" and draw(st.booleans()):
            spec["affinity"] = ANTI
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{app}-{j}",
                    "labels": {"app": app},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": f"{app}-{j}",
                            "uid": "u",
                            "controller": True,
                        }
                    ],
                },
                "spec": spec,
            }
        )
    return docs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_plans_are_deterministic_bounded_and_loop_free(cluster: list[dict[str, Any]]) -> None:
    first = run_deschedule(cluster, POLICY, now=NOW)
    again = run_deschedule(cluster, POLICY, now=NOW)
    assert [e.to_json() for e in first.plan.evictions] == [e.to_json() for e in again.plan.evictions]

    per_node: dict[str, int] = {}
    tainted = {d["metadata"]["name"] for d in cluster if d["kind"] == "Node" and d.get("spec")}
    for eviction in first.plan.evictions:
        assert eviction.target_node != eviction.node
        assert eviction.target_node not in tainted  # nobody here tolerates the taint
        per_node[eviction.node] = per_node.get(eviction.node, 0) + 1
    assert all(count <= 2 for count in per_node.values())

    moved = {workload_of(e.pod) for e in first.plan.evictions}
    second = plan_evictions(first.engine, POLICY, recent_evictions=dict.fromkeys(moved, NOW), now=NOW)
    assert not moved & {workload_of(e.pod) for e in second.evictions}
