"""``berth audit``: the audit service, and the auditor's tools (replay, explain, what-if)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Optional

import typer

from berth.settings import load_settings

app = typer.Typer(help="Keep every decision in Postgres; replay, explain and what-if from it.",
                  no_args_is_help=True)

DatabaseOption = Annotated[Optional[str], typer.Option(
    "--database-url", envvar="BERTH_DATABASE_URL", show_default=False,
    help="SQLAlchemy URL of the audit store.")]


@app.command("run")
def run(
    kafka: Annotated[Optional[str], typer.Option("--kafka", envvar="BERTH_KAFKA_BOOTSTRAP",
                                                 help="Kafka bootstrap servers.")] = None,
    database_url: DatabaseOption = None,
    metrics_port: Annotated[Optional[int], typer.Option(help="Serve /metrics on this port.")] = None,
) -> None:
    """Consume decision inputs, decisions, commands and results into Postgres (append-only)."""
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics

    from .service import run_audit

    settings = load_settings(kafka=kafka, database_url=database_url)
    configure_logging(settings.log_level, settings.log_format, service="audit")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)
    asyncio.run(run_audit(settings))


@app.command("explain")
def explain_command(
    pod: Annotated[str, typer.Argument(help="The pod as NAMESPACE/NAME.")],
    database_url: DatabaseOption = None,
    top: Annotated[int, typer.Option(help="How many nodes to show per table.")] = 5,
) -> None:
    """Print where POD went and why, or why it is pending, with per-node reasons and scores."""
    from rich.console import Console

    from berth.audit.db import make_engine

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
