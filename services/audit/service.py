"""The audit service's loop: Kafka → Postgres, exactly once in effect.

Positions live in Postgres (written with the rows), so on start the consumer seeks to them; Kafka
offsets are committed too, but only as a hint for lag dashboards (at most once a second, after
the rows, so never ahead of them). Records are gathered for a short window (:data:`COLLECT_S`)
before each write, so a low rate pays one transaction per window rather than one per record.

Postgres may go away (a restart, a fail-over, a network cut). Decisions do not wait for it: Kafka
is the log, and the audit only follows. While the database is unreachable the service keeps the
batch it holds, logs one warning (``audit database unreachable``), sets
``berth_audit_database_up`` to 0, and retries the same batch with exponential backoff and jitter
(``berth_audit_write_retries_total`` counts the retries), reading nothing further from Kafka. When
a write succeeds again it logs ``audit database back`` (how long it was away, how many retries)
and catches up from where it was. Because the rows and the positions are written in one
transaction, a write cut by the outage either happened whole or not at all, and the retry writes
each decision exactly once. Errors that are not about reaching the database are not retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import sqlalchemy.exc
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS, RESULTS
from prometheus_client import Counter, Gauge
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential, wait_random

from berth.bus import EventConsumer, ensure_topics
from berth.lifecycle import stop_on_signals
from berth.logs import get_logger
from berth.settings import BerthSettings

from .db import make_engine, upgrade
from .store import CONSUMER, AuditRecord, AuditStore, WriteReport

log = get_logger(__name__)
AUDITED_TOPICS = (DECISION_INPUTS, DECISIONS, COMMANDS, RESULTS)

DATABASE_UP = Gauge(
    "berth_audit_database_up",
    "1 while the audit store's writes succeed, 0 while Postgres is unreachable and the held batch "
    "is retried (decisions keep flowing on Kafka meanwhile).",
)
WRITE_RETRIES = Counter(
    "berth_audit_write_retries_total",
    "Audit batch writes retried because Postgres was unreachable (each batch is written once).",
)
COLLECT_S = 0.05
"""How long the records of one write are gathered after the first arrives: a decision reaches
Postgres within this plus one write, and at low rates several records share the write."""
MAX_BATCH_RECORDS = 2000
"""Records per write at most (a catching-up audit writes batches of this size)."""
OFFSET_HINT_INTERVAL_S = 1.0
"""Kafka offsets are committed at most this often (and on stop): they are a hint for lag dashboards
and a safe place to start if Postgres is down at assignment, never ahead of the stored rows."""
MAX_BACKOFF_S = 10.0
"""Longest wait between two attempts while Postgres is away (the first waits ~0.5 s)."""


def database_unreachable(exc: BaseException) -> bool:
    """True for errors that say Postgres cannot be reached now (refused, cut, shutting down), as
    opposed to errors in what was written, which retrying would not cure."""
    if isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
        return True
    return isinstance(exc, sqlalchemy.exc.DBAPIError) and bool(exc.connection_invalidated)


class DatabaseOutage:
    """Keeps the log to one line when Postgres goes away and one when it is back, and the
    ``berth_audit_database_up`` gauge in step."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.retries = 0
        DATABASE_UP.set(1)

    def failed(self, exc: BaseException, retry_in_s: float) -> None:
        WRITE_RETRIES.inc()
        self.retries += 1
        if self.since is None:
            self.since = time.monotonic()
            DATABASE_UP.set(0)
            log.warning(
                "audit database unreachable; decisions keep flowing on Kafka, the held batch is "
                "retried with backoff until Postgres answers",
                error=_short(exc),
                retry_in_s=round(retry_in_s, 2),
            )
        else:
            log.debug(
                "audit database still unreachable",
                error=_short(exc),
                attempt=self.retries,
                retry_in_s=round(retry_in_s, 2),
            )

    def succeeded(self) -> None:
        if self.since is not None:
            log.warning(
                "audit database back; catching up", down_s=round(time.monotonic() - self.since, 1), retries=self.retries
            )
            self.since = None
            self.retries = 0
            DATABASE_UP.set(1)


def _short(exc: BaseException) -> str:
    """The first line of a database error (SQLAlchemy appends the statement and a link)."""
    original = getattr(exc, "orig", None) or exc
    return f"{type(original).__name__}: {str(original).strip().splitlines()[0] if str(original).strip() else ''}"[:300]


async def write_with_backoff(
    store: AuditStore, batch: Sequence[AuditRecord], outage: DatabaseOutage, stop: asyncio.Event
) -> WriteReport | None:
    """Write ``batch``, retrying while Postgres is unreachable (see the module docstring).
    Returns None if ``stop`` is set while waiting: the batch is then unwritten, and re-read from
    the stored positions on the next start."""

    async def sleep(seconds: float) -> None:
        # Wake up early on shutdown; Kafka heartbeats go on in the consumer's own task.
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except TimeoutError:
            pass

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        outage.failed(exc or RuntimeError("unknown"), state.upcoming_sleep)

    retrying = AsyncRetrying(
        retry=retry_if_exception(database_unreachable),
        wait=wait_exponential(multiplier=0.5, max=MAX_BACKOFF_S) + wait_random(0, 0.5),
        stop=lambda state: stop.is_set(),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                report = await asyncio.to_thread(store.write_batch, batch)
    except Exception as exc:
        if stop.is_set() and database_unreachable(exc):
            log.warning(
                "stopping with an unwritten batch; it is read again on the next start",
                records=len(batch),
                error=_short(exc),
            )
            return None
        raise
    outage.succeeded()
    return report


async def collect_batch(consumer: EventConsumer, stop: asyncio.Event) -> list[AuditRecord]:
    """The records of one write: whole polls, gathered for up to :data:`COLLECT_S` after the first
    record arrives or until :data:`MAX_BATCH_RECORDS` are in, so that a trickle of records costs
    one transaction per window rather than one per record. Empty if nothing came within 0.2 s."""
    batch: list[AuditRecord] = []
    polled = await consumer.poll(timeout_s=0.2, max_records=MAX_BATCH_RECORDS)
    deadline = time.monotonic() + COLLECT_S
    while polled:
        batch.extend(AuditRecord(item.topic, item.partition, item.offset, item.event) for item in polled)
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0 or len(batch) >= MAX_BATCH_RECORDS or stop.is_set():
            break
        polled = await consumer.poll(timeout_s=remaining_s, max_records=MAX_BATCH_RECORDS - len(batch))
    return batch


async def commit_offset_hint(consumer: EventConsumer) -> None:
    try:
        await consumer.commit()
    except KafkaError as exc:
        # Kafka's offsets are only a hint here (positions live in Postgres, written with the
        # rows); a rebalance that wins the race costs nothing.
        log.info("offset hint not committed", error=repr(exc))


async def run_audit(settings: BerthSettings, *, stop: asyncio.Event | None = None, migrate: bool = True) -> None:
    """Consume the audited topics into Postgres until ``stop`` is set (or SIGTERM/SIGINT)."""
    stop = stop or stop_on_signals()
    if migrate:
        await asyncio.to_thread(upgrade, settings.database)
    await ensure_topics(settings.kafka)
    engine = make_engine(settings.database)
    store = AuditStore(engine, names=settings.kafka.names)
    consumer: EventConsumer

    async def seek_to_stored_positions(assigned: set[TopicPartition]) -> None:
        # Synchronous seeks only: awaiting the fetcher (seek_to_beginning) inside the rebalance
        # callback stalls the join until the member is expired. Offset 0 of a partition whose
        # head was deleted by retention resets to the earliest offset (auto_offset_reset).
        try:
            positions = await asyncio.to_thread(store.positions)
        except Exception as exc:
            if not database_unreachable(exc):
                raise
            # Kafka's committed offsets are never ahead of the stored positions (committed after
            # the rows), and writes skip rows they already hold: starting there is safe.
            log.warning(
                "audit database unreachable while partitions were assigned; resuming from Kafka's committed offsets",
                error=_short(exc),
            )
            return
        for tp in assigned:
            consumer.raw.seek(tp, positions.get((tp.topic, tp.partition), 0))

    consumer = EventConsumer(
        settings.kafka, AUDITED_TOPICS, group_id=CONSUMER, name="audit", on_assign=seek_to_stored_positions
    )
    await consumer.start()
    outage = DatabaseOutage()
    hint_committed_at, hint_pending = 0.0, False
    try:
        while not stop.is_set():
            # Whole fetches only: stopping half-way through one skipped the rest of it, because
            # the consumer's position was already past them (one lost input broke replay).
            batch = await collect_batch(consumer, stop)
            if not batch:
                continue
            written = await write_with_backoff(store, batch, outage, stop)
            if written is None:
                # The consumer is past records that are not stored: no hint may say otherwise.
                hint_pending = False
                break
            report = written
            log.info(
                "audit batch written",
                inputs=report.inputs,
                decisions=report.decisions,
                commands=report.commands,
                results=report.results,
                determinism_errors=len(report.determinism_errors),
            )
            for decision_id in report.determinism_errors:
                log.error("determinism error: same input, different decision", decision_id=decision_id)
            hint_pending = True
            if time.monotonic() - hint_committed_at >= OFFSET_HINT_INTERVAL_S:
                hint_committed_at, hint_pending = time.monotonic(), False
                await commit_offset_hint(consumer)
        if hint_pending:
            await commit_offset_hint(consumer)
    finally:
        await consumer.stop()
        engine.dispose()
