"""``berth cluster-sim run`` and ``berth cluster-sim generate``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from berth.options import KafkaOption, MetricsPortOption

app = typer.Typer(
    help="A simulated cluster for demos, tests and benchmarks: publishes node and pod "
    "events from a workload and applies the binder's commands.",
    no_args_is_help=True,
)

GenerateOption = Annotated[
    str | None, typer.Option("--generate", help="Generate the workload instead: demo[:SEED] or bench[:SEED].")
]
NodesOption = Annotated[int | None, typer.Option("--nodes", min=1, help="bench only: number of nodes (5000).")]
PodsOption = Annotated[int | None, typer.Option("--pods", min=1, help="bench only: number of pods (10000).")]


def _parse_speed(text: str) -> float | None:
    if text.strip().lower() in ("max", "inf", "0"):
        return None
    try:
        speed = float(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: give a factor such as 1, 10 or 0.5, or 'max'", param_hint="--speed"
        ) from None
    if speed <= 0:
        raise typer.BadParameter("must be positive (or 'max')", param_hint="--speed")
    return speed


def _workload(
    workload: Path | None,
    generate: str | None,
    nodes_csv: Path | None,
    nodes: int | None,
    pods: int | None,
    rate: float | None,
    max_pods: int | None,
) -> Any:
    from berth_dev.workloads import WorkloadError, generate_workload, load_workload

    if (workload is None) == (generate is None):
        raise typer.BadParameter("give exactly one of --workload FILE and --generate demo[:SEED]")
    try:
        if workload is not None:
            loaded = load_workload(workload, nodes_csv=nodes_csv)
        else:
            loaded = generate_workload(generate or "", nodes=nodes, pods=pods)
        if max_pods is not None:
            loaded = loaded.limited(max_pods)
        if rate is not None:
            loaded = loaded.with_rate(rate)
    except WorkloadError as exc:
        raise typer.BadParameter(str(exc), param_hint="--workload" if workload else "--generate") from exc
    return loaded


@app.command("run")
def run(
    workload: Annotated[
        Path | None,
        typer.Option(
            "--workload",
            exists=True,
            help="Manifests (YAML/JSON, with an optional Timeline), an Alibaba "
            "v2023 pod-list CSV, or a directory with the trace.",
        ),
    ] = None,
    generate: GenerateOption = None,
    nodes_csv: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="The trace's node list, for a pod-list CSV.")
    ] = None,
    speed: Annotated[
        str, typer.Option(help="Simulated seconds per real second, or 'max' (as fast as possible).")
    ] = "1",
    rate: Annotated[
        float | None,
        typer.Option(min=0.001, help="Pods arrive evenly at this many per second (ignoring their own times)."),
    ] = None,
    max_pods: Annotated[int | None, typer.Option(min=0, help="Play only the first N pods.")] = None,
    nodes: NodesOption = None,
    pods: PodsOption = None,
    host: Annotated[str, typer.Option(help="Address of the API.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of the API (0: any free port).")] = 8470,
    watch_decisions: Annotated[
        bool, typer.Option(help="Read the decisions topic to learn which pods cannot be placed.")
    ] = True,
    exit_when_decided: Annotated[
        bool, typer.Option(help="Stop once the workload is played and every pod is bound or unschedulable.")
    ] = False,
    timeout: Annotated[float | None, typer.Option(min=0, help="Stop after this many seconds.")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress on stderr.")] = True,
    kafka: KafkaOption = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Play a workload as a cluster. stdout: `BERTH_SIM_URL=...` once listening, a JSON summary at exit."""
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics
    from berth.settings import load_settings

    from .service import SimOptions, Simulator, print_summary

    loaded = _workload(workload, generate, nodes_csv, nodes, pods, rate, max_pods)
    options = SimOptions(
        host=host,
        port=port,
        speed=1.0 if rate is not None else _parse_speed(speed),
        watch_decisions=watch_decisions,
        exit_when_decided=exit_when_decided,
        timeout_s=timeout,
        progress=progress,
    )
    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="cluster-sim")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)
    for warning in loaded.warnings:
        typer.echo(f"warning: {warning}", err=True)

    async def main() -> dict[str, Any]:
        # Kafka clients bind to the running loop: build the simulator inside it.
        return await Simulator(settings, loaded, options).run()

    print_summary(asyncio.run(main()))


@app.command("generate")
def generate_command(
    spec: Annotated[str, typer.Argument(help="demo[:SEED] or bench[:SEED].")],
    out: Annotated[Path, typer.Option("--out", dir_okay=False, help="Write the manifests here (YAML).")],
    pools_out: Annotated[
        Path | None,
        typer.Option(
            dir_okay=False, help="Also write the AgentPools' scaling policies (the decision service's --pools)."
        ),
    ] = None,
    nodes: NodesOption = None,
    pods: PodsOption = None,
    rate: Annotated[float | None, typer.Option(min=0.001, help="bench only: pods per second.")] = None,
) -> None:
    """Write a generated workload as Kubernetes manifests plus a Timeline (loadable with --workload)."""
    from berth_dev.workloads import (
        WorkloadError,
        from_documents,
        generated_documents,
        write_documents,
        write_pools_file,
    )

    try:
        documents = generated_documents(spec, nodes=nodes, pods=pods, rate=rate)
        workload = from_documents(documents, name=spec)
    except WorkloadError as exc:
        raise typer.BadParameter(str(exc), param_hint="SPEC") from exc
    count = write_documents(documents, out)
    if pools_out is not None:
        write_pools_file(workload, pools_out)
    typer.echo(f"wrote {count} documents to {out}: {json.dumps(workload.summary())}", err=True)
