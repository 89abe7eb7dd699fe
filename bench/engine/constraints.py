"""Benchmark case ``constraints``: the SchedulingBasic cluster with Kubernetes placement rules.

5,000 nodes (4 CPU / 32 GiB / 110 pods) in 10 zones; 10,000 pending pods of 50 workloads, a
third each with required pod anti-affinity per host, a DoNotSchedule zone spread (maxSkew 1), or
a preferred zone affinity to their own workload — the inter-pod and spreading paths that
kube-scheduler_perf measures separately (SchedulingPodAntiAffinity, TopologySpreading,
SchedulingPreferredPodAffinity). Schedule + assume through the default profile.
"""

from __future__ import annotations

from typing import Any

from berth.schemas.cluster import (
    Affinity,
    LabelSelector,
    NodeInfo,
    PodAffinity,
    PodAffinityTerm,
    PodInfo,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)

from bench.engine.scheduling_basic import GIB, MIB, T0, measure_placements
from berth.core.config import default_document
from berth.core.engine import Engine

NODES = 5_000
PODS = 10_000
ZONES = 10
WORKLOADS = 50
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def build_nodes(count: int) -> list[NodeInfo]:
    return [
        NodeInfo(
            name=f"node-{i:05d}",
            labels={HOST: f"node-{i:05d}", ZONE: f"zone-{i % ZONES}"},
            allocatable={"cpu": 4000, "memory": 32 * GIB, "pods": 110},
        )
        for i in range(count)
    ]


def build_pods(count: int) -> list[PodInfo]:
    pods = []
    for i in range(count):
        app = f"app-{i % WORKLOADS}"
        selector = LabelSelector(match_labels={"app": app})
        fields: dict[str, Any] = {}
        kind = i % 3
        if kind == 0:
            fields["affinity"] = Affinity(
                pod_anti_affinity=PodAffinity(required=(PodAffinityTerm(label_selector=selector, topology_key=HOST),))
            )
        elif kind == 1:
            fields["topology_spread_constraints"] = (
                TopologySpreadConstraint(
                    max_skew=1, topology_key=ZONE, when_unsatisfiable="DoNotSchedule", label_selector=selector
                ),
            )
        else:
            fields["affinity"] = Affinity(
                pod_affinity=PodAffinity(
                    preferred=(
                        WeightedPodAffinityTerm(
                            weight=50, term=PodAffinityTerm(label_selector=selector, topology_key=ZONE)
                        ),
                    )
                )
            )
        pods.append(
            PodInfo(
                uid=f"pod-{i:06d}",
                namespace="bench",
                name=f"pod-{i:06d}",
                labels={"app": app},
                scheduler_name="berth",
                requests={"cpu": 100, "memory": 500 * MIB},
                creation_time=T0,
                **fields,
            )
        )
    return pods


def run(nodes: int = NODES, pods: int = PODS, progress: bool = True) -> dict[str, Any]:
    engine = Engine(default_document())
    for node in build_nodes(nodes):
        engine.upsert_node(node)
    return measure_placements("constraints", engine, build_pods(pods), nodes=nodes, progress=progress)
