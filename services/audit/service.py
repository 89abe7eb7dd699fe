"""The audit service's loop: Kafka → Postgres, exactly once in effect.

Positions live in Postgres (written with the rows), so on start the consumer seeks to them; Kafka
offsets are committed too, but only as a hint for lag dashboards.
"""

from __future__ import annotations

import asyncio
from aiokafka import TopicPartition

from berth.audit.db import make_engine, upgrade
from berth.bus import EventConsumer, ensure_topics
from berth.lifecycle import stop_on_signals
from berth.logs import get_logger
from berth.settings import BerthSettings
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS, RESULTS

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
        positions = await asyncio.to_thread(store.positions)
        for tp in assigned:
            stored = positions.get((tp.topic, tp.partition))
            if stored is not None:
                consumer.raw.seek(tp, stored)
            else:
                await consumer.raw.seek_to_beginning(tp)

    consumer = EventConsumer(settings.kafka, AUDITED_TOPICS, group_id=CONSUMER, name="audit",
                             on_assign=seek_to_stored_positions)
    await consumer.start()
    try:
        while not stop.is_set():
            batch: list[AuditRecord] = []
            async for item in consumer.events(idle_timeout_s=0.2):
                batch.append(AuditRecord(item.topic, item.partition, item.offset, item.event))
                if len(batch) >= 2000:
                    break
            if not batch:
                continue
            report = await asyncio.to_thread(store.write_batch, batch)
            log.info("audit batch written", inputs=report.inputs, decisions=report.decisions,
                     commands=report.commands, results=report.results,
                     determinism_errors=len(report.determinism_errors))
            for decision_id in report.determinism_errors:
                log.error("determinism error: same input, different decision", decision_id=decision_id)
            await consumer.commit()
    finally:
        await consumer.stop()
        engine.dispose()
