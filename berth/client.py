"""A small client for producers who do not know Kafka: gateways, model servers, cloud hooks.

    from berth.client import BerthClient
    async with BerthClient("127.0.0.1:9092", source="gateway/eu-1") as berth:
        await berth.queue_lag(pool="llama-70b", tokens_in_queue=120_000, token_rate=4_000)
        await berth.spot_notice(node="gpu-17", notice_seconds=120)

Every method validates its input with the contract models, so bad values fail here with a
message naming the field, before anything reaches Kafka. ``publish_sync`` does one event from
synchronous code.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from berth.bus.producer import EventProducer
from berth.schemas import GpuDeviceSample, GpuTelemetry, QueueLagObserved, SpotInterruptionNotice
from berth.settings import KafkaSettings


class BerthClient:
    """Publishes validated events to Berth. ``kafka`` is a bootstrap string or full settings."""

    def __init__(self, kafka: str | KafkaSettings, *, source: str = "berth-client") -> None:
        settings = KafkaSettings(bootstrap=kafka) if isinstance(kafka, str) else kafka
        self._producer = EventProducer(settings, source=source)

    async def __aenter__(self) -> BerthClient:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def publish(self, event: Any) -> None:
        """Publish any contract event and wait until the broker has it."""
        await self._producer.send_and_wait(event)

    async def queue_lag(
        self,
        *,
        pool: str,
        tokens_in_queue: int,
        token_rate: float,
        namespace: str = "default",
        active_sessions: int = 0,
        mean_context_tokens: int | None = None,
        observed_ttft_ms: float | None = None,
        ready_replicas: int | None = None,
        observed_at: datetime | None = None,
    ) -> QueueLagObserved:
        event = QueueLagObserved(
            pool=pool,
            namespace=namespace,
            tokens_in_queue=tokens_in_queue,
            token_rate=token_rate,
            active_sessions=active_sessions,
            mean_context_tokens=mean_context_tokens,
            observed_ttft_ms=observed_ttft_ms,
            ready_replicas=ready_replicas,
            observed_at=observed_at or datetime.now(UTC),
        )
        await self.publish(event)
        return event

    async def spot_notice(
        self,
        *,
        node: str,
        notice_seconds: float,
        provider: str = "other",
        issued_at: datetime | None = None,
    ) -> SpotInterruptionNotice:
        issued = issued_at or datetime.now(UTC)
        event = SpotInterruptionNotice(
            node=node,
            issued_at=issued,
            deadline=issued + timedelta(seconds=notice_seconds),
            provider=provider,
        )
        await self.publish(event)
        return event

    async def gpu_telemetry(
        self, *, node: str, devices: list[dict[str, Any]], sampled_at: datetime | None = None
    ) -> GpuTelemetry:
        event = GpuTelemetry(
            node=node,
            devices=tuple(GpuDeviceSample.model_validate(device) for device in devices),
            sampled_at=sampled_at or datetime.now(UTC),
        )
        await self.publish(event)
        return event


def publish_sync(kafka: str | KafkaSettings, event: Any, *, source: str = "berth-client") -> None:
    """Publish one event from synchronous code (opens and closes a producer)."""

    async def _run() -> None:
        async with BerthClient(kafka, source=source) as client:
            await client.publish(event)

    asyncio.run(_run())
