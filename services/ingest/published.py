"""What ingest has told downstream so far, read back from Kafka when a leadership term starts.

A new leader (a restart, or a standby taking over) cannot know from the apiserver what was
deleted while no ingest was publishing: the objects are simply gone from its list. Kafka knows
what was published. Folding ingest's own events (CloudEvents ``source``) of the cluster topics
from the beginning gives, per object, the last observation downstream has; the first relist is
then diffed against it and publishes exactly what changed — deletions included — and nothing
twice.

Cost: one read of the three topics up to their current end (their retention bounds it); records
of other producers on the same topics (the cluster simulator, say) are skipped, not folded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from berth.schemas import Topic
from berth.schemas.envelope import EnvelopeError, decode

from berth.logs import get_logger
from berth.settings import KafkaSettings

from .translate import Observation, fold_published

log = get_logger(__name__)


async def read_published(
    kafka: KafkaSettings, topics: Mapping[str, Topic], *, source: str, fetch_timeout_s: float = 1.0
) -> list[Observation]:
    """The observations still standing (not removed since) that ``source`` published on
    ``topics`` (contract role → topic, e.g. ``{"pods": PODS}``), read up to each partition's
    end as of the call. Undecodable records are skipped: the consumers dead-letter them."""
    by_name = {kafka.names.topic(topic): topic for topic in topics.values()}
    partitions = await _partitions(kafka, sorted(by_name))
    if not partitions:
        return []
    consumer = AIOKafkaConsumer(
        **kafka.client_options(), group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    known: dict[str, dict[str, Observation]] = {}
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        remaining = {tp for tp in partitions if ends[tp] > 0}
        read = 0
        while remaining:
            batches = await consumer.getmany(*remaining, timeout_ms=int(fetch_timeout_s * 1000))
            for tp, records in batches.items():
                topic_known = known.setdefault(tp.topic, {})
                for record in records:
                    if record.offset >= ends[tp]:
                        break
                    read += 1
                    _fold_record(topic_known, by_name[tp.topic], record, source)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        log.info("read back published state", records=read, objects=sum(len(entries) for entries in known.values()))
    finally:
        await consumer.stop()
    return [event for entries in known.values() for event in entries.values()]


async def _partitions(kafka: KafkaSettings, names: list[str]) -> list[TopicPartition]:
    """Every partition of the ``names`` that exist (the admin client asks the broker; a fresh
    consumer's own metadata may not know a topic yet)."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        described = await admin.describe_topics(names)
    finally:
        await admin.close()
    return [
        TopicPartition(entry["topic"], part["partition"])
        for entry in sorted(described, key=lambda e: e["topic"])
        if entry.get("error_code", 0) == 0
        for part in sorted(entry.get("partitions") or (), key=lambda p: p["partition"])
    ]


def _fold_record(known: dict[str, Observation], topic: Topic, record: Any, source: str) -> None:
    try:
        decoded = decode(topic, record.key, record.value, list(record.headers or ()))
    except EnvelopeError:
        return
    if decoded.source == source:
        fold_published(known, decoded.event)
