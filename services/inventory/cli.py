"""``berth inventory run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from berth.options import HealthPortOption, KafkaOption, MetricsPortOption

app = typer.Typer(help="Keep the per-node GPU inventory and route cluster facts to their cells.", no_args_is_help=True)


@app.command("run")
def run(
    kafka: KafkaOption = None,
    metrics_port: MetricsPortOption = None,
    health_port: HealthPortOption = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Directory of faust's local table store (default: $XDG_STATE_HOME/berth/inventory)."),
    ] = None,
    store: Annotated[
        str,
        typer.Option(
            help="faust table store: memory:// rebuilds the tables from their changelogs at every start; "
            "rocksdict:// keeps them in --data-dir (needs the rocksdict package)."
        ),
    ] = "memory://",
    tick_seconds: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Send every decision cell a tick this often (how time reaches a quiet cell: a pod "
            "no cell could place goes round the cells again after two ticks).",
        ),
    ] = 30.0,
) -> None:
    """Consume pods, nodes, policies, GPU telemetry, spot notices and the cells' hand-overs; publish
    node inventories (berth.inventory.state.v1) and each cell's inputs (berth.scheduler.inputs.v1).
    Stops on SIGTERM."""
    from berth.bus.streams import serve
    from berth.health import serve_faust_health
    from berth.logs import configure_logging
    from berth.settings import load_settings

    from .app import LAYOUT_TOPICS, Layout, create_app

    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="inventory")

    def build(partitions: dict[str, int], options: dict) -> object:
        app = create_app(
            Layout.of(partitions), app_options=options, tick_interval_s=tick_seconds, names=settings.kafka.names
        ).app
        serve_faust_health(app, "inventory", health_port if health_port is not None else settings.health_port)
        return app

    # Kafka unreachable: serve raises StartupError, which `berth` reports in one line (exit 69).
    serve(
        "inventory",
        build,
        kafka=settings.kafka,
        topics=LAYOUT_TOPICS,
        log_level=settings.log_level,
        data_dir=data_dir,
        store=store,
        metrics_port=metrics_port if metrics_port is not None else settings.metrics_port,
    )
