"""``berth audit``: the audit service, and the auditor's tools (replay, explain, what-if)."""

from __future__ import annotations

import asyncio
from datetime import UTC
from pathlib import Path
from typing import Annotated

import typer

from berth.options import DatabaseOption, HealthPortOption, KafkaOption, MetricsPortOption
from berth.settings import load_settings

app = typer.Typer(help="Keep every decision in Postgres; replay, explain and what-if from it.", no_args_is_help=True)


@app.command("run")
def run(
    kafka: KafkaOption = None,
    database_url: DatabaseOption = None,
    metrics_port: MetricsPortOption = None,
    health_port: HealthPortOption = None,
) -> None:
    """Consume decision inputs, decisions, commands and results into Postgres (append-only)."""
    from berth.health import HealthServer, serving
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics

    from .health import register
    from .service import run_audit

    settings = load_settings(kafka=kafka, database_url=database_url)
    configure_logging(settings.log_level, settings.log_format, service="audit")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)

    async def main() -> None:
        health = register(HealthServer("audit"), settings)
        async with serving(health, health_port if health_port is not None else settings.health_port):
            await run_audit(settings)

    asyncio.run(main())


@app.command("explain")
def explain_command(
    pod: Annotated[str, typer.Argument(help="The pod as NAMESPACE/NAME.")],
    database_url: DatabaseOption = None,
    top: Annotated[int, typer.Option(help="How many nodes to show per table.")] = 5,
) -> None:
    """Print where POD went and why, or why it is pending, with per-node reasons and scores."""
    from rich.console import Console

    from .db import make_engine
    from .explain import explain, render

    if pod.count("/") != 1:
        raise typer.BadParameter(f"{pod!r}: give the pod as NAMESPACE/NAME, e.g. ml/train-0")
    settings = load_settings(database_url=database_url)
    engine = make_engine(settings.database)
    try:
        explanation = explain(engine, pod)
    finally:
        engine.dispose()
    render(explanation, Console(), top=top)
    if not explanation.decisions:
        raise typer.Exit(1)


def _parse_time(value: str | None):
    from datetime import datetime

    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not a time; use ISO 8601, e.g. 2026-11-21T09:00:00Z") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


SinceOption = Annotated[str | None, typer.Option(help="Compare decisions from this time (ISO 8601).")]
UntilOption = Annotated[str | None, typer.Option(help="Compare decisions before this time (ISO 8601).")]


def _run_replay(database_url: str | None, since: str | None, until: str | None, other: str | None):
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from .db import make_engine
    from .replay import replay

    settings = load_settings(database_url=database_url)
    engine = make_engine(settings.database)
    try:
        with Progress(
            SpinnerColumn(), TextColumn("{task.description} {task.completed} inputs folded"), transient=True
        ) as progress:
            task = progress.add_task("replaying")
            return replay(
                engine,
                since=_parse_time(since),
                until=_parse_time(until),
                other_config=other,
                progress=lambda n: progress.advance(task, n),
            )
    finally:
        engine.dispose()


@app.command("replay")
def replay_command(database_url: DatabaseOption = None, since: SinceOption = None, until: UntilOption = None) -> None:
    """Re-derive decisions from Postgres alone and print every mismatch (exit 1 when any)."""
    from rich.console import Console
    from rich.markup import escape

    report = _run_replay(database_url, since, until, None)
    console = Console()
    for mismatch in report.mismatches:
        console.print(
            f"[red]{mismatch.kind}[/] {mismatch.cell} {escape(mismatch.subject)} "
            f"({mismatch.decision_id[:12]}): recorded {escape(repr(mismatch.recorded or '-'))} "
            f"replayed {escape(repr(mismatch.replayed or '-'))}"
        )
    console.print(
        f"{report.cells} cell(s), {report.inputs} inputs folded, {report.compared} decisions "
        f"compared, {len(report.mismatches)} mismatch(es)"
    )
    if report.mismatches:
        raise typer.Exit(1)


@app.command("what-if")
def what_if_command(
    config: Annotated[
        Path, typer.Option("--config", exists=True, dir_okay=False, help="The other scheduler configuration to try.")
    ],
    database_url: DatabaseOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
) -> None:
    """Replay a window under another configuration and report which decisions would change."""
    from rich.console import Console
    from rich.markup import escape

    from berth.configfiles import load_cell_config

    report = _run_replay(database_url, since, until, load_cell_config(config).document)
    console = Console()
    for change in report.changes:
        console.print(
            f"{escape(change.subject)}: {escape(change.recorded or 'no decision')} → "
            f"{escape(change.replayed or 'no decision')}"
        )
    console.print(f"{report.compared} decisions re-derived under {config}; {len(report.changes)} would change")
