"""``python -m bench.descheduling``: stranded GPUs and GPU allocation over time on the Alibaba
cluster-trace-gpu-v2023 with departures, with and without Berth's GPU defragmentation.

The cluster is the trace's GPU nodes, the workload its pods at their ``creation_time``, each
leaving at its ``deletion_time`` (the ATC'23 protocol has no departures; this run keeps them).
``--sample N`` keeps every N-th pod and ``--node-sample M`` every M-th node (both in name
order). The trace's pods are short-lived next to its cluster (at most ~50 run at once, under 1 %
of its 6,212 GPUs), so ``--stretch S`` multiplies every pod's lifetime by S (arrivals unchanged):
the same arrival pattern and pod mix, many more pods at once. The defaults (1/8 of the pods, 1/32
of the nodes: 38 nodes, 187 GPUs; lifetimes x1000) keep GPU pods waiting for about 77 days of
trace time, the regime where fragmentation decides who runs. The placement engine is
Berth's (default profile), without preemption:

* a pod arriving is placed at once or queued (first come, first served);
* when a pod leaves, up to ``--retries`` queued pods (oldest first) are tried again;
* every ``--interval-hours`` of trace time, with defragmentation on, ``plan_evictions`` runs the
  policy ``GpuDefragmentation`` for the ``--pending-per-round`` oldest queued whole-GPU pods: the
  pods it moves are re-placed where the engine put them (an eviction and an instant
  re-placement), the queued pods it made room for start. Both runs try the queue at the same
  times (defragmentation off: a plain retry of the same pods), so they differ only by the moves.

Reported, time-weighted over the part of the trace where some GPU pod waits in the run without
defragmentation (the contended window) and from the first to the last arrival: GPU allocation (GPU milli held /
capacity), stranded GPU milli (idle milli on partly used GPUs), GPU pods waiting; also pod-hours
waited, pods that left before ever starting, and evictions. Progress on stderr; a table, then one
JSON object as the last line of stdout; ``--plot`` writes the time series as a PNG.
"""

from __future__ import annotations

import csv
import heapq
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from berth.schemas.cluster import OwnerReference, PodInfo
from berth.schemas.descheduler import parse_policy

from bench.gpu_trace.policies.engine import node_infos, pod_template
from bench.gpu_trace.trace import (
    NODE_LISTS,
    POD_LIST_DEFAULT,
    NodeTable,
    PodTable,
    default_data_dir,
    load_nodes,
    load_pods,
)
from berth.core.config import default_document
from berth.core.descheduling import gpu_fragments, plan_evictions
from berth.core.engine import Engine

HOUR = 3600
POLICY = parse_policy(
    {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [{"name": "defrag", "plugins": {"balance": {"enabled": ["GpuDefragmentation"]}}}],
    }
)


def _subset_nodes(nodes: NodeTable, every: int) -> NodeTable:
    keep = np.arange(0, len(nodes), every)
    return NodeTable(
        names=tuple(nodes.names[i] for i in keep),
        cpu_milli=nodes.cpu_milli[keep],
        memory_mib=nodes.memory_mib[keep],
        gpu_count=nodes.gpu_count[keep],
        model=tuple(nodes.model[i] for i in keep),
    )


def _lifetimes(path: Path) -> dict[str, tuple[int, int]]:
    with path.open(newline="") as f:
        return {r["name"]: (int(r["creation_time"] or 0), int(r["deletion_time"] or 0)) for r in csv.DictReader(f)}


@dataclass
class Series:
    """The cluster after each event: time, GPU milli held, stranded GPU milli, GPU pods waiting."""

    times: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    stranded: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)

    def add(self, t: int, used: int, stranded: int, waiting: int) -> None:
        if self.times and self.times[-1] == t:
            self.used[-1], self.stranded[-1], self.waiting[-1] = used, stranded, waiting
            return
        self.times.append(t)
        self.used.append(used)
        self.stranded.append(stranded)
        self.waiting.append(waiting)

    def mean(self, values: list[int], start: int, end: int) -> float:
        """Time-weighted mean of ``values`` (piecewise constant after each event) over [start, end)."""
        t = np.array(self.times + [end], dtype=np.float64)
        v = np.array(values, dtype=np.float64)
        lo, hi = np.clip(t[:-1], start, end), np.clip(t[1:], start, end)
        span = (hi - lo).sum()
        return float((v * (hi - lo)).sum() / span) if span > 0 else 0.0


@dataclass
class Run:
    series: Series
    evictions: int = 0
    rounds: int = 0
    started_by_defrag: int = 0
    waited_pod_hours: float = 0.0
    never_started: int = 0
    seconds: float = 0.0
    last_arrival: int = 0


def simulate(
    nodes: NodeTable,
    pods: PodTable,
    life: dict[str, tuple[int, int]],
    *,
    every: int,
    stretch: float,
    defragment: bool,
    interval: int,
    retries: int,
    pending_per_round: int,
    progress: bool,
) -> Run:
    started = time.perf_counter()
    engine = Engine(default_document())
    for info in node_infos(nodes):
        engine.upsert_node(info)
    chosen = range(0, len(pods), every)
    infos: dict[str, PodInfo] = {}
    events: list[tuple[int, int, str]] = []
    for i in chosen:
        name = pods.names[i]
        created, deleted = life[name]
        if deleted <= created:
            continue
        deleted = created + int((deleted - created) * stretch)
        pod = pod_template(pods.request(i), name)
        infos[name] = pod.model_copy(update={"owner": OwnerReference(kind="ReplicaSet", name=name)})
        heapq.heappush(events, (created, 1, name))
        heapq.heappush(events, (deleted, 0, name))
    placed: set[str] = set()
    queue: dict[str, int] = {}  # waiting pod -> when it arrived (insertion order: oldest first)
    run = Run(Series())
    next_round = (events[0][0] // interval + 1) * interval if events else 0
    total = len(events)
    done = 0

    def try_start(name: str) -> bool:
        outcome = engine.schedule(infos[name], preempt=False)
        if outcome.placed:
            placed.add(name)
            return True
        return False

    def gpu_waiting() -> int:
        return sum(1 for name in queue if infos[name].whole_gpus or infos[name].gpu_fraction_milli)

    def record(t: int) -> None:
        _, stranded = gpu_fragments(engine)
        run.series.add(t, engine.gpu_milli_used(), stranded, gpu_waiting())

    while events:
        t, kind, name = heapq.heappop(events)
        while t >= next_round:
            oldest = [n for n in queue if infos[n].whole_gpus][:pending_per_round]
            if oldest:
                run.rounds += 1
                if defragment:
                    plan = plan_evictions(engine, POLICY, pending=[infos[n] for n in oldest])
                    run.evictions += len(plan.evictions)
                    for key, _node in plan.pending_placed:
                        moved = key.split("/", 1)[1]
                        run.waited_pod_hours += (next_round - queue.pop(moved)) / HOUR
                        placed.add(moved)
                        run.started_by_defrag += 1
                else:
                    for n in oldest:
                        if try_start(n):
                            run.waited_pod_hours += (next_round - queue.pop(n)) / HOUR
                record(next_round)
            next_round += interval
        if kind == 1:
            run.last_arrival = t
            if not try_start(name):
                queue[name] = t
        elif name in placed:
            placed.discard(name)
            engine.remove_pod(infos[name].uid)
            tried = 0
            for waiting in list(queue):
                if tried >= retries:
                    break
                tried += 1
                if try_start(waiting):
                    run.waited_pod_hours += (t - queue.pop(waiting)) / HOUR
        elif name in queue:
            run.waited_pod_hours += (t - queue.pop(name)) / HOUR
            run.never_started += 1
        record(t)
        done += 1
        if progress and done % 2000 == 0:
            print(f"  {'defrag' if defragment else 'plain '} {done}/{total} events", file=sys.stderr, flush=True)
    run.seconds = time.perf_counter() - started
    return run


def _figures(run: Run, start: int, end: int, capacity: int) -> dict[str, Any]:
    s = run.series

    def window(a: int, b: int) -> dict[str, float]:
        return {
            "gpu_allocation": round(s.mean(s.used, a, b) / capacity, 4),
            "stranded_gpus": round(s.mean(s.stranded, a, b) / 1000, 1),
            "gpu_pods_waiting": round(s.mean(s.waiting, a, b), 1),
        }

    return {
        "contended": window(start, end),
        "arrivals": window(s.times[0], run.last_arrival),
        "waited_pod_hours": round(run.waited_pod_hours, 1),
        "left_before_starting": run.never_started,
        "evictions": run.evictions,
        "defrag_rounds": run.rounds,
        "started_by_defrag": run.started_by_defrag,
        "seconds": round(run.seconds, 1),
    }


def _plot(path: Path, plain: Run, defrag: Run, capacity: int, start: int, end: int) -> None:
    """The three series over the contended window (a week either side)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for run, label in ((plain, "without defragmentation"), (defrag, "with GpuDefragmentation")):
        days = np.array(run.series.times) / 86400
        axes[0].step(days, np.array(run.series.used) / capacity * 100, where="post", label=label, lw=0.8)
        axes[1].step(days, np.array(run.series.stranded) / 1000, where="post", label=label, lw=0.8)
        axes[2].step(days, run.series.waiting, where="post", label=label, lw=0.8)
    axes[0].set_ylabel("GPU allocation (%)")
    axes[1].set_ylabel("stranded GPUs")
    axes[2].set_ylabel("GPU pods waiting")
    axes[2].set_xlabel("trace time (days)")
    axes[2].set_xlim(start / 86400 - 7, end / 86400 + 7)
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(
    sample: Annotated[int, typer.Option("--sample", min=1, help="Keep every N-th pod.")] = 8,
    node_sample: Annotated[int, typer.Option("--node-sample", min=1, help="Keep every N-th node.")] = 32,
    stretch: Annotated[float, typer.Option("--stretch", min=1, help="Multiply every pod's lifetime by this.")] = 1000,
    interval_hours: Annotated[
        float, typer.Option("--interval-hours", min=0.01, help="Trace hours between rounds.")
    ] = 6,
    retries: Annotated[int, typer.Option("--retries", min=0, help="Queued pods tried again when a pod leaves.")] = 4,
    pending_per_round: Annotated[
        int, typer.Option("--pending-per-round", min=1, help="Queued whole-GPU pods a round makes room for.")
    ] = 8,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Trace CSV directory.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the time series to this PNG.")] = None,
) -> None:
    """Stranded GPUs and GPU allocation over time, with and without GPU defragmentation."""
    directory = data_dir or default_data_dir()
    nodes = _subset_nodes(load_nodes(directory / NODE_LISTS["gpu"]), node_sample)
    pods = load_pods(directory / POD_LIST_DEFAULT)
    life = _lifetimes(directory / POD_LIST_DEFAULT)
    options: dict[str, Any] = {"every": sample, "interval": int(interval_hours * HOUR), "retries": retries}
    options["stretch"] = stretch
    options["pending_per_round"] = pending_per_round
    plain = simulate(nodes, pods, life, defragment=False, progress=True, **options)
    defrag = simulate(nodes, pods, life, defragment=True, progress=True, **options)
    capacity = int(nodes.gpu_count.sum()) * 1000
    waiting = [t for t, w in zip(plain.series.times, plain.series.waiting, strict=True) if w]
    start, end = (waiting[0], waiting[-1]) if waiting else (plain.series.times[0], plain.series.times[-1])
    result = {
        "nodes": len(nodes),
        "gpus": capacity // 1000,
        "sample": sample,
        "node_sample": node_sample,
        "stretch": stretch,
        "interval_hours": interval_hours,
        "contended_days": [round(start / 86400, 1), round(end / 86400, 1)],
        "without": _figures(plain, start, end, capacity),
        "with_defragmentation": _figures(defrag, start, end, capacity),
    }
    print(f"{'':28} {'without':>12} {'with defrag':>12}")
    for key in ("gpu_allocation", "stranded_gpus", "gpu_pods_waiting"):
        a, b = result["without"]["contended"][key], result["with_defragmentation"]["contended"][key]
        print(f"{key + ' (contended)':28} {a:>12} {b:>12}")
    for key in ("waited_pod_hours", "left_before_starting", "evictions"):
        print(f"{key:28} {result['without'][key]:>12} {result['with_defragmentation'][key]:>12}")
    if plot is not None:
        _plot(plot, plain, defrag, capacity, start, end)
    print(json.dumps(result))


if __name__ == "__main__":
    typer.run(main)
