"""Benchmark case ``gpu-mixed``: GPU-device placement throughput at kube-scheduler_perf scale.

Cluster: 5,000 nodes, each 64 cores / 512 GiB / 8 A100-40GB in two NVLink islands of four (GPUs
0-3 on NUMA node 0, 4-7 on NUMA node 1), spread over 4 zones and 50 network blocks.
Workload: 10,000 pending pods, generated from a fixed seed, mixing

- whole-GPU pods asking for 1, 2, 4 or 8 devices (the 4- and 8-GPU ones with ``nvlink`` /
  ``same-node`` locality, the 2-GPU ones with ``same-socket``),
- fractional pods (``gpu-fraction`` 0.25 or 0.5, some with ``gpu-memory``),
- CPU-only pods,

about 22 % of the cluster's 40,000 GPUs in total: what is hard is the mix (devices fill and
fragment, locality sets must be found), not a shortage. Every pod goes through the full default profile (Kubernetes
filters and scores plus Berth's GPU plugins); the figure is pods decided per second, wall clock, single process.
Goal: >= 1,000 pods/s with resident memory < 1 GiB.

``python -m bench.engine --case gpu-mixed`` runs it through the engine bench runner; this module
also runs standalone (``python -m bench.engine.gpu_mixed``) and prints one JSON line last.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from datetime import UTC, datetime
from hashlib import blake2b
from typing import Any

from berth.schemas.cluster import GpuDevice, NodeInfo, PodInfo

NODES = 5_000
PODS = 10_000
SEED = 20_260_101
GPUS_PER_NODE = 8
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# (weight, kind, amount, locality): the pod mix, weights in percent.
MIX: tuple[tuple[int, str, int, str], ...] = (
    (18, "whole", 1, "any"),
    (10, "whole", 2, "same-socket"),
    (5, "whole", 4, "nvlink"),
    (2, "whole", 8, "same-node"),
    (25, "share", 250, "any"),
    (15, "share", 500, "any"),
    (25, "cpu", 0, "any"),
)


def _island(i: int) -> tuple[int, ...]:
    base = 4 * (i // 4)
    return tuple(j for j in range(base, base + 4) if j != i)


def build_nodes(count: int = NODES) -> list[NodeInfo]:
    """``count`` identical DGX-like nodes, named so that sorting by name keeps creation order."""
    gpus = tuple(
        GpuDevice(index=i, model="NVIDIA-A100-SXM4-40GB", memory_mib=40_960, numa_node=i // 4, nvlink_peers=_island(i))
        for i in range(GPUS_PER_NODE)
    )
    nodes = []
    for n in range(count):
        zone = f"zone-{n % 4}"
        labels = {
            "kubernetes.io/hostname": f"gpu-{n:05d}",
            "topology.kubernetes.io/zone": zone,
            "berth.io/network-block": f"block-{n % 50:02d}",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        }
        allocatable = {"cpu": 64_000, "memory": 512 * 2**30, "pods": 110, "nvidia.com/gpu": GPUS_PER_NODE}
        nodes.append(
            NodeInfo(
                name=f"gpu-{n:05d}",
                labels=labels,
                capacity=allocatable,
                allocatable=allocatable,
                gpus=gpus,
                zone=zone,
                capacity_type="spot" if n % 5 == 0 else "on-demand",
                price_per_hour=12.0 if n % 5 == 0 else 32.77,
            )
        )
    return nodes


def build_pods(count: int = PODS, seed: int = SEED) -> list[PodInfo]:
    """``count`` pending pods drawn from :data:`MIX` with a fixed seed (reproducible)."""
    rng = random.Random(seed)
    weights = [m[0] for m in MIX]
    pods = []
    for i in range(count):
        _, kind, amount, locality = rng.choices(MIX, weights=weights)[0]
        requests: dict[str, int] = {
            "cpu": rng.choice((500, 1000, 2000, 4000)),
            "memory": rng.choice((1, 2, 4, 8)) * 2**30,
        }
        annotations: dict[str, str] = {}
        fraction = memory = None
        if kind == "whole":
            requests["nvidia.com/gpu"] = amount
            requests["cpu"] = 4000 * amount
            requests["memory"] = 32 * 2**30 * amount
        elif kind == "share":
            fraction = amount
            annotations["gpu-fraction"] = f"{amount / 1000:g}"
            if rng.random() < 0.3:
                memory = amount * 40  # MiB, a little under the proportional share
                annotations["gpu-memory"] = str(memory)
        pods.append(
            PodInfo(
                uid=f"uid-{i:05d}",
                namespace="bench",
                name=f"pod-{i:05d}",
                labels={"app": f"app-{i % 20}"},
                annotations=annotations,
                scheduler_name="berth",
                requests=requests,
                gpu_fraction_milli=fraction,
                gpu_memory_mib=memory,
                gpu_locality=locality if kind == "whole" else "any",
                creation_time=T0,
            )
        )
    return pods


def max_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(
    nodes: int = NODES, pods: int = PODS, progress: bool = True, percentage_of_nodes_to_score: int | None = None
) -> dict[str, Any]:
    """Build the case, schedule every pod once in queue order, and return the figures.
    ``percentage_of_nodes_to_score``: the default profile with that top-level
    ``percentageOfNodesToScore`` (None: unset, every node evaluated, Berth's default)."""
    import numpy as np

    from berth.simulate import Session  # the same loop as `berth simulate`

    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    started = time.perf_counter()
    config = None
    if percentage_of_nodes_to_score is not None:
        from berth.core.config import default_document

        config = default_document()
        config["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    session = Session.of(build_nodes(nodes), [], config=config)
    pending = build_pods(pods)
    say(f"{nodes} nodes and {pods} pods built in {time.perf_counter() - started:.2f}s")
    durations = np.empty(len(pending), dtype=np.int64)
    placed = 0
    digest = blake2b(digest_size=16)
    clock = time.perf_counter_ns
    begin = clock()
    cpu_begin = time.process_time()
    # Every pod has the same priority, so queue order is input order: one decision per pod.
    for i, pod in enumerate(pending):
        t0 = clock()
        outcome = session.place_one(pod)
        durations[i] = clock() - t0
        placed += outcome.node is not None
        digest.update(f"{outcome.pod} {outcome.node} {outcome.gpus} {outcome.gpu_milli};".encode())
        if progress and (i + 1) % 2000 == 0:
            say(f"  {i + 1}/{len(pending)} scheduled")
    elapsed = (clock() - begin) / 1e9
    cpu_seconds = time.process_time() - cpu_begin
    return {
        "case": "gpu-mixed",
        **(
            {}
            if percentage_of_nodes_to_score is None
            else {"percentage_of_nodes_to_score": percentage_of_nodes_to_score}
        ),
        "nodes": nodes,
        "pods": pods,
        "placed": placed,
        "unschedulable": pods - placed,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(pods / elapsed, 1) if elapsed else None,
        # CPU time of this process over the same loop: on a shared machine the wall clock also
        # counts the time other processes held the core.
        "cpu_seconds": round(cpu_seconds, 3),
        "pods_per_cpu_s": round(pods / cpu_seconds, 1) if cpu_seconds else None,
        "p50_us": round(float(np.percentile(durations, 50)) / 1000, 1),
        "p99_us": round(float(np.percentile(durations, 99)) / 1000, 1),
        "gpus_allocated": round(session.gpu_milli_used() / 1000, 2),
        "gpus_total": nodes * GPUS_PER_NODE,
        "peak_rss_mib": round(max_rss_mib(), 1),
        "goal_pods_per_s": 1000,
        "goal_peak_rss_mib": 1024,
        "placements_digest": digest.hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    nodes = int(args[0]) if args else NODES
    pods = int(args[1]) if len(args) > 1 else PODS
    result = run(nodes, pods)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
