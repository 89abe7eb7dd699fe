"""``python -m bench.engine.sampling``: the speed/quality trade-off of ``percentageOfNodesToScore``.

For each percentage (default: unset, 100, 50, 10) it measures

- speed: the ``gpu-mixed`` case of :mod:`bench.engine` (5,000 GPU nodes, 10,000 pods; pods/s,
  p99 and the GPUs it allocated);
- quality: the GPU trace benchmark's ``berth-engine`` policy (:mod:`bench.gpu_trace`, Alibaba
  v2023 trace, 1,213 GPU nodes, 130 % demand) with that percentage in its configuration: GPU
  allocation % at 100 % and at 130 % demand, mean over ``--seeds``.

Prints one JSON line per (bench, percentage) and then a Markdown table. Minutes of CPU: the GPU
trace is about 25 CPU-seconds per seed and percentage. One figure alone, e.g. gpu-mixed at 10 %:
``python -m bench.engine.sampling --percentages 10 --skip-gpu-trace`` (its ``placements_digest``
with ``--percentages unset`` is the one ``python -m bench.engine --case gpu-mixed`` prints).
Results and reading: bench/gpu_trace/README.md, "Fast scheduling".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _percentages(text: str) -> list[int | None]:
    return [None if part in ("unset", "none", "") else int(part) for part in text.split(",")]


def _label(percentage: int | None) -> str:
    return "unset (all nodes)" if percentage is None else f"{percentage} %"


def gpu_trace_run(percentage: int | None, seed: int, data: Path | None = None) -> dict[str, Any]:
    """One seed of the GPU trace's berth-engine policy with ``percentage``."""
    from bench.gpu_trace.policies.engine import BerthEngine
    from bench.gpu_trace.protocol import DEMAND_PUBLISHED, build_workload
    from bench.gpu_trace.runner import run_generators
    from bench.gpu_trace.simulator import PodShapes, simulate
    from bench.gpu_trace.trace import default_data_dir, load_trace
    from berth.core.config import default_document

    trace = load_trace(data or default_data_dir(), "gpu")
    shapes = PodShapes.of(trace.pods)
    workload_rng, policy_rng = run_generators(seed)
    workload = build_workload(trace.pods, trace.nodes.total_gpu_milli, DEMAND_PUBLISHED, workload_rng)
    policy = BerthEngine()
    if percentage is not None:
        document = default_document()
        document["percentageOfNodesToScore"] = percentage
        policy.config = document
    result = simulate(trace.nodes, trace.pods, workload, policy, policy_rng, seed, shapes)
    return {
        "bench": "gpu_trace",
        "percentage_of_nodes_to_score": percentage,
        "seed": seed,
        "nodes": len(trace.nodes),
        "allocation_at_100": round(100 * result.allocation_at(100), 3),
        "allocation_at_130": round(100 * result.allocation_at(round(DEMAND_PUBLISHED * 100)), 3),
        "elapsed_s": round(result.elapsed_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine.sampling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--percentages", default="unset,100,50,10", help="comma-separated; 'unset' for Berth's default (every node)"
    )
    parser.add_argument("--seeds", default="42,43,44", help="GPU trace seeds, comma-separated")
    parser.add_argument("--skip-gpu-trace", action="store_true")
    parser.add_argument("--skip-engine", action="store_true")
    args = parser.parse_args(argv)
    from bench.engine import gpu_mixed

    percentages = _percentages(args.percentages)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    engine: dict[int | None, dict[str, Any]] = {}
    trace: dict[int | None, list[dict[str, Any]]] = {}
    for percentage in percentages:
        if not args.skip_engine:
            result = gpu_mixed.run(progress=False, percentage_of_nodes_to_score=percentage)
            result["bench"] = "engine"
            print(json.dumps(result), flush=True)
            engine[percentage] = result
        if not args.skip_gpu_trace:
            for seed in seeds:
                run = gpu_trace_run(percentage, seed)
                print(json.dumps(run), flush=True)
                trace.setdefault(percentage, []).append(run)
    print()
    print(
        "| percentageOfNodesToScore | gpu-mixed pods/s | pods/CPU-s | p99 µs | GPUs allocated "
        "| gpu_trace alloc. @100 % | @130 % | s/seed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for percentage in percentages:
        e = engine.get(percentage, {})
        runs = trace.get(percentage, [])

        def mean(key: str, runs: list[dict[str, Any]] = runs) -> str:
            return f"{sum(r[key] for r in runs) / len(runs):.2f}" if runs else "-"

        print(
            f"| {_label(percentage)} | {e.get('pods_per_s', '-')} | {e.get('pods_per_cpu_s', '-')} "
            f"| {e.get('p99_us', '-')} | {e.get('gpus_allocated', '-')} | {mean('allocation_at_100')} % "
            f"| {mean('allocation_at_130')} % | {mean('elapsed_s')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
