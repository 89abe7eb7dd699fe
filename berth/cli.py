"""The ``berth`` command line: one entry point for services, tools and the local stack.

Each sub-app lives beside the code it drives; this module only wires them together and turns
expected failures into messages that say what to do (exit 2 for bad input, 1 for failures).
The commands of the development tooling (``berth dev``, ``berth demo``, ``berth cluster-sim``)
come from the berth-dev distribution through entry points (:mod:`berth.plugins`); without it they
say how to install it.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from berth.plugins import CLI_PLUGINS, INSTALL_DEV_TOOLING, load_plugin, plugin_names

app = typer.Typer(
    name="berth",
    help="Berth: an event-sourced, GPU-aware scheduler for Kubernetes on Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
publish_app = typer.Typer(help="Publish events to Berth (for gateways, model servers, cloud hooks).",
                          no_args_is_help=True)
db_app = typer.Typer(help="Manage the audit store's schema (Alembic migrations).", no_args_is_help=True)
schemas_app = typer.Typer(help="The event contract's JSON Schemas.", no_args_is_help=True)
topics_app = typer.Typer(help="Berth's Kafka topics.", no_args_is_help=True)

DEV_TOOLING_COMMANDS = ("dev", "demo", "cluster-sim")
"""Commands the development tooling (berth-dev) provides, in the order of ``berth --help``."""


def _add_plugin_command(name: str) -> None:
    """Add command ``name`` from the ``berth.cli_plugins`` entry points: a Typer as a command
    group, a function as one command. When no installed distribution provides it, a hidden
    command takes its place that takes any arguments and says to install the development tooling."""
    command = load_plugin(CLI_PLUGINS, name)
    if isinstance(command, typer.Typer):
        app.add_typer(command, name=name)
    elif command is not None:
        app.command(name)(command)
    else:
        def missing() -> None:
            raise fail(f"`berth {name}` comes with Berth's development tooling: {INSTALL_DEV_TOOLING}")

        app.command(name, hidden=True, add_help_option=False,
                    context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(missing)


_add_plugin_command("dev")
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
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing: exit 1 if a file is stale or the change is not releasable.")] = False,
    allow_breaking: Annotated[bool, typer.Option(
        help="Write even if a change breaks consumers (only with a new topic version).")] = False,
) -> None:
    """Rewrite schemas/jsonschema/*.json from the models, refusing what a deployed consumer or
    producer of the committed (released) schemas could not read.

    Within a major version a change may only add optional fields, under a raised minor version
    (the model's ``schema_minor``): consumers ignore unknown fields of a newer minor only.
    """
    from berth.schemas import compat, export

    committed = export.committed_schemas()
    generated = export.event_schemas()
    problems = compat.check(committed, generated)
    stale = sorted(name for name, schema in generated.items()
                   if name not in committed or export.render(schema) != export.render(committed[name]))
    if problems and not allow_breaking:
        raise fail("change(s) an older consumer or producer of the released schemas cannot survive:\n  "
                   + "\n  ".join(problems)
                   + "\nAdd optional fields under a raised schema_minor, or a new event version on a new topic; "
                   "--allow-breaking writes anyway.", 1)
    if check:
        if stale:
            raise fail(f"{len(stale)} committed schema(s) differ from the models: {', '.join(stale)}; "
                       "run `berth schemas export` and commit", 1)
        err.print(f"{len(committed)} committed schema(s) current" + (" (breaking changes allowed)" if problems else ""))
        return
    written = export.write_schemas()
    err.print(f"{len(written)} schema file(s) updated in {export.SCHEMA_DIR}")


_add_plugin_command("demo")


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
    _add_plugin_command("cluster-sim")
    for name in plugin_names(CLI_PLUGINS):
        if name not in DEV_TOOLING_COMMANDS:
            _add_plugin_command(name)
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
