"""Publishing contract events to Kafka (CloudEvents binary mode, idempotent producer)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaProducer

from berth.metrics import EVENTS_PUBLISHED
from berth.schemas import topic_for_event
from berth.schemas.envelope import encode
from berth.settings import KafkaSettings


class EventProducer:
    """An idempotent producer of contract events.

    ``send`` routes each event to its topic (see :mod:`berth.schemas.topics`) with its partition
    key, so callers never name topics or keys by hand. Use as ``async with EventProducer(...)``.
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
        options = kafka.client_options()
        self._producer = AIOKafkaProducer(
            **options,
            enable_idempotence=True,
            acks="all",
            linger_ms=linger_ms,
            compression_type=None,
            transactional_id=transactional_id,
        )

    @property
    def raw(self) -> AIOKafkaProducer:
        """The underlying aiokafka producer (for transactions and offset commits)."""
        return self._producer

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(self, event: Any, *, event_id: str | None = None, topic: str | None = None) -> Any:
        """Queue one event; returns a future resolved when the broker has it."""
        target = topic or topic_for_event(event).name
        record = encode(event, source=self._source, event_id=event_id)
        future = await self._producer.send(target, value=record.value, key=record.key, headers=record.headers)
        EVENTS_PUBLISHED.labels(target, event.type).inc()
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
