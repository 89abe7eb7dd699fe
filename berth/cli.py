"""The ``berth`` command line: one entry point for services, tools and the local stack.

Each sub-app lives beside the code it drives; this module only wires them together and turns
expected failures into messages that say what to do (exit 2 for bad input, 1 for failures).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="berth",
    help="Berth: an event-sourced, GPU-aware scheduler for Kubernetes on Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dev_app = typer.Typer(help="Run Kafka and Postgres locally without Docker (for demos and tests).",
                      no_args_is_help=True)
publish_app = typer.Typer(help="Publish events to Berth (for gateways, model servers, cloud hooks).",
                          no_args_is_help=True)
db_app = typer.Typer(help="Manage the audit store's schema (Alembic migrations).", no_args_is_help=True)
schemas_app = typer.Typer(help="The event contract's JSON Schemas.", no_args_is_help=True)
topics_app = typer.Typer(help="Berth's Kafka topics.", no_args_is_help=True)
app.add_typer(dev_app, name="dev")
app.add_typer(publish_app, name="publish")
app.add_typer(db_app, name="db")
app.add_typer(schemas_app, name="schemas")
app.add_typer(topics_app, name="topics")

err = Console(stderr=True)

KafkaOption = Annotated[
    Optional[str],
    typer.Option("--kafka", envvar="BERTH_KAFKA_BOOTSTRAP",
                 help="Kafka bootstrap servers, host:port[,host:port]."),
]
DatabaseOption = Annotated[
    Optional[str],
    typer.Option("--database-url", envvar="BERTH_DATABASE_URL", show_default=False,
                 help="SQLAlchemy URL of the audit store, e.g. postgresql+psycopg://u:p@host:5432/berth."),
]


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _settings(kafka: str | None = None, database_url: str | None = None) -> Any:
    from berth.settings import load_settings

    try:
        return load_settings(kafka=kafka, database_url=database_url)
    except ValidationError as exc:
        raise fail(f"invalid settings: {_validation_message(exc)}", 2) from exc


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``"120s"``, ``"2m"``, ``"1.5h"``, ``"90"`` (seconds) → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration; use e.g. 120s, 2m or 1h")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


# --- dev ---------------------------------------------------------------------------------------


def _devstack(action: str, **kwargs: Any) -> Any:
    from berth.devstack import stack
    from berth.devstack.procs import DevStackError

    try:
        return getattr(stack, action)(**kwargs)
    except DevStackError as exc:
        raise fail(str(exc)) from exc


@dev_app.command("up")
def dev_up(
    with_kubernetes: Annotated[bool, typer.Option(
        help="Also run etcd and kube-apiserver v1.34 (built from the Go module proxy on first use, "
             "about 10 minutes), print BERTH_KUBECONFIG, and start Berth's services against it "
             "(see --services).")] = False,
    services: Annotated[bool, typer.Option(
        "--services/--no-services",
        help="With --with-kubernetes: migrate the audit store, create the topics and start ingest, "
             "inventory, token-lag, decision, audit and binder (--backend kube) in the background, "
             "so pods with schedulerName: berth get scheduled. --no-services: the infrastructure only.")] = True,
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
    label: Annotated[Optional[list[str]], typer.Option(
        help="KEY=VALUE label on every node, repeatable (e.g. --label node-pool=inference); it may "
             "override the GPU Feature Discovery labels the nodes get anyway.")] = None,
    taint: Annotated[Optional[list[str]], typer.Option(
        help="KEY=VALUE:EFFECT (or KEY:EFFECT) taint on every node, repeatable; EFFECT is NoSchedule, "
             "PreferNoSchedule or NoExecute.")] = None,
    kubeconfig: Annotated[Optional[str], typer.Option(envvar="BERTH_KUBECONFIG", help="Cluster to use.")] = None,
    delete: Annotated[bool, typer.Option(help="Delete the fake nodes instead.")] = False,
) -> None:
    """Create fake GPU nodes (API objects with labels, taints, capacity and GPU topology; no kubelet)."""
    from berth.devstack.fakenodes import parse_label, parse_taint

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
    names = _devstack("fake_nodes", count=count, kubeconfig=kubeconfig, gpus=gpus, product=product,
                      prefix=prefix, zones=[z for z in zones.split(",") if z], spot_fraction=spot_fraction,
                      taints=taints, labels=labels or None)
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


# --- publish -----------------------------------------------------------------------------------


def _publish(kafka: str | None, build: Any) -> None:
    from berth.client import publish_sync

    settings = _settings(kafka)
    try:
        event = build()
    except ValidationError as exc:
        raise fail(f"refused: {_validation_message(exc)}", 2) from exc
    try:
        publish_sync(settings.kafka, event, source="berth-cli")
    except Exception as exc:  # connection problems: say where we tried
        raise fail(f"could not publish to Kafka at {settings.kafka.bootstrap}: {exc}. "
                   "Is it running? (`berth dev up` starts one locally)") from exc
    print(event.model_dump_json())


@publish_app.command("queue-lag")
def publish_queue_lag(
    pool: Annotated[str, typer.Option(help="Inference pool (AgentPool) name.")],
    tokens: Annotated[int, typer.Option(help="Tokens waiting in the pool's queue.")],
    rate: Annotated[float, typer.Option(help="Tokens per second the pool is processing now.")],
    namespace: Annotated[str, typer.Option(help="Namespace of the pool.")] = "default",
    sessions: Annotated[int, typer.Option(help="Active sessions.")] = 0,
    context: Annotated[Optional[int], typer.Option(help="Mean context length in tokens.")] = None,
    ttft_ms: Annotated[Optional[float], typer.Option(help="Observed time to first token, ms.")] = None,
    kafka: KafkaOption = None,
) -> None:
    """Report an inference pool's token-queue lag (what gateways and model servers send)."""
    from datetime import datetime, timezone

    from berth.schemas import QueueLagObserved

    _publish(kafka, lambda: QueueLagObserved(
        pool=pool, namespace=namespace, tokens_in_queue=tokens, token_rate=rate,
        active_sessions=sessions, mean_context_tokens=context, observed_ttft_ms=ttft_ms,
        observed_at=datetime.now(timezone.utc)))


@publish_app.command("spot-notice")
def publish_spot_notice(
    node: Annotated[str, typer.Option(help="The spot node to be reclaimed.")],
    in_: Annotated[str, typer.Option("--in", help="Time until reclaim, e.g. 120s (AWS) or 30s (GCP).")],
    provider: Annotated[str, typer.Option(help="aws, gcp, azure or other.")] = "other",
    kafka: KafkaOption = None,
) -> None:
    """Report that a spot node will be reclaimed soon."""
    from datetime import datetime, timedelta, timezone

    from berth.schemas import SpotInterruptionNotice

    seconds = parse_duration(in_)
    if seconds <= 0:
        raise fail(f"--in must be positive, got {in_!r}", 2)
    now = datetime.now(timezone.utc)
    _publish(kafka, lambda: SpotInterruptionNotice(
        node=node, issued_at=now, deadline=now + timedelta(seconds=seconds), provider=provider))


@publish_app.command("gpu-telemetry")
def publish_gpu_telemetry(
    node: Annotated[str, typer.Option(help="Node the GPUs belong to.")],
    device: Annotated[list[str], typer.Option(
        help="INDEX:UTIL_PCT:MEM_USED_MIB[:unhealthy], repeatable, e.g. --device 0:85:40960")],
    kafka: KafkaOption = None,
) -> None:
    """Report one sample of a node's GPU utilisation, memory and health."""
    from datetime import datetime, timezone

    from berth.schemas import GpuDeviceSample, GpuTelemetry

    samples = []
    for spec in device:
        parts = spec.split(":")
        if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "unhealthy"):
            raise fail(f"--device {spec!r}: expected INDEX:UTIL_PCT:MEM_USED_MIB[:unhealthy]", 2)
        try:
            samples.append(GpuDeviceSample(index=int(parts[0]), utilization_pct=float(parts[1]),
                                           memory_used_mib=int(parts[2]), healthy=len(parts) == 3))
        except (ValueError, ValidationError) as exc:
            raise fail(f"--device {spec!r}: {exc}", 2) from exc
    _publish(kafka, lambda: GpuTelemetry(node=node, devices=tuple(samples),
                                         sampled_at=datetime.now(timezone.utc)))


# --- topics ------------------------------------------------------------------------------------


@topics_app.command("create")
def topics_create(kafka: KafkaOption = None) -> None:
    """Create every Berth topic that does not exist yet (idempotent)."""
    from berth.bus import ensure_topics

    settings = _settings(kafka)
    created = asyncio.run(ensure_topics(settings.kafka))
    err.print(f"created {len(created)} topic(s)" + (f": {', '.join(created)}" if created else ""))


@topics_app.command("list")
def topics_list() -> None:
    """List Berth's topics: name, key, partitions, event types."""
    from rich.table import Table

    from berth.schemas import ALL_TOPICS

    table = Table()
    table.add_column("topic", no_wrap=True)
    table.add_column("key")
    table.add_column("partitions", justify="right")
    table.add_column("events", overflow="fold")
    for topic in ALL_TOPICS:
        table.add_row(topic.name, topic.key, str(topic.partitions), "\n".join(sorted(topic.event_types)))
    Console().print(table)


@app.command("tail")
def tail(
    topic: Annotated[str, typer.Argument(help="Topic to read, e.g. berth.inference.queue.v1.")],
    max_events: Annotated[int, typer.Option("--max", help="Stop after this many events.")] = 100,
    timeout: Annotated[float, typer.Option(help="Stop after this many idle seconds.")] = 5.0,
    kafka: KafkaOption = None,
) -> None:
    """Print a topic's events from the beginning as JSON lines (through the contract)."""
    from berth.bus import EventConsumer
    from berth.schemas import topic_named

    settings = _settings(kafka)
    try:
        target = topic_named(topic)
    except KeyError as exc:
        raise fail(str(exc.args[0]), 2) from exc

    async def _run() -> int:
        count = 0
        async with EventConsumer(settings.kafka, [target], group_id=None, name="berth-tail",
                                 auto_commit=False) as consumer:
            async for item in consumer.events(idle_timeout_s=timeout):
                print(json.dumps({"offset": item.offset, "partition": item.partition,
                                  "type": item.decoded.type, "event": item.event.model_dump(mode="json")}))
                count += 1
                if count >= max_events:
                    break
        return count

    count = asyncio.run(_run())
    err.print(f"{count} event(s) from {topic}")


# --- db ----------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseOption = None,
) -> None:
    """Apply migrations up to REVISION (default: the latest)."""
    from berth.services.audit import db

    settings = _settings(database_url=database_url)
    db.upgrade(settings.database, revision)
    err.print(f"audit store at {db.current_revision(settings.database)} "
              f"({settings.database.redacted_url()})")


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision ('base' removes everything).")],
    database_url: DatabaseOption = None,
) -> None:
    """Revert migrations down to REVISION."""
    from berth.services.audit import db

    settings = _settings(database_url=database_url)
    db.downgrade(settings.database, revision)
    err.print(f"audit store at {db.current_revision(settings.database) or 'base'}")


@db_app.command("current")
def db_current(database_url: DatabaseOption = None) -> None:
    """Print the audit store's current migration revision."""
    from berth.services.audit import db

    settings = _settings(database_url=database_url)
    print(db.current_revision(settings.database) or "base")


# --- schemas -----------------------------------------------------------------------------------


@schemas_app.command("export")
def schemas_export(
    allow_breaking: Annotated[bool, typer.Option(
        help="Write even if a change breaks consumers (only with a new topic version).")] = False,
) -> None:
    """Rewrite schemas/jsonschema/*.json from the models, refusing breaking changes."""
    from berth.schemas import export

    committed = export.committed_schemas()
    problems = [f"{name}: {problem}" for name, schema in export.event_schemas().items()
                if name in committed for problem in export.breaking_changes(committed[name], schema)]
    if problems and not allow_breaking:
        raise fail("breaking change(s) to the event contract:\n  " + "\n  ".join(problems)
                   + "\nAdd a new event version (and topic) instead, or pass --allow-breaking.", 1)
    written = export.write_schemas()
    err.print(f"{len(written)} schema file(s) updated in {export.SCHEMA_DIR}")


@app.command("demo")
def demo(
    speed: Annotated[float, typer.Option(help="Simulated seconds per real second.")] = 20.0,
    keep_logs: Annotated[Optional[Path], typer.Option(
        file_okay=False, help="Keep the services' logs and the workload in this folder.")] = None,
) -> None:
    """Berth's main job: Kafka, Postgres and every service on a 1,000-pod GPU workload, then replay."""
    from berth.demo import main as demo_main
    from berth.supervisor import ServiceFailed

    try:
        demo_main(speed=speed, keep_logs=keep_logs)
    except ServiceFailed as exc:
        raise fail(str(exc)) from exc


@app.command("version")
def version() -> None:
    """Print Berth's version."""
    from berth import __version__

    print(__version__)


SERVICES = {
    "ingest": "ingest",
    "inventory": "inventory",
    "token-lag": "token_lag",
    "decision": "decision",
    "binder": "binder",
    "audit": "audit",
    "cluster-sim": "cluster_sim",
}
"""CLI name → package under services/. Each package's ``cli.py`` defines ``app`` (a Typer with a
``run`` command); heavy imports happen inside the commands, so ``berth --help`` stays fast."""


def _register_optional_commands() -> None:
    import importlib

    for name, package in SERVICES.items():
        module_name = f"berth.services.{package}.cli"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name in (module_name, f"berth.services.{package}"):
                continue  # that service is not part of this build
            raise
        app.add_typer(module.app, name=name)
    try:
        from berth.simulate import simulate
    except ModuleNotFoundError as exc:
        if exc.name != "berth.simulate":
            raise
    else:
        app.command("simulate", help=(simulate.__doc__ or "").strip().split("\n")[0] or None)(simulate)


_register_optional_commands()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
