"""The audit service's loop: Kafka → Postgres, exactly once in effect.

Positions live in Postgres (written with the rows), so on start the consumer seeks to them; Kafka
offsets are committed too, but only as a hint for lag dashboards.
"""

from __future__ import annotations

import asyncio
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from berth.bus import EventConsumer, ensure_topics
from berth.lifecycle import stop_on_signals
from berth.logs import get_logger
from berth.settings import BerthSettings
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS, RESULTS

from .db import make_engine, upgrade
from .store import CONSUMER, AuditRecord, AuditStore

log = get_logger(__name__)
AUDITED_TOPICS = (DECISION_INPUTS, DECISIONS, COMMANDS, RESULTS)


async def run_audit(settings: BerthSettings, *, stop: asyncio.Event | None = None,
                    migrate: bool = True) -> None:
    """Consume the audited topics into Postgres until ``stop`` is set (or SIGTERM/SIGINT)."""
    stop = stop or stop_on_signals()
    if migrate:
        await asyncio.to_thread(upgrade, settings.database)
    await ensure_topics(settings.kafka)
    engine = make_engine(settings.database)
    store = AuditStore(engine)
    consumer: EventConsumer

    async def seek_to_stored_positions(assigned: set[TopicPartition]) -> None:
        # Synchronous seeks only: awaiting the fetcher (seek_to_beginning) inside the rebalance
        # callback stalls the join until the member is expired. Offset 0 of a partition whose
        # head was deleted by retention resets to the earliest offset (auto_offset_reset).
        positions = await asyncio.to_thread(store.positions)
        for tp in assigned:
            consumer.raw.seek(tp, positions.get((tp.topic, tp.partition), 0))

    consumer = EventConsumer(settings.kafka, AUDITED_TOPICS, group_id=CONSUMER, name="audit",
                             on_assign=seek_to_stored_positions)
    await consumer.start()
    try:
        while not stop.is_set():
            # Whole fetches only: stopping half-way through one skipped the rest of it, because
            # the consumer's position was already past them (one lost input broke replay).
            polled = await consumer.poll(timeout_s=0.2, max_records=2000)
            if not polled:
                continue
            batch = [AuditRecord(item.topic, item.partition, item.offset, item.event) for item in polled]
            report = await asyncio.to_thread(store.write_batch, batch)
            log.info("audit batch written", inputs=report.inputs, decisions=report.decisions,
                     commands=report.commands, results=report.results,
                     determinism_errors=len(report.determinism_errors))
            for decision_id in report.determinism_errors:
                log.error("determinism error: same input, different decision", decision_id=decision_id)
            try:
                await consumer.commit()
            except KafkaError as exc:
                # Kafka's offsets are only a hint here (positions live in Postgres, written with
                # the rows); a rebalance that wins the race costs nothing.
                log.info("offset hint not committed", error=repr(exc))
    finally:
        await consumer.stop()
        engine.dispose()
