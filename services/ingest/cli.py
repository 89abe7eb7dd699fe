"""``berth ingest run``."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Watch Kubernetes and publish the cluster's pods, nodes and policies to Kafka.",
                  no_args_is_help=True)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_lease_namespace() -> str:
    """``POD_NAMESPACE``, else the service account's namespace when in a cluster, else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


@app.command("run")
def run(
    kubeconfig: Annotated[Optional[Path], typer.Option(
        envvar="KUBECONFIG", exists=True, dir_okay=False,
        help="Kubeconfig file. Default: the in-cluster service account, else ~/.kube/config.")] = None,
    context: Annotated[Optional[str], typer.Option(help="Kubeconfig context (default: its current one).")] = None,
    namespace: Annotated[Optional[list[str]], typer.Option(
        "--namespace", "-n",
        help="Watch namespaced resources in this namespace only; repeat for several. Default: all "
             "namespaces. Nodes, PriorityClasses and Namespaces are cluster-wide either way.")] = None,
    resource: Annotated[Optional[list[str]], typer.Option(
        help="Watch only this resource (pods, nodes, podgroups, priorityclasses, resourcequotas, "
             "limitranges, poddisruptionbudgets, agentpools, namespaces); repeat for several. Default: all.")] = None,
    scheduler_name: Annotated[Optional[list[str]], typer.Option(
        help="spec.schedulerName of the pods Berth schedules (their pending pods are published); "
             "repeat for several. Bound pods of every scheduler are published. Default: berth.")] = None,
    lease_name: Annotated[str, typer.Option(help="Name of the coordination.k8s.io Lease that elects "
                                                 "the one publishing instance.")] = "berth-ingest",
    lease_namespace: Annotated[Optional[str], typer.Option(
        envvar="POD_NAMESPACE", show_default=False,
        help="Namespace of the Lease. Default: the pod's own (POD_NAMESPACE or the service "
             "account's), else default.")] = None,
    lease_duration: Annotated[int, typer.Option(
        min=2, help="Seconds a standby waits after the last renewal before taking over.")] = 15,
    renew_deadline: Annotated[float, typer.Option(
        help="Seconds the leader keeps trying to renew before it steps down (< lease duration).")] = 10.0,
    retry_period: Annotated[float, typer.Option(
        help="Seconds between Lease renewals and between a standby's attempts (< renew deadline).")] = 2.0,
    identity: Annotated[Optional[str], typer.Option(
        help="This instance's name in the Lease. Default: host name plus a random suffix.")] = None,
    page_size: Annotated[int, typer.Option(min=1, help="Objects per list page (limit/continue).")] = 500,
    watch_timeout: Annotated[int, typer.Option(
        min=1, help="timeoutSeconds of each watch request; the watch resumes from where it was.")] = 300,
    pods_topic: Annotated[Optional[str], typer.Option(help="Override the pods topic's name.")] = None,
    nodes_topic: Annotated[Optional[str], typer.Option(help="Override the nodes topic's name.")] = None,
    policies_topic: Annotated[Optional[str], typer.Option(help="Override the policies topic's name.")] = None,
    kafka: Annotated[Optional[str], typer.Option("--kafka", envvar="BERTH_KAFKA_BOOTSTRAP",
                                                 help="Kafka bootstrap servers.")] = None,
    metrics_port: Annotated[Optional[int], typer.Option(help="Serve /metrics on this port.")] = None,
) -> None:
    """List and watch the cluster; while holding the Lease, publish PodObserved/PodDeleted,
    NodeObserved/NodeRemoved and PolicyObserved/PolicyRemoved (resuming from resourceVersion,
    relisting on 410 Gone)."""
    from kubernetes.config import ConfigException

    from berth.lifecycle import stop_on_signals
    from berth.logs import configure_logging
    from berth.metrics import serve_metrics
    from berth.settings import load_settings

    from .kubeapi import KubeApi, api_client_from_kubeconfig
    from .service import IngestConfig, IngestService
    from .translate import DEFAULT_SCHEDULER_NAMES, RESOURCES

    topic_names = {role: name for role, name in
                   (("pods", pods_topic), ("nodes", nodes_topic), ("policies", policies_topic)) if name}
    try:
        config = IngestConfig(
            identity=identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
            lease_namespace=lease_namespace or default_lease_namespace(),
            lease_name=lease_name,
            lease_duration_s=lease_duration,
            renew_deadline_s=renew_deadline,
            retry_period_s=retry_period,
            namespaces=tuple(namespace or ()),
            resources=tuple(resource or RESOURCES),
            scheduler_names=frozenset(scheduler_name) if scheduler_name else DEFAULT_SCHEDULER_NAMES,
            topic_names=topic_names,
            page_size=page_size,
            watch_timeout_s=watch_timeout,
        )
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(f"need --retry-period ({retry_period}) < --renew-deadline ({renew_deadline}) "
                             f"< --lease-duration ({lease_duration})")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        client = api_client_from_kubeconfig(str(kubeconfig) if kubeconfig else None, context)
    except ConfigException as exc:
        raise typer.BadParameter(str(exc), param_hint="--kubeconfig") from exc

    settings = load_settings(kafka=kafka)
    configure_logging(settings.log_level, settings.log_format, service="ingest")
    serve_metrics(metrics_port if metrics_port is not None else settings.metrics_port)

    async def main() -> None:
        with client:
            await IngestService(config, settings.kafka, KubeApi(client)).run(stop_on_signals())

    asyncio.run(main())
