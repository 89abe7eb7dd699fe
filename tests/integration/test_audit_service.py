"""The audit service on real Kafka and Postgres: every accepted record lands, none twice."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from berth.schemas import PodDeleted
from berth.schemas.envelope import encode
from berth.schemas.samples import T0
from berth.schemas.topics import DECISION_INPUTS
from berth.services.audit import db
from berth.services.audit.models import InputRow
from berth.services.audit.service import run_audit
from sqlalchemy import func, select

from berth.bus import EventProducer, ensure_topics
from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings

pytestmark = pytest.mark.integration


async def test_more_records_than_one_batch_are_all_stored_without_gaps(kafka_bootstrap, database_url):
    # Regression: the loop stopped half-way through a fetch at 2,000 records and skipped the
    # rest of it; one missing input made replay diverge.
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    settings = BerthSettings(kafka=kafka, database=DatabaseSettings(url=database_url))
    await ensure_topics(kafka, [DECISION_INPUTS])
    tag = uuid.uuid4().hex[:8]
    partition = 0
    stop = asyncio.Event()
    task = asyncio.create_task(run_audit(settings, stop=stop))
    offsets = []
    # Uneven bursts while the audit consumes: fetches of irregular sizes, as in a live run (a
    # backlog fetched in whole 500-record fetches would hide a loop that stops mid-fetch).
    async with EventProducer(kafka, source="tests/audit", linger_ms=5) as producer:
        for burst in (700, 1300, 333, 1900, 267):
            futures = []
            for i in range(burst):
                event = PodDeleted(uid=f"{tag}-{len(offsets)}-{i}", namespace="t", name=f"p{i}", observed_at=T0)
                record = encode(event, source="t")
                futures.append(
                    await producer.raw.send(
                        DECISION_INPUTS.name, record.value, key=record.key, headers=record.headers, partition=partition
                    )
                )
            offsets.extend([(await f).offset for f in futures])
            await asyncio.sleep(0.3)
    first, last = offsets[0], offsets[-1]
    engine = db.make_engine(settings.database)
    try:
        for _ in range(240):
            await asyncio.sleep(0.5)
            with engine.connect() as connection:
                stored = connection.scalar(
                    select(func.count())
                    .select_from(InputRow)
                    .where(InputRow.partition == partition, InputRow.offset >= first, InputRow.offset <= last)
                )
            if stored == last - first + 1 or task.done():
                break
        assert stored == last - first + 1, f"{last - first + 1 - stored} of the records were not stored"
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        engine.dispose()
