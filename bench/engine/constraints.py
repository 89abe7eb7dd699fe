"""Benchmark case ``constraints``: the SchedulingBasic cluster with Kubernetes placement rules.

5,000 nodes (4 CPU / 32 GiB / 110 pods) in 10 zones; 10,000 pending pods of 50 workloads, a
third each with required pod anti-affinity per host, a DoNotSchedule zone spread (maxSkew 1), or
a preferred zone affinity to their own workload — the inter-pod and spreading paths that
kube-scheduler_perf measures separately (SchedulingPodAntiAffinity, TopologySpreading,
SchedulingPreferredPodAffinity). Schedule + assume through the default profile.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from bench.engine.scheduling_basic import GIB, MIB, T0, peak_rss_mib
from berth.core import ClusterState, Scheduler, default_config
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

NODES = 5_000
PODS = 10_000
ZONES = 10
WORKLOADS = 50
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def build_nodes(count: int) -> list[NodeInfo]:
    return [NodeInfo(name=f"node-{i:05d}",
                     labels={HOST: f"node-{i:05d}", ZONE: f"zone-{i % ZONES}"},
                     allocatable={"cpu": 4000, "memory": 32 * GIB, "pods": 110})
            for i in range(count)]


def build_pods(count: int) -> list[PodInfo]:
    pods = []
    for i in range(count):
        app = f"app-{i % WORKLOADS}"
        selector = LabelSelector(match_labels={"app": app})
        fields: dict[str, Any] = {}
        kind = i % 3
        if kind == 0:
            fields["affinity"] = Affinity(pod_anti_affinity=PodAffinity(
                required=(PodAffinityTerm(label_selector=selector, topology_key=HOST),)))
        elif kind == 1:
            fields["topology_spread_constraints"] = (TopologySpreadConstraint(
                max_skew=1, topology_key=ZONE, when_unsatisfiable="DoNotSchedule",
                label_selector=selector),)
        else:
            fields["affinity"] = Affinity(pod_affinity=PodAffinity(preferred=(
                WeightedPodAffinityTerm(weight=50, term=PodAffinityTerm(
                    label_selector=selector, topology_key=ZONE)),)))
        pods.append(PodInfo(uid=f"pod-{i:06d}", namespace="bench", name=f"pod-{i:06d}",
                            labels={"app": app}, scheduler_name="berth",
                            requests={"cpu": 100, "memory": 500 * MIB}, creation_time=T0,
                            **fields))
    return pods


def run(nodes: int = NODES, pods: int = PODS, progress: bool = True) -> dict[str, Any]:
    scheduler = Scheduler(default_config())
    state = ClusterState()
    for node in build_nodes(nodes):
        state.upsert_node(node)
    pending = build_pods(pods)
    durations = np.empty(len(pending), dtype=np.int64)
    placed = 0
    clock = time.perf_counter_ns
    cpu_begin, begin = time.process_time(), clock()
    for i, pod in enumerate(pending):
        t0 = clock()
        decision = scheduler.schedule(pod, state)
        if decision.status == "placed":
            state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)  # type: ignore[arg-type]
            placed += 1
        durations[i] = clock() - t0
        if progress and (i + 1) % 2000 == 0:
            print(f"  {i + 1}/{len(pending)} scheduled", file=sys.stderr, flush=True)
    elapsed = (clock() - begin) / 1e9
    cpu = time.process_time() - cpu_begin
    return {
        "case": "constraints",
        "nodes": nodes,
        "pods": pods,
        "placed": placed,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(pods / elapsed, 1),
        "p50_us": round(float(np.percentile(durations, 50)) / 1000, 1),
        "p99_us": round(float(np.percentile(durations, 99)) / 1000, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "cpu_seconds": round(cpu, 3),
        "pods_per_cpu_s": round(pods / cpu, 1) if cpu else None,
    }
