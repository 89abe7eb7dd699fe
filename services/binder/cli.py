"""``berth binder run``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Apply the scheduler's commands to the cluster and report the results.",
                  no_args_is_help=True)

BACKENDS = ("sim", "kube")


@app.command("run")
def run(
    backend: Annotated[str, typer.Option(help="Where commands take effect: sim (the cluster simulator) "
                                              "or kube (Kubernetes; not available yet).")] = "sim",
    sim_url: Annotated[Optional[str], typer.Option(
        envvar="BERTH_SIM_URL", help="The cluster simulator's API, e.g. http://127.0.0.1:8470.")] = None,
    qps: Annotated[float, typer.Option(help="Cluster API requests per second (0: unlimited); "
                                            "kube clients default to 50.")] = 50.0,
    burst: Annotated[int, typer.Option(min=1, help="Requests allowed at once above the QPS.")] = 100,
    max_attempts: Annotated[int, typer.Option(min=1, help="Tries per operation on transient errors.")] = 5,
    max_in_flight: Annotated[int, typer.Option(min=1, help="Commands applied concurrently.")] = 32,
    group: Annotated[str, typer.Option(help="Kafka consumer group (one per cluster the binder serves).")]
        = "berth-binder",
    kafka: Annotated[Optional[str], typer.Option("--kafka", envvar="BERTH_KAFKA_BOOTSTRAP",
                                                 help="Kafka bootstrap servers.")] = None,
    metrics_port: Annotated[Optional[int], typer.Option(help="Serve /metrics on this port.")] = None,
) -> None:
    """Consume commands, apply them (with retries and a client rate limit), publish the results."""
    if backend not in BACKENDS:
        raise typer.BadParameter(f"{backend!r}: choose one of {', '.join(BACKENDS)}", param_hint="--backend")
    if backend == "kube":
        raise typer.BadParameter("the Kubernetes backend is not implemented yet; use --backend sim",
                                 param_hint="--backend")
    if not sim_url:
        raise typer.BadParameter("--backend sim needs --sim-url (or BERTH_SIM_URL)", param_hint="--sim-url")

    from berth.lifecycle import stop_on_signals
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics
    from berth.settings import load_settings

    from .applier import Binder, RetryPolicy
    from .ratelimit import TokenBucket
    from .service import BinderService
    from .sim_backend import SimulatorBackend

    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="binder")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)
    binder = Binder(SimulatorBackend(sim_url), limiter=TokenBucket(qps, burst),
                    retry=RetryPolicy(max_attempts=max_attempts))

    async def main() -> None:
        await BinderService(settings, binder, max_in_flight=max_in_flight, group=group).run(stop_on_signals())

    asyncio.run(main())
