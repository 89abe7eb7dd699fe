"""``berth decision run``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from berth.options import HealthPortOption, KafkaOption, MetricsPortOption
from berth.settings import load_settings

app = typer.Typer(help="Decide placements and scaling, one writer per cell.", no_args_is_help=True)


@app.command("run")
def run(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="BERTH_SCHEDULER_CONFIG",
            exists=True,
            dir_okay=False,
            help="Scheduler configuration (KubeSchedulerConfiguration keys); default: the built-in profile.",
        ),
    ] = None,
    pools: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="YAML of inference pools' scaling policies: {pools: {NAMESPACE/NAME: {...}}}.",
        ),
    ] = None,
    descheduler_policy: Annotated[
        Path | None,
        typer.Option(
            "--descheduler-policy",
            envvar="BERTH_DESCHEDULER_POLICY",
            exists=True,
            dir_okay=False,
            help="A DeschedulerPolicy (descheduler/v1alpha1 or v1alpha2): each cell plans its evictions on "
            "its live state at ticks, every --descheduling-interval; default: no descheduling.",
        ),
    ] = None,
    descheduling_interval: Annotated[
        float,
        typer.Option(
            "--descheduling-interval",
            envvar="BERTH_DESCHEDULING_INTERVAL",
            min=1,
            help="Seconds between descheduling rounds, counted in the cells' ticks (berth inventory run "
            "--tick-seconds): a round runs at the first tick this long after the last.",
        ),
    ] = 300.0,
    descheduling_cooldown: Annotated[
        float,
        typer.Option(
            "--descheduling-cooldown",
            envvar="BERTH_DESCHEDULING_COOLDOWN",
            min=0,
            help="Seconds a workload evicted by descheduling is left alone.",
        ),
    ] = 3600.0,
    kafka: KafkaOption = None,
    metrics_port: MetricsPortOption = None,
    health_port: HealthPortOption = None,
) -> None:
    """Consume the cells' inputs, decide, and emit commands and decision records."""
    from datetime import timedelta

    from berth.configfiles import load_cell_config, read_descheduler
    from berth.health import HealthServer, serving
    from berth.lifecycle import closing_kafka_clients, stop_on_signals
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics

    from .health import register
    from .service import DecisionService

    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="decision")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)
    descheduler = None
    if descheduler_policy is not None:
        try:
            descheduler = read_descheduler(
                descheduler_policy, timedelta(seconds=descheduling_interval), timedelta(seconds=descheduling_cooldown)
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--descheduler-policy") from None
    cell_config = load_cell_config(config or settings.scheduler_config, pools, settings.spot_label_table, descheduler)

    async def main() -> None:
        service = DecisionService(settings, cell_config)
        health = register(HealthServer("decision"), service)
        async with (
            closing_kafka_clients(service),
            serving(health, health_port if health_port is not None else settings.health_port),
        ):
            await service.run(stop_on_signals())

    asyncio.run(main())
