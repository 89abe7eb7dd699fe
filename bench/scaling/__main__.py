"""``python -m bench.scaling``: a day of bursty chat traffic with spot interruptions, replayed in
simulated time under Berth's scaling policy and under KEDA-like and Dynamo-like references.

Progress goes to stderr; a table and, as the very last line, one JSON object go to stdout.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .cluster import ClusterShape
from .policies import PoolConfig
from .runner import DEFAULT_POLICIES, POLICIES, result_document, run_policies, scenario
from .sim import RunConfig, RunResult
from .workload import TrafficShape

app = typer.Typer(add_completion=False, help=__doc__)


def parse_policies(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise typer.BadParameter(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    return names


def render(console: Console, results: dict[str, RunResult], seed: int, hours: float) -> None:
    table = Table(title=f"Scaling a chat pool for {hours:g} h (seed {seed}); lower is better except survived",
                  title_justify="left")
    for column in ("policy", "SLO-violation min", "GPU-hours", "cost $", "spot GPU-h", "scale events",
                   "survived / hit", "TTFT p50", "TTFT p99", "req > SLO", "retried", "peak replicas"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, r in results.items():
        table.add_row(name, str(r.slo_violation_minutes), f"{r.gpu_hours:.1f}", f"{r.cost_usd:.0f}",
                      f"{r.spot_gpu_hours:.1f}", str(r.scale_events),
                      f"{r.interruptions_survived} / {r.interruptions_hit}", f"{r.ttft_p50_s:.2f} s",
                      f"{r.ttft_p99_s:.2f} s", f"{r.requests_over_slo / max(r.requests, 1):.2%}",
                      str(r.requests_retried), str(r.peak_replicas))
    console.print(table)


@app.command()
def main(
    seed: Annotated[int, typer.Option(help="Seed of the traffic and of the interruption times.")] = 42,
    policies: Annotated[str, typer.Option(
        help=f"Comma-separated policies to run, from {', '.join(POLICIES)}.")] = ",".join(DEFAULT_POLICIES),
    hours: Annotated[float, typer.Option(min=1, max=24, help="Simulated hours from midnight.")] = 24,
    spikes: Annotated[int, typer.Option(min=0, help="Traffic spikes (5-10x the base) in the run.")] = 8,
    interruptions: Annotated[int, typer.Option(
        min=0, help="Spot interruptions in the run, alternately 120 s (AWS) and 30 s (GCP) notice.")] = 6,
    model_load_seconds: Annotated[float, typer.Option(
        min=0, help="Seconds from placement until a replica serves; the same for every policy.")] = 90,
    ttft_slo_ms: Annotated[float, typer.Option(min=1, help="TTFT SLO (p95 per minute).")] = 2000,
) -> None:
    """Replay one seeded day under each policy; print a table and the JSON result line."""
    err = Console(stderr=True, markup=False, highlight=False)
    shape = TrafficShape(duration_s=int(hours * 3600), spikes=spikes)
    config = RunConfig(pool=replace(PoolConfig(), model_load_seconds=model_load_seconds, ttft_slo_ms=ttft_slo_ms),
                       cluster=replace(ClusterShape(), interruptions=interruptions))
    names = parse_policies(policies)
    started = time.perf_counter()
    scene = scenario(seed, shape, config)
    err.print(f"[bench.scaling] {scene.workload.requests:,} requests, {len(scene.workload.spikes)} spikes "
              f"(x{', x'.join(f'{s.factor:g}' for s in scene.workload.spikes)}), "
              f"{len(scene.interruptions)} spot notices; policies {', '.join(names)}")

    def progress(name: str, now: float) -> None:
        if now % (6 * 3600) and now < shape.duration_s:
            return
        err.print(f"[bench.scaling] {name}: {now / 3600:.0f} h simulated, "
                  f"{time.perf_counter() - started:.0f} s elapsed")

    results = run_policies(scene, names, progress)
    render(Console(width=None if sys.stdout.isatty() else 150), results, seed, hours)
    print(json.dumps(result_document(results), sort_keys=False), flush=True)


if __name__ == "__main__":
    app()
