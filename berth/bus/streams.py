"""What every Berth faust service shares: broker options, one refusal path, an outbox, a worker.

* :func:`faust_app_options` turns :class:`~berth.settings.KafkaSettings` (SASL/TLS included) into
  ``faust.App`` keyword arguments; :func:`faust_app` makes the app of one installation, its group
  and every topic faust derives from its id named through :class:`~berth.schemas.topics.KafkaNames`.
* :func:`accept` decodes a raw faust event with :func:`~.deadletter.decode_or_dead_letter`, the
  one way consumers refuse records: a bad record goes to the dead-letter topic and the agent goes on.
* :class:`Outbox` is the port agents emit through. :class:`FaustOutbox` enqueues on faust's
  producer buffer (``send_soon``): records leave in the order they were emitted, and faust flushes
  that buffer before it commits the offsets of the inputs that produced them (at-least-once).
  :class:`RecordingOutbox` keeps them in a list, for in-process agent tests.
* :func:`run_worker` runs the app until SIGTERM/SIGINT with /metrics served and without faust's
  command line parsing ``sys.argv``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import faust
from aiokafka.admin import AIOKafkaAdminClient
from faust.assignor import LeaderAssignor
from faust.streams import _current_event
from pydantic import TypeAdapter

from berth.logs import get_logger
from berth.metrics import CONSUMER_LAG, DEAD_LETTERED, EVENTS_PUBLISHED, RECORDS_CONSUMED, labelled, serve_metrics
from berth.schemas import DeadLetter, KafkaNames, Topic
from berth.schemas.envelope import DecodedEvent, encode
from berth.schemas.topics import DEAD_LETTER
from berth.settings import KafkaSettings

from .deadletter import decode_or_dead_letter
from .topics_admin import TopicSpec, create_missing_topics, ensure_topics

log = get_logger(__name__)
V = TypeVar("V")

_EVENT_IDS = uuid.UUID("6c1f4a52-52d4-4b0e-9a63-0c6f1b1e2a77")
"""Namespace of the deterministic ids of derived events (see :func:`derived_event_id`)."""


def faust_app_options(kafka: KafkaSettings) -> dict[str, Any]:
    """``faust.App`` keyword arguments that reach the brokers ``kafka`` describes."""
    options: dict[str, Any] = {
        "broker": [f"kafka://{host.strip()}" for host in kafka.bootstrap.split(",") if host.strip()],
        "broker_client_id": kafka.client_id,
        "topic_replication_factor": kafka.replication_factor,
        # faust sends its buffer one record at a time; a few ms of linger lets aiokafka batch
        # them (measured ~1.6x events/s on the token-lag service, as EventProducer's 5 ms).
        "producer_linger": 0.005,
        # A record counts as sent once every in-sync replica has it (-1 = "all"; faust's default
        # too, written out because docs/reliability.md relies on it): with min.insync.replicas=2
        # the loss of the leader loses nothing acknowledged.
        "producer_acks": -1,
    }
    client = kafka.client_options()  # builds the SSL context once, with the CA and client cert
    context = client.get("ssl_context")
    if kafka.security_protocol.startswith("SASL_"):
        options["broker_credentials"] = faust.SASLCredentials(
            username=kafka.sasl_username,
            password=client["sasl_plain_password"],
            ssl_context=context,
            mechanism=kafka.sasl_mechanism,
        )
    elif kafka.security_protocol == "SSL":
        options["broker_credentials"] = faust.SSLCredentials(context)
    return options


def faust_app(app_id: str, names: KafkaNames, **options: Any) -> faust.App:
    """The ``faust.App`` ``app_id`` (a contract-style id such as ``berth-inventory``) of the
    installation ``names`` describes.

    faust uses the app id as consumer group and transactional-id root, and derives topic names
    from it: the app's id is ``names.group(app_id)``, and its tables' changelogs and its leader
    topic, which faust would name after that id, are named ``names.topic(<app_id>-...)``
    instead, so they carry the topic prefix like every other topic (with empty prefixes both are
    faust's own names). Agents' channels must be named explicitly (faust would name an unnamed
    one after the app id).
    """

    class InstallationTable(faust.Table):
        def _changelog_topic_name(self) -> str:
            return names.topic(f"{app_id}-{self.name}-changelog")

    class InstallationLeaderAssignor(LeaderAssignor):
        @property
        def _leader_topic_name(self) -> str:
            return names.topic(f"{app_id}-__assignor-__leader")

    return faust.App(names.group(app_id), Table=InstallationTable, LeaderAssignor=InstallationLeaderAssignor, **options)


async def partition_counts(kafka: KafkaSettings, names: Iterable[str]) -> dict[str, int]:
    """How many partitions each topic has, from the brokers' metadata (not from our registry).
    ``names`` are names on the brokers (``kafka.names.topic(...)``)."""

    wanted = sorted(set(names))
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        described = await admin.describe_topics(wanted)
    finally:
        await admin.close()
    counts = {entry["topic"]: len(entry["partitions"]) for entry in described if entry["partitions"]}
    missing = [name for name in wanted if name not in counts]
    if missing:
        raise RuntimeError(f"topics not found on {kafka.bootstrap}: {', '.join(missing)}")
    return counts


DECODED_KEPT = 4096
"""Decoded values a :class:`ModelTable` keeps, most recently used first."""


class ModelTable(Generic[V]):
    """A faust table of pydantic values, keyed by strings.

    faust chooses a table's codec from its ``value_type`` (faust models only), so the table holds
    each value's JSON bytes and this view converts at the boundary. Create it with
    :meth:`declare`; read and write it only inside an agent (faust tables' rule).

    Values must be immutable (frozen models, changed by copying): the view keeps the values it
    last decoded or stored for the :data:`DECODED_KEPT` most recently used keys, each beside the
    bytes it came from, and hands the same object out while the table holds those very bytes
    (decoding every read was 6 % of the inventory's time; a pod's events come close together). A
    value the table got another way (restored from the changelog) is decoded afresh. Kept for
    every key, the decoded node states alone took the inventory from 163 to 272 MiB.
    """

    def __init__(self, table: Any, adapter: TypeAdapter[V]) -> None:
        self.table = table
        self._adapter = adapter
        self._decoded: dict[str, tuple[bytes, V]] = {}

    @classmethod
    def declare(
        cls, app: faust.App, name: str, adapter: TypeAdapter[V], *, partitions: int, help: str
    ) -> ModelTable[V]:
        return cls(app.Table(name, key_type=str, value_type=bytes, partitions=partitions, help=help), adapter)

    def get(self, key: str) -> V | None:
        data = self.table.get(key)
        if data is None:
            return None
        known = self._decoded.get(key)
        if known is not None and known[0] is data:
            self._remember(key, data, known[1])
            return known[1]
        value = self._adapter.validate_json(data)
        self._remember(key, data, value)
        return value

    def put(self, key: str, value: V | None) -> None:
        """Store ``value`` (None deletes the key; writing it a tombstone on the changelog)."""
        if value is None:
            self._decoded.pop(key, None)
            if key in self.table:
                del self.table[key]
        else:
            data = self._adapter.dump_json(value)
            self.table[key] = data
            self._remember(key, data, value)

    def _remember(self, key: str, data: bytes, value: V) -> None:
        self._decoded.pop(key, None)  # re-inserted last: the dict's order is the order of use
        self._decoded[key] = (data, value)
        if len(self._decoded) > DECODED_KEPT:
            del self._decoded[next(iter(self._decoded))]

    def __len__(self) -> int:
        return len(self.table)


@contextmanager
def tables_act_for(event: Any) -> Iterator[None]:
    """Make ``event`` faust's current event for the block's table reads and writes.

    A faust table keeps a key where the event being processed came from: its changelog
    partition, and with the rocksdict store the partition's database. An agent that takes its
    events in batches (``stream.take_events``) has no current event of its own, so it must say
    which input each table access is for (faust has no public way to, hence its context variable).
    """
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def origin_of(record: Any) -> str:
    """``topic/partition/offset`` of a faust event: the identity of an input record."""
    message = record.message
    return f"{message.topic}/{message.partition}/{message.offset}"


def derived_event_id(consumer: str, origin: str, index: int) -> str:
    """A stable id for the ``index``-th event ``consumer`` emitted for the input at ``origin``.

    Reprocessing the same input after a crash (at-least-once) re-emits events with the same ids,
    so downstream readers can recognise the duplicates.
    """
    return str(uuid.uuid5(_EVENT_IDS, f"{consumer}/{origin}/{index}"))


# --- the outbox port -------------------------------------------------------------------------------


class Outbox(Protocol):
    """Where an agent's events go. ``partition`` None lets the producer hash the key."""

    def publish(self, topic: str, event: Any, *, partition: int | None = None, event_id: str | None = None) -> None: ...

    def publish_raw(self, topic: str, key: bytes, value: bytes, *, partition: int | None = None) -> None:
        """A record that is not a contract event (a service's internal topic)."""
        ...


class FaustOutbox:
    """Enqueues on the app's producer buffer, in call order (see the module docstring).

    Topics are given by contract name; records go to the installation's topics (``names``)."""

    def __init__(self, app: faust.App, *, source: str, names: KafkaNames) -> None:
        self._app = app
        self._source = source
        self._names = names
        self._topics: dict[str, Any] = {}

    def _topic(self, name: str) -> Any:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = self._app.topic(
                self._names.topic(name), key_serializer="raw", value_serializer="raw"
            )
        return topic

    def publish(self, topic: str, event: Any, *, partition: int | None = None, event_id: str | None = None) -> None:
        record = encode(event, source=self._source, event_id=event_id)
        self._topic(topic).send_soon(key=record.key, value=record.value, headers=record.headers, partition=partition)
        labelled(EVENTS_PUBLISHED, self._names.topic(topic), event.type).inc()

    def publish_raw(self, topic: str, key: bytes, value: bytes, *, partition: int | None = None) -> None:
        self._topic(topic).send_soon(key=key, value=value, partition=partition)


@dataclass(frozen=True)
class Published:
    topic: str
    event: Any
    partition: int | None
    event_id: str | None = None
    key: bytes | None = None
    value: bytes | None = None


@dataclass
class RecordingOutbox:
    """Keeps what was published, for tests of agents run in-process."""

    published: list[Published] = field(default_factory=list)

    def publish(self, topic: str, event: Any, *, partition: int | None = None, event_id: str | None = None) -> None:
        self.published.append(Published(topic, event, partition, event_id))

    def publish_raw(self, topic: str, key: bytes, value: bytes, *, partition: int | None = None) -> None:
        self.published.append(Published(topic, None, partition, None, key, value))

    def on(self, topic: str) -> list[Published]:
        return [item for item in self.published if item.topic == topic]


# --- refusing records --------------------------------------------------------------------------------


def accept(topic: Topic, event: Any, *, consumer: str, outbox: Outbox) -> DecodedEvent | None:
    """Decode the raw faust ``event`` of ``topic``; a record that is not a valid event is
    dead-lettered (with its headers, all of them, as they came) and None returned."""
    message = event.message
    labelled(RECORDS_CONSUMED, consumer, message.topic).inc()
    result = decode_or_dead_letter(
        topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=list(message.headers or ()),
        consumer=consumer,
        topic_name=message.topic,
    )
    if isinstance(result, DeadLetter):
        refuse(result, outbox=outbox)
        return None
    return result


def refuse(letter: DeadLetter, *, outbox: Outbox) -> None:
    """Send a refused record to the dead-letter topic, count and log it."""
    outbox.publish(DEAD_LETTER.name, letter)
    DEAD_LETTERED.labels(letter.consumer, letter.source_topic).inc()
    log.warning(
        "record dead-lettered",
        topic=letter.source_topic,
        partition=letter.source_partition,
        offset=letter.source_offset,
        reason=letter.reason,
    )


# --- running ---------------------------------------------------------------------------------------


def track_consumer_lag(app: faust.App, *, consumer: str, topics: Iterable[str], interval_s: float = 5.0) -> None:
    """Publish ``berth_consumer_lag_records`` for the app's assigned partitions of ``topics`` (names
    on the brokers): the partition's high watermark minus the next offset the app will read."""
    watched = frozenset(topics)

    @app.timer(interval=interval_s, name=f"{consumer}-consumer-lag")
    async def measure_lag() -> None:
        read = app.monitor.tp_read_offsets
        for tp in sorted(app.consumer.assignment()):
            if tp.topic not in watched:
                continue
            highwater = app.consumer.highwater(tp)
            last_read = read.get(tp)
            if highwater is None or last_read is None:
                continue  # nothing fetched from it yet in this process
            CONSUMER_LAG.labels(consumer, tp.topic, str(tp.partition)).set(max(0, highwater - last_read - 1))


def default_data_dir(service: str) -> Path:
    """Where a service's faust table store lives unless told: ``$XDG_STATE_HOME/berth/<service>``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "berth" / service


class StartupError(RuntimeError):
    """The service cannot start; the message says why and what to check."""


def internal_topics(app: faust.App) -> list[TopicSpec]:
    """The topics ``app`` owns: its tables' changelogs and the internal topics its agents read.

    They must exist before the worker starts. faust declares them itself, but on a brand-new
    broker its first rebalance can run before that, and its assignor then leaves out the
    missing topic's partitions for good: an agent on a re-keyed stream never gets any input.
    """
    specs = {}
    for table in app.tables.values():
        changelog = table.changelog_topic
        specs[changelog.get_topic_name()] = TopicSpec(changelog.get_topic_name(), table.partitions, compacted=True)
    for agent in app.agents.values():
        channel = agent.channel
        if getattr(channel, "internal", False) and channel.partitions:
            for name in channel.topics:
                specs.setdefault(name, TopicSpec(name, channel.partitions))
    return [specs[name] for name in sorted(specs)]


def serve(
    service: str,
    build: Callable[[dict[str, int], dict[str, Any]], faust.App],
    *,
    kafka: KafkaSettings,
    topics: Iterable[str],
    log_level: str,
    metrics_port: int | None,
    data_dir: Path | None,
    store: str,
) -> None:
    """Run a faust service: create Berth's topics, read the partition counts of ``topics``
    (contract names; ``counts`` is keyed by them) from the brokers, ``build(counts, app_options)``
    the app, and run it until SIGTERM/SIGINT. ``build`` names the app with :func:`faust_app`.

    Raises :class:`StartupError` when Kafka cannot be reached or a topic is missing.
    """
    directory = data_dir or default_data_dir(service)
    directory.mkdir(parents=True, exist_ok=True)

    contract_names = {kafka.names.topic(name): name for name in topics}

    async def read_counts() -> dict[str, int]:
        await ensure_topics(kafka)
        counts = await partition_counts(kafka, contract_names)
        return {contract_names[name]: count for name, count in counts.items()}

    # faust's worker runs on the thread's current loop; the set-up runs on the same one.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        counts = loop.run_until_complete(read_counts())
    except Exception as exc:  # aiokafka raises several connection and metadata errors
        loop.close()
        raise StartupError(f"cannot prepare Kafka topics at {kafka.bootstrap}: {exc}") from exc
    log.info("starting", kafka=kafka.bootstrap, partitions=counts, store=store, data_dir=str(directory))
    app = build(counts, {**faust_app_options(kafka), "store": store, "datadir": str(directory)})
    try:
        created = loop.run_until_complete(create_missing_topics(kafka, internal_topics(app)))
    except Exception as exc:
        loop.close()
        raise StartupError(f"cannot create {service}'s internal topics at {kafka.bootstrap}: {exc}") from exc
    if created:
        log.info("internal topics created", topics=created)
    run_worker(app, loop=loop, log_level=log_level, metrics_port=metrics_port)
    log.info("stopped")


class _ServiceWorker(faust.Worker):
    """faust's worker without its terminal spinner; once the tables are recovered and the agents
    consume, it logs ``ready`` and starts serving /metrics (which doubles as readiness probe)."""

    def __init__(self, app: faust.App, *, metrics_port: int | None, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.spinner = None  # it writes cursor escapes to stdout, which is for results
        self._metrics_port = metrics_port

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        serve_metrics(self._metrics_port)
        log.info("ready", app=self.app.conf.id, metrics_port=self._metrics_port)


def run_worker(app: faust.App, *, loop: asyncio.AbstractEventLoop, log_level: str, metrics_port: int | None) -> None:
    """Run ``app``'s agents until SIGTERM or SIGINT, then stop cleanly (commit, leave the group).

    /metrics answers from when the tables are recovered and the agents consume. Logging stays
    ours (``berth.logs``): faust's and aiokafka's stdlib loggers keep the level
    :func:`berth.logs.configure_logging` gave them. Returns when the worker has stopped.
    """
    worker = _ServiceWorker(
        app,
        metrics_port=metrics_port,
        loop=loop,
        loglevel=log_level.upper(),
        quiet=True,
        redirect_stdouts=False,
        override_logging=False,
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:  # mode's worker always ends with SystemExit; 0 is a clean stop
        if exc.code not in (None, 0):
            raise
