"""Reading the scheduler's verdicts, so the simulator can tell when every pod has been decided.

A cluster shows bindings but not "this pod cannot be placed" (kube-scheduler reports that as an
event and a pod condition; Berth as a decision record). The watcher reads
``berth.scheduler.decisions.v1`` from its end at start-up (earlier runs' decisions are not ours)
and marks the named pending pods: ``unschedulable`` and ``held`` (a gang waiting for members)
mark them, ``placed`` and ``preempting`` clear the mark. The subject of a decision is
``namespace/pod`` or, for a gang, ``namespace/pod-group``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from berth.schemas import DecisionRecord
from berth.schemas.envelope import EnvelopeError, decode
from berth.schemas.topics import DECISIONS

from berth.logs import get_logger
from berth.settings import KafkaSettings

from .state import ClusterState

log = get_logger(__name__)
UNDECIDABLE_NOW = ("unschedulable", "held")


class DecisionWatcher:
    def __init__(self, kafka: KafkaSettings, state: ClusterState) -> None:
        self.state = state
        self.seen = 0
        self._kafka = kafka
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self, partitions: Iterable[int]) -> None:
        """Position at the end of the topic's ``partitions``; returns once the positions are
        fixed, so that no decision about a pod published after this is missed."""
        # Made here, not in __init__: a watcher that never starts (the broker unreachable
        # earlier) must leave no client behind to be reported unclosed.
        consumer = AIOKafkaConsumer(
            **self._kafka.client_options(), group_id=None, enable_auto_commit=False, isolation_level="read_committed"
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        assigned = [TopicPartition(self._kafka.names.topic(DECISIONS), p) for p in sorted(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_end(*assigned)
        for tp in assigned:
            await consumer.position(tp)

    async def run(self) -> None:
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("DecisionWatcher.run() before start()")
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=5000)
                for records in batches.values():
                    for record in records:
                        self._handle(record)
        except asyncio.CancelledError:
            raise
        finally:
            await consumer.stop()

    def _handle(self, record: object) -> None:
        try:
            event = decode(DECISIONS, record.key, record.value, record.headers).event  # type: ignore[attr-defined]  # decisions of the DECISIONS topic
        except EnvelopeError:
            return  # the audit service dead-letters it; we only count verdicts
        if not isinstance(event, DecisionRecord):
            return
        self.seen += 1
        if event.outcome in UNDECIDABLE_NOW:
            self.state.mark_decided(event.subject, unschedulable=True, reason=event.message or event.outcome)
        elif event.outcome in ("placed", "preempting"):
            self.state.mark_decided(event.subject, unschedulable=False)
