"""Benchmark case ``node-affinity``: kube-scheduler_perf's SchedulingNodeAffinity shape, through the core.

Mirrors ``test/integration/scheduler_perf/affinity/performance-config.yaml`` (Kubernetes v1.34),
test case ``SchedulingNodeAffinity``, workload ``5000Nodes_10000Pods``:

* 5,000 nodes from ``templates/node-default.yaml`` (4 CPU / 32 GiB / 110 pods), each labelled
  ``topology.kubernetes.io/zone=zone1`` (the case's ``labelNodePrepareStrategy``);
* 5,000 initial pods, then 10,000 measured pods, all from ``templates/pod-with-node-affinity.yaml``:
  100m CPU / 500 MiB and a required node affinity ``topology.kubernetes.io/zone In [zone1, zone2]``.

The initial pods go through the core untimed (as scheduler_perf waits for them before measuring);
the 10,000 are scheduled one cycle each (filter, score, reserve, assume), single process, the
default ``berth`` profile. kube's CI floor for this workload is 220 pods/s.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from berth.schemas.cluster import (
    Affinity,
    NodeAffinity,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodInfo,
)

from bench.engine.scheduling_basic import GIB, MIB, T0, measure_placements
from berth.core.config import default_document
from berth.core.engine import Engine

NODES = 5_000
INIT_PODS = 5_000
PODS = 10_000
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"

#: pod-with-node-affinity.yaml's requiredDuringSchedulingIgnoredDuringExecution.
AFFINITY = Affinity(
    node_affinity=NodeAffinity(
        required=(
            NodeSelectorTerm(
                match_expressions=(NodeSelectorRequirement(key=ZONE, operator="In", values=("zone1", "zone2")),)
            ),
        )
    )
)


def build_nodes(count: int) -> list[NodeInfo]:
    return [
        NodeInfo(
            name=f"scheduler-perf-{i:05d}",
            labels={HOST: f"scheduler-perf-{i:05d}", ZONE: "zone1"},
            capacity={"cpu": 4000, "memory": 32 * GIB, "pods": 110},
            allocatable={"cpu": 4000, "memory": 32 * GIB, "pods": 110},
        )
        for i in range(count)
    ]


def build_pods(count: int, prefix: str) -> list[PodInfo]:
    return [
        PodInfo(
            uid=f"{prefix}-{i:06d}",
            namespace="sched-test",
            name=f"{prefix}-{i:06d}",
            scheduler_name="berth",
            requests={"cpu": 100, "memory": 500 * MIB},
            creation_time=T0,
            affinity=AFFINITY,
        )
        for i in range(count)
    ]


def run(nodes: int = NODES, pods: int = PODS, init_pods: int = INIT_PODS, progress: bool = True) -> dict[str, Any]:
    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    engine = Engine(default_document())
    started = time.perf_counter()
    for node in build_nodes(nodes):
        engine.upsert_node(node)
    say(f"{nodes} nodes added in {time.perf_counter() - started:.2f}s")
    for pod in build_pods(init_pods, "init"):
        engine.schedule(pod, preempt=False)
    say(f"{init_pods} initial pods placed")
    result = measure_placements("node-affinity", engine, build_pods(pods, "pod"), nodes=nodes, progress=progress)
    result["init_pods"] = init_pods
    return result
