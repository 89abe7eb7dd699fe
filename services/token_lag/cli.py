"""``berth token-lag run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from berth.options import HealthPortOption, KafkaOption, MetricsPortOption

from .fold import DEFAULT_HALF_LIFE_SECONDS, DEFAULT_MAX_TTFT_MS, DEFAULT_MODEL_LOAD_SECONDS

app = typer.Typer(help="Track inference pools' token queues: smoothed rate and expected TTFT.", no_args_is_help=True)


@app.command("run")
def run(
    pools: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="YAML: {pools: {NAMESPACE/NAME: {model_load_seconds: 90}}}; pools not listed load in "
            "--default-model-load-seconds.",
        ),
    ] = None,
    half_life_seconds: Annotated[
        float | None,
        typer.Option(
            help=f"Half-life of the token-rate EWMA, in event-time seconds [default: {DEFAULT_HALF_LIFE_SECONDS:g}]."
        ),
    ] = None,
    default_model_load_seconds: Annotated[
        float | None,
        typer.Option(
            help=f"Model load time of pools the --pools file does not list [default: {DEFAULT_MODEL_LOAD_SECONDS:g}]."
        ),
    ] = None,
    max_ttft_ms: Annotated[
        float | None,
        typer.Option(help=f"Ceiling of expected TTFT, reported for stalled pools [default: {DEFAULT_MAX_TTFT_MS:g}]."),
    ] = None,
    kafka: KafkaOption = None,
    metrics_port: MetricsPortOption = None,
    health_port: HealthPortOption = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Directory of faust's local table store (default: $XDG_STATE_HOME/berth/token-lag)."),
    ] = None,
    store: Annotated[
        str,
        typer.Option(
            help="faust table store: memory:// rebuilds the table from its changelog at every start; "
            "rocksdict:// keeps it in --data-dir (needs the rocksdict package)."
        ),
    ] = "memory://",
) -> None:
    """Consume berth.inference.queue.v1; publish each pool's lag state to
    berth.inference.lag-state.v1 and to its cell of berth.scheduler.inputs.v1. Stops on SIGTERM."""
    from berth.schemas.topics import DECISION_INPUTS, QUEUE_LAG

    from berth.bus.streams import serve
    from berth.health import serve_faust_health
    from berth.logs import configure_logging, get_logger
    from berth.settings import load_settings

    from .app import Layout, create_app
    from .fold import PoolsFileError, load_lag_settings

    overrides = {
        name: value
        for name, value in (
            ("half_life_seconds", half_life_seconds),
            ("default_model_load_seconds", default_model_load_seconds),
            ("max_ttft_ms", max_ttft_ms),
        )
        if value is not None
    }
    try:
        lag_settings = load_lag_settings(pools, **overrides)
    except PoolsFileError as exc:
        raise typer.BadParameter(str(exc), param_hint="--pools") from exc
    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="token-lag")

    def build(partitions: dict[str, int], options: dict) -> object:
        get_logger(__name__).info(
            "lag settings",
            half_life_seconds=lag_settings.half_life_seconds,
            max_ttft_ms=lag_settings.max_ttft_ms,
            default_model_load_seconds=lag_settings.default_model_load_seconds,
            pools=sorted(lag_settings.pools),
        )
        layout = Layout(cells=partitions[DECISION_INPUTS.name], queue_partitions=partitions[QUEUE_LAG.name])
        app = create_app(layout, lag_settings, app_options=options, names=settings.kafka.names).app
        serve_faust_health(app, "token-lag", health_port if health_port is not None else settings.health_port)
        return app

    # Kafka unreachable: serve raises StartupError, which `berth` reports in one line (exit 69).
    serve(
        "token-lag",
        build,
        kafka=settings.kafka,
        topics=[DECISION_INPUTS.name, QUEUE_LAG.name],
        log_level=settings.log_level,
        data_dir=data_dir,
        store=store,
        metrics_port=metrics_port if metrics_port is not None else settings.metrics_port,
    )
