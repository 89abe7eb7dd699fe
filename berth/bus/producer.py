"""Publishing contract events to Kafka (CloudEvents binary mode, idempotent producer)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any

from aiokafka import AIOKafkaProducer

from berth.metrics import EVENTS_PUBLISHED, labelled
from berth.schemas import KafkaNames, topic_for_event
from berth.schemas.envelope import encode
from berth.settings import KafkaSettings


class EventProducer:
    """An idempotent producer of contract events.

    ``send`` routes each event to its topic (see :mod:`berth.schemas.topics`) with its partition
    key, so callers never name topics or keys by hand. Use as ``async with EventProducer(...)``.
    Topic names and ``transactional_id`` are contract names; the producer writes to the
    installation's topics and uses its transactional id (``kafka.names``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        source: str,
        linger_ms: int = 5,
        transactional_id: str | None = None,
    ) -> None:
        self._source = source
        self._names = kafka.names
        self._options: dict[str, Any] = dict(
            kafka.client_options(),
            enable_idempotence=True,
            acks="all",
            linger_ms=linger_ms,
            compression_type=None,
            transactional_id=None if transactional_id is None else self._names.group(transactional_id),
        )
        self._producer: AIOKafkaProducer | None = None
        """Made at :meth:`start` (or first use of :attr:`raw`): a producer that is never started
        holds no client that could be left unclosed."""

    @property
    def names(self) -> KafkaNames:
        """The installation's names on the brokers, for records sent through :attr:`raw`."""
        return self._names

    @property
    def raw(self) -> AIOKafkaProducer:
        """The underlying aiokafka producer (for transactions and offset commits)."""
        if self._producer is None:
            self._producer = AIOKafkaProducer(**self._options)
        return self._producer

    async def start(self) -> None:
        """Connect; when that fails (Kafka unreachable), the client is closed before the error
        propagates, so no ``Unclosed AIOKafkaProducer`` is left behind."""
        try:
            await self.raw.start()
        except BaseException:
            await _quietly(self.raw.stop())
            raise

    async def stop(self) -> None:
        """Flush and close. Idempotent, and safe on a producer that never started."""
        if self._producer is not None:
            await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(self, event: Any, *, event_id: str | None = None, topic: str | None = None) -> Any:
        """Queue one event (to ``topic``, a contract name, or the event's own topic); returns a
        future resolved when the broker has it."""
        target = self._names.topic(topic or topic_for_event(event))
        record = encode(event, source=self._source, event_id=event_id)
        future = await self.raw.send(target, value=record.value, key=record.key, headers=record.headers)
        labelled(EVENTS_PUBLISHED, target, event.type).inc()
        return future

    async def send_and_wait(self, event: Any, *, event_id: str | None = None, topic: str | None = None) -> Any:
        future = await self.send(event, event_id=event_id, topic=topic)
        return await future

    async def send_all(self, events: Iterable[Any]) -> int:
        """Send many events and wait until the broker has all of them; returns the count."""
        futures = [await self.send(event) for event in events]
        for future in futures:
            await future
        return len(futures)


async def _quietly(closing: Awaitable[Any]) -> None:
    """Close a client after a failure, without hiding that failure behind one of closing's."""
    with contextlib.suppress(Exception):
        await closing
