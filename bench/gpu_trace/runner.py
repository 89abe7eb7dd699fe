"""Running protocol instances (one policy x one seed) and summarising them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.gpu_trace.policies import make_policy
from bench.gpu_trace.protocol import build_workload
from bench.gpu_trace.simulator import PodShapes, RunResult, simulate
from bench.gpu_trace.trace import Trace, load_trace
from bench.gpu_trace.variants import build_variant

CURVE_MAX_PERCENT = 130
"""Allocation curves are kept for arrived demand 0..130 % (the protocol's range)."""


def run_generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """The run's two random streams: ``Generator(PCG64(seed))`` builds the workload, and an
    independent child stream serves the policy (node ranking, random placements), so every
    policy sees the same workload for the same seed."""
    workload_rng = np.random.Generator(np.random.PCG64(seed))
    return workload_rng, workload_rng.spawn(1)[0]


def variant_generator(seed: int) -> np.random.Generator:
    """The stream that builds a workload variant: the second child of the seed's stream, so the
    default trace's runs (which draw nothing here) stay what they were before variants existed."""
    return np.random.Generator(np.random.PCG64(seed)).spawn(2)[1]


def variant_trace(trace: Trace, variant: str, seed: int) -> Trace:
    """The pods of ``variant`` for ``seed`` (the trace itself for ``default``)."""
    return build_variant(trace, variant, variant_generator(seed))


def run_one(
    trace: Trace, policy: str, seed: int, demand: float, shapes: PodShapes | None = None, variant: str = "default"
) -> RunResult:
    """One protocol instance on ``variant`` of the trace (``shapes``, if given, must be the
    variant's)."""
    if variant != "default":
        trace = variant_trace(trace, variant, seed)
    workload_rng, policy_rng = run_generators(seed)
    workload = build_workload(trace.pods, trace.nodes.total_gpu_milli, demand, workload_rng)
    result = simulate(trace.nodes, trace.pods, workload, make_policy(policy), policy_rng, seed, shapes)
    result.extra["requested_gpu_milli"] = workload.requested_gpu_milli
    result.extra["pods"] = len(workload)
    result.extra["variant"] = variant
    return result


def allocation_curve(result: RunResult, up_to: int = CURVE_MAX_PERCENT) -> tuple[float, ...]:
    """The artifact's discrete curve: for each arrived-demand percent 0..``up_to``, the mean
    allocation (used / capacity) over the events in that bin (NaN for an empty bin)."""
    arrived_pct = np.round(result.arrived_gpu_milli * 100.0 / result.capacity_gpu_milli).astype(np.int64)
    used = result.used_gpu_milli / result.capacity_gpu_milli
    keep = (arrived_pct >= 0) & (arrived_pct <= up_to)
    sums = np.bincount(arrived_pct[keep], weights=used[keep], minlength=up_to + 1)
    counts = np.bincount(arrived_pct[keep], minlength=up_to + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return tuple(float(x) for x in np.where(counts > 0, sums / np.maximum(counts, 1), np.nan))


@dataclass(frozen=True)
class RunSummary:
    """What the parent process keeps of a run (the per-event logs stay in the worker)."""

    policy: str
    seed: int
    allocation_at_demand: float
    final_allocation: float
    failed: int
    pods: int
    elapsed_s: float
    variant: str = "default"
    allocation_at_100: float = float("nan")
    """The allocation when arrived demand reaches 100 % (the bin the paper's variant figures,
    11-14, plot)."""
    curve: tuple[float, ...] = ()
    """:func:`allocation_curve` of the run."""


# Worker-process state: the trace is loaded once per worker, not once per task; the last
# variant built is kept with its shapes (tasks are ordered so that policies share it).
_worker_trace: Trace | None = None
_worker_shapes: PodShapes | None = None
_worker_variant: tuple[tuple[str, int], Trace, PodShapes] | None = None


def _init_worker(data_dir: str, node_list: str) -> None:
    global _worker_trace, _worker_shapes, _worker_variant
    _worker_trace = load_trace(Path(data_dir), node_list)
    _worker_shapes = PodShapes.of(_worker_trace.pods)
    _worker_variant = None


def _variant_of(variant: str, seed: int) -> tuple[Trace, PodShapes]:
    global _worker_variant
    assert _worker_trace is not None and _worker_shapes is not None, "worker not initialised"
    if variant == "default":
        return _worker_trace, _worker_shapes
    if _worker_variant is None or _worker_variant[0] != (variant, seed):
        trace = variant_trace(_worker_trace, variant, seed)
        _worker_variant = ((variant, seed), trace, PodShapes.of(trace.pods))
    return _worker_variant[1], _worker_variant[2]


def _run_task(policy: str, seed: int, demand: float, variant: str = "default") -> RunSummary:
    trace, shapes = _variant_of(variant, seed)
    result = run_one(trace, policy, seed, demand, shapes)
    return RunSummary(
        policy=policy,
        seed=seed,
        allocation_at_demand=result.allocation_at(round(demand * 100)),
        final_allocation=result.final_allocation,
        failed=result.failed,
        pods=int(result.extra["pods"]),
        elapsed_s=result.elapsed_s,
        variant=variant,
        allocation_at_100=result.allocation_at(100),
        curve=allocation_curve(result),
    )


def run_matrix(
    data_dir: Path,
    node_list: str,
    policies: Iterable[str],
    seeds: Iterable[int],
    demand: float,
    workers: int,
    on_done: Callable[[RunSummary], None] = lambda _: None,
    variants: Iterable[str] = ("default",),
) -> list[RunSummary]:
    """Every (variant, policy, seed) triple on ``workers`` processes; the pods of a (variant,
    seed) are the same for every policy.  Results sorted by (variant, policy, seed).

    The slowest policy's tasks are submitted first, so the pool does not end on one long run."""
    variant_list, policy_list, seed_list = list(variants), list(policies), list(seeds)
    tasks = [(v, p, s) for v in variant_list for s in seed_list for p in policy_list]
    tasks.sort(key=lambda t: t[1] != "berth-engine")  # stable: variant/seed order kept
    results: list[RunSummary] = []
    if workers <= 1:
        _init_worker(str(data_dir), node_list)
        for variant, policy, seed in tasks:
            results.append(_run_task(policy, seed, demand, variant))
            on_done(results[-1])
    else:
        with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(str(data_dir), node_list)) as pool:
            futures = [pool.submit(_run_task, p, s, demand, v) for v, p, s in tasks]
            for future in as_completed(futures):
                results.append(future.result())
                on_done(results[-1])
    v_order = {v: i for i, v in enumerate(variant_list)}
    p_order = {p: i for i, p in enumerate(policy_list)}
    return sorted(results, key=lambda r: (v_order[r.variant], p_order[r.policy], r.seed))
