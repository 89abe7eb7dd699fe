"""Consuming contract events with at-least-once delivery and one dead-letter path.

A record that does not decode or validate is published to ``berth.deadletter.v1`` (with the
reason and its source topic/partition/offset) and skipped; the consumer goes on with the next
record. Offsets are committed only for records the caller has finished with (``commit``), so a
crash replays what was not yet handled instead of losing it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from berth.logs import get_logger
from berth.metrics import DEAD_LETTERED, RECORDS_CONSUMED
from berth.schemas import DeadLetter, Topic, topic_named
from berth.schemas.envelope import DecodedEvent
from berth.schemas.topics import DEAD_LETTER
from berth.settings import KafkaSettings

from .deadletter import decode_or_dead_letter
from .producer import EventProducer

log = get_logger(__name__)


@dataclass(frozen=True)
class ConsumedEvent:
    """A decoded event and where it was read from (its position is its identity for audit)."""

    decoded: DecodedEvent
    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    @property
    def event(self) -> Any:
        return self.decoded.event


class EventConsumer:
    """Reads contract events from ``topics`` as member of consumer group ``group_id``.

    ``topics`` and ``group_id`` are contract names: the consumer reads the installation's topics
    and joins its group (their names with ``kafka.topic_prefix`` and ``kafka.group_prefix``, see
    :class:`~berth.schemas.topics.KafkaNames`). :attr:`ConsumedEvent.topic` is the name on the
    brokers. ``name`` identifies the consumer in dead letters, logs and metrics. Iterate ``events()``;
    after handling, call ``commit()`` (or pass ``auto_commit=True`` for consumers whose handling
    is idempotent and loss-tolerant, e.g. dashboards).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: Iterable[Topic | str],
        *,
        group_id: str | None,
        name: str,
        auto_offset_reset: str = "earliest",
        auto_commit: bool = False,
        isolation_level: str = "read_committed",
        max_poll_records: int = 500,
        on_assign: Callable[[set[TopicPartition]], Awaitable[None]] | None = None,
        on_revoke: Callable[[set[TopicPartition]], Awaitable[None]] | None = None,
        **consumer_options: Any,
    ) -> None:
        names = kafka.names
        self._topics = {names.topic(t): t for t in (topic_named(x) if isinstance(x, str) else x for x in topics)}
        self._consumed: dict[str, Any] = {}
        self._name = name
        self._kafka = kafka
        self._listener = _Listener(on_assign, on_revoke) if (on_assign or on_revoke) else None
        self._options: dict[str, Any] = dict(
            kafka.client_options(),
            group_id=None if group_id is None else names.group(group_id),
            enable_auto_commit=auto_commit,
            auto_offset_reset=auto_offset_reset,
            isolation_level=isolation_level,
            max_poll_records=max_poll_records,
            **consumer_options,
        )
        self._consumer: AIOKafkaConsumer | None = None
        """Made at :meth:`start` (or first use of :attr:`raw`): a consumer that is never started
        holds no client that could be left unclosed."""
        self._dead_letters = EventProducer(kafka, source=f"berth/{name}")
        self.dead_lettered = 0

    @property
    def raw(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(**self._options)
        return self._consumer

    async def start(self) -> None:
        """Connect; when that fails (Kafka unreachable), both clients are closed before the error
        propagates, so no ``Unclosed AIOKafkaConsumer``/``AIOKafkaProducer`` is left behind."""
        try:
            await self._dead_letters.start()
            await self.raw.start()
            if self._listener is not None:
                self.raw.subscribe(list(self._topics), listener=self._listener)
            else:
                self.raw.subscribe(list(self._topics))
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()
            raise

    async def stop(self) -> None:
        """Leave the group and close both clients. Idempotent, and safe on a consumer that never
        started (a service stopped by a failure before it got that far)."""
        try:
            if self._consumer is not None:
                await self._consumer.stop()
        finally:
            await self._dead_letters.stop()

    async def __aenter__(self) -> EventConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def poll(self, *, timeout_s: float = 1.0, max_records: int | None = None) -> list[ConsumedEvent]:
        """One fetch: every valid event of it, in partition order (bad records dead-lettered).

        What a fetch returns is consumed as a whole: the consumer's position is already past
        it. Loops that batch work should take whole polls, never stop half-way through one.
        """
        fetched = await self.raw.getmany(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        accepted: list[ConsumedEvent] = []
        for partition in sorted(fetched, key=lambda tp: (tp.topic, tp.partition)):
            for record in fetched[partition]:
                outcome = await self.accept(record)
                if outcome is not None:
                    accepted.append(outcome)
        return accepted

    async def events(self, *, idle_timeout_s: float | None = None) -> AsyncIterator[ConsumedEvent]:
        """Yield valid events in partition order; dead-letter the rest.

        With ``idle_timeout_s`` the iteration ends after that long without any record (for
        tools and tests); without it, it runs until the consumer is stopped. Leaving the loop
        early skips the rest of the current fetch (the position is past it): fine for readers
        that stop for good, wrong for anything that batches and carries on — use :meth:`poll`.
        """
        while True:
            batches = await self.raw.getmany(timeout_ms=int((idle_timeout_s or 1.0) * 1000), max_records=None)
            if not batches:
                if idle_timeout_s is not None:
                    return
                continue
            for partition in sorted(batches, key=lambda tp: (tp.topic, tp.partition)):
                for record in batches[partition]:
                    outcome = await self.accept(record)
                    if outcome is not None:
                        yield outcome

    async def accept(self, record: Any) -> ConsumedEvent | None:
        """Decode one raw record; a bad one is dead-lettered (and None returned)."""
        topic = self._topics[record.topic]
        consumed = self._consumed.get(record.topic)
        if consumed is None:
            # One child per topic, looked up once: labels() takes a lock and builds its key on
            # every call (13 % of the audit's time when it was called per record).
            consumed = self._consumed[record.topic] = RECORDS_CONSUMED.labels(self._name, record.topic)
        consumed.inc()
        result = decode_or_dead_letter(
            topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            headers=list(record.headers or ()),
            consumer=self._name,
            topic_name=record.topic,
        )
        if isinstance(result, DeadLetter):
            await self._dead_letters.send_and_wait(result, topic=DEAD_LETTER.name)
            DEAD_LETTERED.labels(self._name, record.topic).inc()
            self.dead_lettered += 1
            log.warning(
                "record dead-lettered",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                reason=result.reason,
            )
            return None
        return ConsumedEvent(result, record.topic, record.partition, record.offset, record.timestamp)

    async def commit(self, upto: dict[tuple[str, int], int] | None = None) -> None:
        """Commit consumed positions (all consumed so far, or ``{(topic, partition): next_offset}``)."""
        if upto is None:
            await self.raw.commit()
        else:
            await self.raw.commit({TopicPartition(t, p): o for (t, p), o in upto.items()})


async def read_matching(
    kafka: KafkaSettings,
    topic: Topic | str,
    match: Callable[[Any], bool],
    count: int,
    *,
    timeout_s: float = 60.0,
    name: str = "reader",
) -> list[ConsumedEvent]:
    """The first ``count`` events of ``topic`` (from the beginning, every partition) for which
    ``match(event)`` holds; raises TimeoutError naming how many were found when time runs out."""

    found: list[ConsumedEvent] = []
    try:
        async with asyncio.timeout(timeout_s):
            # The topic may not exist yet (its producer creates it): refresh metadata every
            # second rather than every five minutes, so that it is found once it does.
            async with EventConsumer(kafka, [topic], group_id=None, name=name, metadata_max_age_ms=1000) as consumer:
                async for item in consumer.events():
                    if match(item.event):
                        found.append(item)
                        if len(found) == count:
                            return found
    except TimeoutError:
        pass
    label = kafka.names.topic(topic)
    raise TimeoutError(f"{label}: {len(found)} of {count} matching records within {timeout_s:.0f} s")


class _Listener(ConsumerRebalanceListener):
    """Lets services rebuild or flush per-partition state when partitions move between members.
    aiokafka awaits these callbacks before fetching from newly assigned partitions."""

    def __init__(self, on_assign: Any, on_revoke: Any) -> None:
        self._on_assign, self._on_revoke = on_assign, on_revoke

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if self._on_assign is not None:
            await self._on_assign(set(assigned))

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if self._on_revoke is not None:
            await self._on_revoke(set(revoked))
