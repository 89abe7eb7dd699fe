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


def run_generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """The run's two random streams: ``Generator(PCG64(seed))`` builds the workload, and an
    independent child stream serves the policy (node ranking, random placements), so every
    policy sees the same workload for the same seed."""
    workload_rng = np.random.Generator(np.random.PCG64(seed))
    return workload_rng, workload_rng.spawn(1)[0]


def run_one(trace: Trace, policy: str, seed: int, demand: float, shapes: PodShapes | None = None) -> RunResult:
    """One protocol instance."""
    workload_rng, policy_rng = run_generators(seed)
    workload = build_workload(trace.pods, trace.nodes.total_gpu_milli, demand, workload_rng)
    result = simulate(trace.nodes, trace.pods, workload, make_policy(policy), policy_rng, seed, shapes)
    result.extra["requested_gpu_milli"] = workload.requested_gpu_milli
    result.extra["pods"] = len(workload)
    return result


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


# Worker-process state: the trace is loaded once per worker, not once per task.
_worker_trace: Trace | None = None
_worker_shapes: PodShapes | None = None


def _init_worker(data_dir: str, node_list: str) -> None:
    global _worker_trace, _worker_shapes
    _worker_trace = load_trace(Path(data_dir), node_list)
    _worker_shapes = PodShapes.of(_worker_trace.pods)


def _run_task(policy: str, seed: int, demand: float) -> RunSummary:
    assert _worker_trace is not None, "worker not initialised"
    result = run_one(_worker_trace, policy, seed, demand, _worker_shapes)
    return RunSummary(
        policy=policy,
        seed=seed,
        allocation_at_demand=result.allocation_at(round(demand * 100)),
        final_allocation=result.final_allocation,
        failed=result.failed,
        pods=int(result.extra["pods"]),
        elapsed_s=result.elapsed_s,
    )


def run_matrix(
    data_dir: Path,
    node_list: str,
    policies: Iterable[str],
    seeds: Iterable[int],
    demand: float,
    workers: int,
    on_done: Callable[[RunSummary], None] = lambda _: None,
) -> list[RunSummary]:
    """Every (policy, seed) pair on ``workers`` processes; results sorted by (policy, seed)."""
    tasks = [(p, s) for p in policies for s in seeds]
    results: list[RunSummary] = []
    if workers <= 1:
        _init_worker(str(data_dir), node_list)
        for policy, seed in tasks:
            results.append(_run_task(policy, seed, demand))
            on_done(results[-1])
    else:
        with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(str(data_dir), node_list)) as pool:
            futures = [pool.submit(_run_task, p, s, demand) for p, s in tasks]
            for future in as_completed(futures):
                results.append(future.result())
                on_done(results[-1])
    order = {p: i for i, p in enumerate(dict.fromkeys(p for p, _ in tasks))}
    return sorted(results, key=lambda r: (order[r.policy], r.seed))
