"""The ``berth`` commands of the development tooling: ``berth dev ...`` and ``berth demo``.

The product's CLI (:mod:`berth.cli`) adds them through the ``berth.cli_plugins`` entry points of
this distribution (see ``dev/pyproject.toml``); so do ``berth cluster-sim`` (:mod:`.cluster_sim.cli`).
Heavy imports happen inside the commands, so ``berth --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

dev_app = typer.Typer(help="Run Kafka and Postgres locally without Docker (for demos and tests).", no_args_is_help=True)

err = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as the ``berth`` command prints errors; raise the result to exit with ``code``."""
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _devstack(action: str, **kwargs: Any) -> Any:
    from berth_dev.devstack import stack
    from berth_dev.devstack.procs import DevStackError

    try:
        return getattr(stack, action)(**kwargs)
    except DevStackError as exc:
        raise fail(str(exc)) from exc


@dev_app.command("up")
def dev_up(
    with_kubernetes: Annotated[
        bool,
        typer.Option(
            help="Also run etcd and kube-apiserver v1.34 (built from the Go module proxy on first use, "
            "about 10 minutes), print BERTH_KUBECONFIG, and start Berth's services against it "
            "(see --services)."
        ),
    ] = False,
    services: Annotated[
        bool,
        typer.Option(
            "--services/--no-services",
            help="With --with-kubernetes: migrate the audit store, create the topics and start ingest, "
            "inventory, token-lag, decision, audit and binder (--backend kube) in the background, "
            "so pods with schedulerName: berth get scheduled. --no-services: the infrastructure only.",
        ),
    ] = True,
) -> None:
    """Start Kafka 3.9.1 (KRaft) and Postgres 15 in the background; print their endpoints.

    stdout gets only `BERTH_KAFKA_BOOTSTRAP=…` and `BERTH_DATABASE_URL=…` (and `BERTH_KUBECONFIG=…`),
    so `export $(berth dev up)` points later commands at them. `berth dev status` shows what runs,
    `berth dev down` stops it all.
    """
    _devstack("up", with_kubernetes=with_kubernetes, with_services=with_kubernetes and services)


@dev_app.command("nodes")
def dev_nodes(
    count: Annotated[int, typer.Argument(min=0, help="How many fake GPU nodes to create.")] = 10,
    gpus: Annotated[int, typer.Option(min=0, help="GPUs per node.")] = 8,
    product: Annotated[str, typer.Option(help="nvidia.com/gpu.product label.")] = "NVIDIA-H100-80GB-HBM3",
    prefix: Annotated[str, typer.Option(help="Node name prefix.")] = "gpu-",
    zones: Annotated[str, typer.Option(help="Comma-separated zones to spread over.")] = "zone-a,zone-b",
    spot_fraction: Annotated[float, typer.Option(min=0, max=1, help="Share of spot nodes.")] = 0.0,
    label: Annotated[
        list[str] | None,
        typer.Option(
            help="KEY=VALUE label on every node, repeatable (e.g. --label berth.io/node-pool=inference); it may "
            "override the GPU Feature Discovery labels the nodes get anyway."
        ),
    ] = None,
    taint: Annotated[
        list[str] | None,
        typer.Option(
            help="KEY=VALUE:EFFECT (or KEY:EFFECT) taint on every node, repeatable; EFFECT is NoSchedule, "
            "PreferNoSchedule or NoExecute."
        ),
    ] = None,
    kubeconfig: Annotated[str | None, typer.Option(envvar="BERTH_KUBECONFIG", help="Cluster to use.")] = None,
    delete: Annotated[bool, typer.Option(help="Delete the fake nodes instead.")] = False,
) -> None:
    """Create fake GPU nodes (API objects with labels, taints, capacity and GPU topology; no kubelet)."""
    from berth_dev.devstack.fakenodes import parse_label, parse_taint

    if delete:
        err.print(f"deleted {_devstack('fake_nodes', count=0, kubeconfig=kubeconfig, delete=True)} fake nodes")
        return
    try:
        labels = dict(parse_label(item) for item in label or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--label") from exc
    try:
        taints = tuple(parse_taint(item) for item in taint or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--taint") from exc
    names = _devstack(
        "fake_nodes",
        count=count,
        kubeconfig=kubeconfig,
        gpus=gpus,
        product=product,
        prefix=prefix,
        zones=[z for z in zones.split(",") if z],
        spot_fraction=spot_fraction,
        taints=taints,
        labels=labels or None,
    )
    err.print(f"{len(names)} fake nodes ready" + (f": {names[0]} … {names[-1]}" if names else ""))


@dev_app.command("down")
def dev_down() -> None:
    """Stop everything `berth dev up` started (Berth's services first) and remove its data."""
    _devstack("down")


@dev_app.command("status")
def dev_status() -> None:
    """Show what `berth dev up` started (infrastructure and Berth's services) and whether each
    answers (exit 1 when not healthy)."""
    if not _devstack("status").healthy:
        raise typer.Exit(1)


def demo(
    speed: Annotated[float, typer.Option(help="Simulated seconds per real second.")] = 20.0,
    keep_logs: Annotated[
        Path | None, typer.Option(file_okay=False, help="Keep the services' logs and the workload in this folder.")
    ] = None,
) -> None:
    """Berth's main job: Kafka, Postgres and every service on a 1,000-pod GPU workload, then replay."""
    from berth_dev.demo import main as demo_main
    from berth_dev.supervisor import ServiceFailed

    try:
        demo_main(speed=speed, keep_logs=keep_logs)
    except ServiceFailed as exc:
        raise fail(str(exc)) from exc
