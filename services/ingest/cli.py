"""``berth ingest run``."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from berth.options import HealthPortOption, KafkaOption, MetricsPortOption

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from .service import IngestConfig

app = typer.Typer(
    help="Watch Kubernetes and publish the cluster's pods, nodes and policies to Kafka.", no_args_is_help=True
)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_lease_namespace() -> str:
    """``POD_NAMESPACE``, else the service account's namespace when in a cluster, else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        envvar="KUBECONFIG",
        exists=True,
        dir_okay=False,
        help="Kubeconfig file. Default: the in-cluster service account, else ~/.kube/config.",
    ),
]
ContextOption = Annotated[str | None, typer.Option(help="Kubeconfig context (default: its current one).")]
NamespaceOption = Annotated[
    list[str] | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Watch namespaced resources in this namespace only; repeat for several. Default: all "
        "namespaces. Nodes, PriorityClasses and Namespaces are cluster-wide either way.",
    ),
]
ResourceOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Watch only this resource (pods, nodes, podgroups, priorityclasses, resourcequotas, "
        "limitranges, poddisruptionbudgets, agentpools, namespaces); repeat for several. Default: all."
    ),
]
SchedulerNameOption = Annotated[
    list[str] | None,
    typer.Option(
        help="spec.schedulerName of the pods Berth schedules (their pending pods are published); "
        "repeat for several. Bound pods of every scheduler are published. Default: berth."
    ),
]
LeaseNameOption = Annotated[
    str, typer.Option(help="Name of the coordination.k8s.io Lease that elects the one publishing instance.")
]
LeaseNamespaceOption = Annotated[
    str | None,
    typer.Option(
        envvar="POD_NAMESPACE",
        show_default=False,
        help="Namespace of the Lease. Default: the pod's own (POD_NAMESPACE or the service account's), else default.",
    ),
]
LeaseDurationOption = Annotated[
    int, typer.Option(min=2, help="Seconds a standby waits after the last renewal before taking over.")
]
RenewDeadlineOption = Annotated[
    float, typer.Option(help="Seconds the leader keeps trying to renew before it steps down (< lease duration).")
]
RetryPeriodOption = Annotated[
    float, typer.Option(help="Seconds between Lease renewals and between a standby's attempts (< renew deadline).")
]
IdentityOption = Annotated[
    str | None, typer.Option(help="This instance's name in the Lease. Default: host name plus a random suffix.")
]
PageSizeOption = Annotated[int, typer.Option(min=1, help="Objects per list page (limit/continue).")]
WatchTimeoutOption = Annotated[
    int, typer.Option(min=1, help="timeoutSeconds of each watch request; the watch resumes from where it was.")
]
PodsTopicOption = Annotated[str | None, typer.Option(help="Override the pods topic's name.")]
NodesTopicOption = Annotated[str | None, typer.Option(help="Override the nodes topic's name.")]
PoliciesTopicOption = Annotated[str | None, typer.Option(help="Override the policies topic's name.")]


@app.command("run")
def run(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    resource: ResourceOption = None,
    scheduler_name: SchedulerNameOption = None,
    lease_name: LeaseNameOption = "berth-ingest",
    lease_namespace: LeaseNamespaceOption = None,
    lease_duration: LeaseDurationOption = 15,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    identity: IdentityOption = None,
    page_size: PageSizeOption = 500,
    watch_timeout: WatchTimeoutOption = 300,
    pods_topic: PodsTopicOption = None,
    nodes_topic: NodesTopicOption = None,
    policies_topic: PoliciesTopicOption = None,
    kafka: KafkaOption = None,
    metrics_port: MetricsPortOption = None,
    health_port: HealthPortOption = None,
) -> None:
    """List and watch the cluster; while holding the Lease, publish PodObserved/PodDeleted,
    NodeObserved/NodeRemoved and PolicyObserved/PolicyRemoved (resuming from resourceVersion,
    relisting on 410 Gone)."""
    from berth.health import HealthServer, serving
    from berth.lifecycle import stop_on_signals
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics
    from berth.settings import load_settings

    from .health import register
    from .kubeapi import KubeApi
    from .service import IngestService

    topic_names = {
        role: name
        for role, name in (("pods", pods_topic), ("nodes", nodes_topic), ("policies", policies_topic))
        if name
    }
    config = _ingest_config(
        identity=identity,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        namespaces=namespace,
        resources=resource,
        scheduler_names=scheduler_name,
        topic_names=topic_names,
        page_size=page_size,
        watch_timeout=watch_timeout,
    )
    client = _api_client(kubeconfig, context)

    settings = load_settings(kafka=kafka)
    config = replace(config, spot_labels=settings.spot_label_table)
    configure_logging(settings.log_level, settings.log_format, service="ingest")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)

    async def main() -> None:
        with client:
            service = IngestService(config, settings.kafka, KubeApi(client))
            health = register(HealthServer("ingest"), service)
            async with serving(health, health_port if health_port is not None else settings.health_port):
                await service.run(stop_on_signals())

    asyncio.run(main())


def _ingest_config(
    *,
    identity: str | None,
    lease_namespace: str | None,
    lease_name: str,
    lease_duration: int,
    renew_deadline: float,
    retry_period: float,
    namespaces: list[str] | None,
    resources: list[str] | None,
    scheduler_names: list[str] | None,
    topic_names: dict[str, str],
    page_size: int,
    watch_timeout: int,
) -> IngestConfig:
    """The service's configuration from the options, with their defaults filled in; a usage error
    when they do not make sense together (the Lease timings must be ordered)."""
    from .service import IngestConfig
    from .translate import DEFAULT_SCHEDULER_NAMES, RESOURCES

    try:
        config = IngestConfig(
            identity=identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
            lease_namespace=lease_namespace or default_lease_namespace(),
            lease_name=lease_name,
            lease_duration_s=lease_duration,
            renew_deadline_s=renew_deadline,
            retry_period_s=retry_period,
            namespaces=tuple(namespaces or ()),
            resources=tuple(resources or RESOURCES),
            scheduler_names=frozenset(scheduler_names) if scheduler_names else DEFAULT_SCHEDULER_NAMES,
            topic_names=topic_names,
            page_size=page_size,
            watch_timeout_s=watch_timeout,
        )
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                f"need --retry-period ({retry_period}) < --renew-deadline ({renew_deadline}) "
                f"< --lease-duration ({lease_duration})"
            )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return config


def _api_client(kubeconfig: Path | None, context: str | None) -> ApiClient:
    """The API client for ``kubeconfig``/``context``; a usage error when no configuration loads."""
    from kubernetes.config import ConfigException

    from .kubeapi import api_client_from_kubeconfig

    try:
        return api_client_from_kubeconfig(str(kubeconfig) if kubeconfig else None, context)
    except ConfigException as exc:
        raise typer.BadParameter(str(exc), param_hint="--kubeconfig") from exc
