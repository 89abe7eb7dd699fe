"""``berth binder run``."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from berth.options import HealthPortOption, KafkaOption, MetricsPortOption

if TYPE_CHECKING:
    from .ratelimit import TokenBucket

app = typer.Typer(help="Apply the scheduler's commands to the cluster and report the results.", no_args_is_help=True)

BACKENDS = ("sim", "kube")


@app.command("run")
def run(
    backend: Annotated[
        str,
        typer.Option(help="Where commands take effect: sim (the cluster simulator) or kube (a Kubernetes cluster)."),
    ] = "sim",
    sim_url: Annotated[
        str | None,
        typer.Option(
            envvar="BERTH_SIM_URL", help="--backend sim: the cluster simulator's API, e.g. http://127.0.0.1:8470."
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="--backend kube: kubeconfig file. Default: in-cluster configuration when running in a pod "
            "(KUBERNETES_SERVICE_HOST set), else $KUBECONFIG or ~/.kube/config."
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option(help="--backend kube: kubeconfig context to use (default: its current-context).")
    ] = None,
    report_unschedulable: Annotated[
        bool | None,
        typer.Option(
            "--report-unschedulable/--no-report-unschedulable",
            help="Also read the decisions topic and mark unschedulable pods as kube-scheduler does "
            "(PodScheduled=False condition, FailedScheduling event). Default: on with --backend kube, "
            "off with sim (the simulator keeps no pod conditions).",
        ),
    ] = None,
    qps: Annotated[
        float,
        typer.Option(
            help="Cluster API requests per second, every request counted "
            "(0: unlimited); kube-scheduler's default is 50. With kube, "
            "events have a limiter of their own at the same rate, as "
            "kube-scheduler's event client does."
        ),
    ] = 50.0,
    burst: Annotated[int, typer.Option(min=1, help="Requests allowed at once above the QPS.")] = 100,
    request_timeout: Annotated[
        float,
        typer.Option(min=0.1, help="Seconds one cluster API request may take before it counts as a transient error."),
    ] = 10.0,
    max_attempts: Annotated[int, typer.Option(min=1, help="Tries per operation on transient errors.")] = 5,
    max_in_flight: Annotated[
        int, typer.Option(min=1, help="Commands applied concurrently (and, with kube, API connections kept open).")
    ] = 32,
    group: Annotated[
        str,
        typer.Option(
            help="Kafka consumer group (one per cluster the binder serves; BERTH_KAFKA__GROUP_PREFIX is put "
            "before it); unschedulable reports use <group>-decisions."
        ),
    ] = "berth-binder",
    kafka: KafkaOption = None,
    metrics_port: MetricsPortOption = None,
    health_port: HealthPortOption = None,
) -> None:
    """Consume commands, apply them (with retries and a client rate limit), publish the results."""
    _check_backend_options(backend, sim_url, kubeconfig, context)

    from berth.health import HealthServer, serving
    from berth.lifecycle import closing_kafka_clients, stop_on_signals
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics
    from berth.settings import load_settings

    from .applier import Binder, RetryPolicy
    from .health import register
    from .ratelimit import TokenBucket
    from .service import BinderService

    limiter = TokenBucket(qps, burst)
    cluster = _cluster_backend(
        backend,
        sim_url,
        kubeconfig,
        context,
        limiter=limiter,
        qps=qps,
        burst=burst,
        workers=max_in_flight,
        timeout_s=request_timeout,
    )
    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="binder")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)
    binder = Binder(cluster, limiter=limiter, retry=RetryPolicy(max_attempts=max_attempts))
    reports = report_unschedulable if report_unschedulable is not None else backend == "kube"

    async def main() -> None:
        service = BinderService(
            settings, binder, max_in_flight=max_in_flight, group=group, report_unschedulable=reports
        )
        health = register(HealthServer("binder"), service)
        async with (
            closing_kafka_clients(service),
            serving(health, health_port if health_port is not None else settings.health_port),
        ):
            await service.run(stop_on_signals())

    asyncio.run(main())


def _check_backend_options(backend: str, sim_url: str | None, kubeconfig: str | None, context: str | None) -> None:
    """Usage errors for a backend that does not exist or options that do not go with it."""
    if backend not in BACKENDS:
        raise typer.BadParameter(f"{backend!r}: choose one of {', '.join(BACKENDS)}", param_hint="--backend")
    if backend == "sim" and not sim_url:
        raise typer.BadParameter("--backend sim needs --sim-url (or BERTH_SIM_URL)", param_hint="--sim-url")
    if backend == "sim" and (kubeconfig or context):
        raise typer.BadParameter("--kubeconfig and --context are for --backend kube", param_hint="--backend")


def _cluster_backend(
    backend: str,
    sim_url: str | None,
    kubeconfig: str | None,
    context: str | None,
    *,
    limiter: TokenBucket,
    qps: float,
    burst: int,
    workers: int,
    timeout_s: float,
) -> Any:
    """The cluster the commands take effect on. The kube backend's events get a limiter of their
    own at the same rate, as kube-scheduler's event client does."""
    if backend == "kube":
        from .ratelimit import TokenBucket

        return _kube_backend(
            kubeconfig,
            context,
            limiter=limiter,
            event_limiter=TokenBucket(qps, burst),
            workers=workers,
            timeout_s=timeout_s,
        )
    assert sim_url is not None
    return _simulator_backend(sim_url, timeout_s=timeout_s)


def _simulator_backend(sim_url: str, *, timeout_s: float) -> Any:
    """The cluster simulator's backend. It comes with the development tooling (berth-dev), found
    through the ``berth.binder_backends`` entry points; without it, a usage error says so."""
    from berth.plugins import BINDER_BACKENDS, INSTALL_DEV_TOOLING, load_plugin

    make_backend = load_plugin(BINDER_BACKENDS, "sim")
    if make_backend is None:
        raise typer.BadParameter(
            f"sim drives the cluster simulator, which comes with Berth's development tooling: {INSTALL_DEV_TOOLING}",
            param_hint="--backend",
        )
    return make_backend(sim_url, timeout_s=timeout_s)


def _kube_backend(kubeconfig: str | None, context: str | None, **options: Any) -> Any:
    """The Kubernetes backend, or a usage error that says what to fix."""
    from kubernetes.config import ConfigException

    from .kube_backend import KubeBackend, load_api_client

    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        raise typer.BadParameter(f"{kubeconfig}: no such file", param_hint="--kubeconfig")
    try:
        # Its own requests are the node informer's and the health check's; bindings and the other
        # write-backs have the transport's connections (--max-in-flight of them).
        client = load_api_client(kubeconfig, context, pool_size=4)
    except (ConfigException, OSError, ValueError) as exc:
        raise typer.BadParameter(
            f"cannot load a Kubernetes configuration: {exc}. Pass --kubeconfig (and --context), set "
            "KUBECONFIG, or run in a pod with a ServiceAccount.",
            param_hint="--kubeconfig",
        ) from exc
    return KubeBackend(client, **options)
