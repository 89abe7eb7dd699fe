"""Benchmark case ``scheduling-basic``: kube-scheduler_perf's SchedulingBasic shape, through the core.

Cluster: 5,000 nodes of 4 CPU / 32 GiB / 110 pods (scheduler_perf's ``node-default.yaml``), 1,000
pods already running, then 10,000 pending pods of 100m CPU / 500 MiB (``pod-default.yaml``)
scheduled one by one through the engine's commit path (``Engine.schedule``: filter, score,
reserve, assume), single process, the default ``berth`` profile. The initial pods are placed through the core too
(untimed), so they land where the scheduler would put them.

kube-scheduler's CI floor for this workload at 5,000 nodes is 680 pods/s
(``test/integration/scheduler_perf/misc/performance-config.yaml``); Berth's goal is 1,000 pods/s
with a peak RSS under 1 GiB.
"""

from __future__ import annotations

import resource
import sys
import time
from datetime import UTC, datetime
from hashlib import blake2b
from typing import Any

import numpy as np
from berth.schemas.cluster import NodeInfo, PodInfo

from berth.core.config import default_document
from berth.core.engine import Engine

NODES = 5_000
INIT_PODS = 1_000
PODS = 10_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
GIB = 2**30
MIB = 2**20


def build_nodes(count: int) -> list[NodeInfo]:
    return [
        NodeInfo(
            name=f"scheduler-perf-{i:05d}",
            labels={"kubernetes.io/hostname": f"scheduler-perf-{i:05d}"},
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
        )
        for i in range(count)
    ]


def peak_rss_mib() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    return measure_placements("scheduling-basic", engine, build_pods(pods, "pod"), nodes=nodes, progress=progress)


def measure_placements(
    case: str, engine: Engine, pending: list[PodInfo], *, nodes: int, progress: bool
) -> dict[str, Any]:
    """Schedule ``pending`` one cycle each through the engine, which assumes every placement (as
    the decision cell does), and return the case's figures: throughput, per-cycle p50/p99, peak
    memory, CPU time, and a digest of where every pod went (equal digests: equal decisions)."""
    durations = np.empty(len(pending), dtype=np.int64)
    placed = 0
    digest = blake2b(digest_size=16)
    clock = time.perf_counter_ns
    cpu_begin = time.process_time()
    begin = clock()
    for i, pod in enumerate(pending):
        t0 = clock()
        outcome = engine.schedule(pod, preempt=False)
        durations[i] = clock() - t0
        if outcome.placed:
            placed += 1
            where = outcome.placements[0]
            digest.update(f"{pod.uid} {where.node} {where.gpu_devices} {where.gpu_milli};".encode())
        if progress and (i + 1) % 2000 == 0:
            print(f"  {i + 1}/{len(pending)} scheduled", file=sys.stderr, flush=True)
    elapsed = (clock() - begin) / 1e9
    cpu = time.process_time() - cpu_begin
    return {
        "case": case,
        "nodes": nodes,
        "pods": len(pending),
        "placed": placed,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(len(pending) / elapsed, 1),
        "p50_us": round(float(np.percentile(durations, 50)) / 1000, 1),
        "p99_us": round(float(np.percentile(durations, 99)) / 1000, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        # CPU time of this process: the figure to compare when the machine is shared.
        "cpu_seconds": round(cpu, 3),
        "pods_per_cpu_s": round(len(pending) / cpu, 1) if cpu else None,
        "placements_digest": digest.hexdigest(),
    }
