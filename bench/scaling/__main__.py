"""``python -m bench.scaling``: a day of bursty chat traffic with spot interruptions, replayed in
simulated time under Berth's scaling policy and under KEDA-like and Dynamo-like references.
``--trace CSV`` replays a production request trace instead (``--scale``, ``--speed``);
``--through-kafka`` sends it through the real services; ``--cache`` measures the model cache.

Progress goes to stderr; a table and, as the very last line, one JSON object go to stdout.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from bench.results import RECORD_HELP, emit, per_policy

from .cluster import ClusterShape
from .policies import PoolConfig
from .runner import DEFAULT_POLICIES, POLICIES, result_document, run_policies, scenario
from .sim import RunConfig, RunResult
from .workload import TrafficShape

HEADLINE = {"slo_violation_minutes": "SLO-min", "gpu_hours": "GPU-h"}
"""The figures of each policy worth a row in the results log (the JSON line has them all)."""

app = typer.Typer(add_completion=False, help=__doc__)


def parse_policies(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise typer.BadParameter(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    return names


def render(console: Console, results: dict[str, RunResult], seed: int, hours: float) -> None:
    table = Table(
        title=f"Scaling a chat pool for {hours:g} h (seed {seed}); lower is better except survived",
        title_justify="left",
    )
    for column in (
        "policy",
        "SLO-violation min",
        "GPU-hours",
        "cost $",
        "spot GPU-h",
        "scale events",
        "survived / hit",
        "TTFT p50",
        "TTFT p99",
        "req > SLO",
        "retried",
        "peak replicas",
    ):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, r in results.items():
        table.add_row(
            name,
            str(r.slo_violation_minutes),
            f"{r.gpu_hours:.1f}",
            f"{r.cost_usd:.0f}",
            f"{r.spot_gpu_hours:.1f}",
            str(r.scale_events),
            f"{r.interruptions_survived} / {r.interruptions_hit}",
            f"{r.ttft_p50_s:.2f} s",
            f"{r.ttft_p99_s:.2f} s",
            f"{r.requests_over_slo / max(r.requests, 1):.2%}",
            str(r.requests_retried),
            str(r.peak_replicas),
        )
    console.print(table)


@app.command()
def main(
    seed: Annotated[int, typer.Option(help="Seed of the traffic and of the interruption times.")] = 42,
    policies: Annotated[
        str, typer.Option(help=f"Comma-separated policies to run, from {', '.join(POLICIES)}.")
    ] = ",".join(DEFAULT_POLICIES),
    hours: Annotated[float, typer.Option(min=1, max=24, help="Simulated hours from midnight.")] = 24,
    spikes: Annotated[int, typer.Option(min=0, help="Traffic spikes (5-10x the base) in the run.")] = 8,
    interruptions: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Spot interruptions in the run, alternately 120 s (AWS) and 30 s (GCP) notice "
            "[default: 6; 0 with --trace].",
        ),
    ] = None,
    model_load_seconds: Annotated[
        float, typer.Option(min=0, help="Seconds from placement until a replica serves; the same for every policy.")
    ] = 90,
    ttft_slo_ms: Annotated[float, typer.Option(min=1, help="TTFT SLO (p95 per minute).")] = 2000,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Replay this request trace (CSV: TIMESTAMP,ContextTokens,GeneratedTokens) instead of the "
            "generated day.",
            dir_okay=False,
        ),
    ] = None,
    scale: Annotated[
        float,
        typer.Option(
            min=0.01, help="--trace: multiply the request rate (superposed, time-shifted copies of the trace)."
        ),
    ] = 10.0,
    speed: Annotated[
        float,
        typer.Option(
            min=0.01, help="--trace: compress the trace's clock (arrivals at t / speed); --through-kafka paces at it."
        ),
    ] = 1.0,
    start_minute: Annotated[float, typer.Option(min=0, help="--trace: skip this many trace minutes.")] = 0.0,
    minutes: Annotated[
        float | None, typer.Option(min=0.1, help="--trace: replay only this many trace minutes.")
    ] = None,
    tokens_per_second_per_replica: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="--trace: the tokensPerSecondPerReplica Berth's AgentPool states [default: the replica's "
            "decode throughput, 2,000].",
        ),
    ] = None,
    plot_dir: Annotated[
        Path | None,
        typer.Option(help="Write replicas.png and ttft.png (and kafka.png) here (needs matplotlib).", file_okay=False),
    ] = None,
    through_kafka: Annotated[
        bool,
        typer.Option(
            "--through-kafka",
            help="--trace: also replay Berth through Kafka, token-lag, decision, binder and "
            "cluster-sim, and compare its replica timeline with the simulation's.",
        ),
    ] = False,
    cache: Annotated[
        bool,
        typer.Option("--cache", help="Measure time-to-ready of new replicas with the cache-aware score on and off."),
    ] = False,
    record: Annotated[bool, typer.Option("--record", help=RECORD_HELP)] = False,
) -> None:
    """Replay one seeded day (or a trace) under each policy; print a table and the JSON result line."""
    err = Console(stderr=True, markup=False, highlight=False)
    if cache:
        from .cache import main as cache_main

        cache_main(seed=seed, plot_dir=plot_dir)
        return
    if trace is not None:
        _trace_main(
            err,
            trace=trace,
            scale=scale,
            speed=speed,
            start_minute=start_minute,
            minutes=minutes,
            seed=seed,
            policies=policies,
            interruptions=interruptions or 0,
            model_load_seconds=model_load_seconds,
            ttft_slo_ms=ttft_slo_ms,
            tokens_per_second_per_replica=tokens_per_second_per_replica,
            plot_dir=plot_dir,
            through_kafka=through_kafka,
            record=record,
        )
        return
    if through_kafka:
        raise typer.BadParameter("--through-kafka needs --trace")
    interruptions = 6 if interruptions is None else interruptions
    shape = TrafficShape(duration_s=int(hours * 3600), spikes=spikes)
    config = RunConfig(
        pool=replace(PoolConfig(), model_load_seconds=model_load_seconds, ttft_slo_ms=ttft_slo_ms),
        cluster=replace(ClusterShape(), interruptions=interruptions),
    )
    names = parse_policies(policies)
    started = time.perf_counter()
    scene = scenario(seed, shape, config)
    err.print(
        f"[bench.scaling] {scene.workload.requests:,} requests, {len(scene.workload.spikes)} spikes "
        f"(x{', x'.join(f'{s.factor:g}' for s in scene.workload.spikes)}), "
        f"{len(scene.interruptions)} spot notices; policies {', '.join(names)}"
    )

    def progress(name: str, now: float) -> None:
        if now % (6 * 3600) and now < shape.duration_s:
            return
        err.print(
            f"[bench.scaling] {name}: {now / 3600:.0f} h simulated, {time.perf_counter() - started:.0f} s elapsed"
        )

    results = run_policies(scene, names, progress)
    render(Console(width=None if sys.stdout.isatty() else 150), results, seed, hours)
    if plot_dir is not None:
        from .plots import plot_replicas, plot_ttft

        title = f"generated day, seed {seed}"
        per_replica = config.pool.tokens_per_second_per_replica
        replicas_png = plot_replicas(scene.workload, results, per_replica, plot_dir / "replicas.png", title)
        err.print(f"[bench.scaling] wrote {replicas_png}")
        err.print(f"[bench.scaling] wrote {plot_ttft(results, ttft_slo_ms / 1000, plot_dir / 'ttft.png', title)}")
    document = result_document(results)
    emit("bench.scaling", document, headline=per_policy(document["policies"], HEADLINE), record=record)


def render_trace(console: Console, results: dict[str, RunResult], title: str) -> None:
    table = Table(title=title, title_justify="left")
    for column in (
        "policy",
        "SLO-violation min",
        "TTFT p50",
        "TTFT p99",
        "req > SLO",
        "GPU-hours",
        "cost $",
        "scale events",
        "peak replicas",
    ):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, r in results.items():
        table.add_row(
            name,
            str(r.slo_violation_minutes),
            f"{r.ttft_p50_s:.2f} s",
            f"{r.ttft_p99_s:.2f} s",
            f"{r.requests_over_slo / max(r.requests, 1):.2%}",
            f"{r.gpu_hours:.2f}",
            f"{r.cost_usd:.1f}",
            str(r.scale_events),
            str(r.peak_replicas),
        )
    console.print(table)


def _trace_main(
    err: Console,
    *,
    trace: Path,
    scale: float,
    speed: float,
    start_minute: float,
    minutes: float | None,
    seed: int,
    policies: str,
    interruptions: int,
    model_load_seconds: float,
    ttft_slo_ms: float,
    tokens_per_second_per_replica: float | None,
    plot_dir: Path | None,
    through_kafka: bool,
    record: bool,
) -> None:
    from .trace import TraceError, load_trace
    from .trace_run import run_trace_policies, trace_document, trace_scenario

    try:
        loaded = load_trace(trace, start_minute=start_minute, minutes=minutes)
    except TraceError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    names = parse_policies(policies if policies != ",".join(DEFAULT_POLICIES) else "berth,keda,dynamo,static")
    config = RunConfig(
        pool=replace(PoolConfig(), model_load_seconds=model_load_seconds, ttft_slo_ms=ttft_slo_ms),
        cluster=replace(ClusterShape(), interruptions=interruptions),
        keep_ttft_samples=True,
    )
    started = time.perf_counter()
    scene, setup = trace_scenario(
        loaded,
        scale=scale,
        seed=seed,
        config=config,
        speed=speed,
        tokens_per_second_per_replica=tokens_per_second_per_replica,
    )
    err.print(
        f"[bench.scaling] {trace.name}: {loaded.requests:,} requests x{scale:g} = {setup.requests:,} over "
        f"{setup.duration_s / 60:.0f} min (speed {speed:g}); demand mean {setup.mean_tokens_per_s:,.0f} "
        f"tokens/s, peak minute {setup.peak_minute_tokens_per_s:,.0f}; tokensPerSecondPerReplica "
        f"{setup.tokens_per_second_per_replica:,.0f}; initial/static replicas {setup.initial_replicas}"
    )
    results = run_trace_policies(scene, names)
    err.print(f"[bench.scaling] simulated in {time.perf_counter() - started:.1f} s")
    title = f"{trace.name} x{scale:g} (speed {speed:g}), SLO p95 TTFT {ttft_slo_ms:g} ms per minute; lower is better"
    render_trace(Console(width=None if sys.stdout.isatty() else 150), results, title)
    document = trace_document(results, setup, trace=str(trace), scale=scale, seed=seed)
    if through_kafka:
        from .kafka_mode import run_through_kafka

        comparison = run_through_kafka(scene, setup, results.get("berth"), err=err, plot_dir=plot_dir)
        document["through_kafka"] = comparison
    if plot_dir is not None:
        from .plots import plot_replicas, plot_ttft

        short = f"{trace.name} x{scale:g}, speed {speed:g}"
        per_replica = setup.tokens_per_second_per_replica
        replicas_png = plot_replicas(scene.workload, results, per_replica, plot_dir / "replicas.png", short)
        err.print(f"[bench.scaling] wrote {replicas_png}")
        err.print(f"[bench.scaling] wrote {plot_ttft(results, ttft_slo_ms / 1000, plot_dir / 'ttft.png', short)}")
    headline = per_policy(document["policies"], {**HEADLINE, "ttft_p99_s": "TTFT p99 s"})
    emit("bench.scaling", document, headline=headline, record=record)


if __name__ == "__main__":
    app()
