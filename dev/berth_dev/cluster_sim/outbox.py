"""Publishing the simulator's events in exactly the order its state changed.

A change and its events are decided synchronously (one event loop, no await in between), then
handed to :meth:`emit`, which queues them at once and returns a future that resolves when the
broker has them. One task sends the queue in order, so two changes of one pod reach Kafka in the
order they happened even when their requests overlap. The API answers after the future resolves,
as kube-apiserver answers after etcd has the write; the player does not wait for each one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from berth.bus import EventProducer
from berth.logs import get_logger

log = get_logger(__name__)


class EventSink(Protocol):
    def emit(self, events: Sequence[Any]) -> asyncio.Future[None]:
        """Queue ``events`` (in order, after everything emitted before); the future resolves once
        they are published."""
        ...


class RecordingSink:
    """Keeps events in a list (for tests)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def emit(self, events: Sequence[Any]) -> asyncio.Future[None]:
        self.events.extend(events)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def of_type(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


class KafkaOutbox:
    """:class:`EventSink` on an :class:`EventProducer`. Run :meth:`run` as a task."""

    def __init__(self, producer: EventProducer) -> None:
        self._producer = producer
        self._queue: deque[tuple[Sequence[Any], asyncio.Future[None]]] = deque()
        self._wakeup = asyncio.Event()
        self._unacked: set[asyncio.Task[None]] = set()
        self.published = 0

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def emit(self, events: Sequence[Any]) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not events:
            done.set_result(None)
            return done
        self._queue.append((events, done))
        self._wakeup.set()
        return done

    async def run(self) -> None:
        """Send queued events in order until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                events, done = self._queue.popleft()
                try:
                    acks = [await self._producer.send(event) for event in events]
                except Exception as exc:
                    log.error("publishing failed", error=str(exc))
                    if not done.done():
                        done.set_exception(exc)
                    continue
                task = asyncio.ensure_future(self._settle(acks, done, len(events)))
                self._unacked.add(task)
                task.add_done_callback(self._unacked.discard)

    async def _settle(self, acks: list[Any], done: asyncio.Future[None], count: int) -> None:
        try:
            await asyncio.gather(*acks)
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
            return
        self.published += count
        if not done.done():
            done.set_result(None)

    async def drain(self) -> None:
        """Wait until everything emitted so far is published."""
        while self._queue or self._unacked:
            if self._unacked:
                await asyncio.gather(*list(self._unacked), return_exceptions=True)
            else:
                await asyncio.sleep(0.01)
