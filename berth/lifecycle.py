"""Process lifecycle shared by the services: stop cleanly on SIGTERM or Ctrl-C, and leave no
Kafka client open however the service ends."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import Any

from berth.bus import EventConsumer, EventProducer


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT; services finish their batch and exit when it is set."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def kafka_clients(owner: Any) -> list[EventConsumer | EventProducer]:
    """The :class:`EventConsumer` and :class:`EventProducer` objects ``owner`` holds as attributes."""
    return [value for value in vars(owner).values() if isinstance(value, (EventConsumer, EventProducer))]


async def close_kafka_clients(*owners: Any) -> None:
    """Stop every Kafka client the ``owners`` hold (stopping is idempotent; errors are not
    raised: this runs after the service's own shutdown or failure, which is what matters)."""
    for owner in owners:
        for client in kafka_clients(owner):
            with contextlib.suppress(Exception):
                await client.stop()


@contextlib.asynccontextmanager
async def closing_kafka_clients(*owners: Any) -> AsyncIterator[None]:
    """``async with closing_kafka_clients(service): await service.run(stop)``: the clients a
    service made in its constructor are closed even when it fails before starting them (Kafka
    unreachable), so no ``Unclosed AIOKafka...`` warning follows the error."""
    try:
        yield
    finally:
        await close_kafka_clients(*owners)
