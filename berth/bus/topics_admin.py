"""Creating Berth's topics with their partition counts, retention policies and replication.

Replication is the one the cluster allows: ``KafkaSettings.replication_factor``, capped at the
number of brokers the cluster has (a single dev broker gets 1 however the setting reads). Topics
replicated three times or more get ``min.insync.replicas=2``, so that an ``acks=all`` write (every
Berth producer's) is on two brokers before it is acknowledged and survives the loss of one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from berth.logs import get_logger
from berth.schemas import ALL_TOPICS, Topic
from berth.settings import KafkaSettings

log = get_logger(__name__)


COMPACTION = {"cleanup.policy": "compact", "segment.ms": str(10 * 60 * 1000), "min.cleanable.dirty.ratio": "0.2"}
"""Compacted topics (tables' changelogs, the inventory state, cell snapshots) roll a segment every
ten minutes so that compaction, which never touches the active segment, keeps up: what a
restarting reader (a faust table recovering its changelog, a cell looking for its snapshot)
reads stays about one record per key plus ten minutes of updates, whatever the history (Kafka's
default, a week or 1 GiB per segment, would let it grow with history)."""


async def ensure_topics(kafka: KafkaSettings, topics: Iterable[Topic] = ALL_TOPICS) -> list[str]:
    """Create any of ``topics`` that do not exist (with the installation's names, see
    :class:`~berth.schemas.topics.KafkaNames`); returns the names created. Idempotent."""
    return await create_missing_topics(
        kafka, [TopicSpec(kafka.names.topic(topic), topic.partitions, compacted=topic.compacted) for topic in topics]
    )


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create, by its name on the brokers (``KafkaSettings.names.topic(...)``): for
    topics outside the contract, e.g. a stream processor's own."""

    name: str
    partitions: int
    compacted: bool = False


def replication_for(configured: int, brokers: int) -> tuple[int, int]:
    """(replication factor, ``min.insync.replicas``) of a new topic: ``configured`` capped at the
    number of ``brokers``; 2 in-sync replicas from 3 replicas up (one broker may be lost without
    refusing writes or losing acknowledged ones), else 1."""
    replication = max(1, min(configured, brokers))
    return replication, (2 if replication >= 3 else 1)


async def _live_brokers(admin: AIOKafkaAdminClient, *, wanted: int, patience_s: float = 15.0) -> int:
    """How many brokers the cluster has; when fewer than ``wanted``, ask again for up to
    ``patience_s`` seconds (metadata lists live brokers only: one restarting, or fenced for a
    missed heartbeat, comes back) before settling for fewer replicas."""
    deadline = time.monotonic() + patience_s
    while True:
        brokers = len((await admin.describe_cluster())["brokers"])
        if brokers >= wanted or time.monotonic() >= deadline:
            return brokers
        await asyncio.sleep(0.5)


async def create_missing_topics(kafka: KafkaSettings, specs: Iterable[TopicSpec]) -> list[str]:
    """Create those of ``specs`` that do not exist, with the replication the cluster allows (see
    the module docstring); returns the names created. Idempotent, and safe against another
    process creating them at the same time."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [spec for spec in specs if spec.name not in existing]
        created: list[str] = []
        if not wanted:
            return created
        brokers = await _live_brokers(admin, wanted=kafka.replication_factor)
        replication, min_insync = replication_for(kafka.replication_factor, brokers)
        if replication < kafka.replication_factor:
            log.warning(
                "fewer brokers than the configured replication factor; new topics get fewer replicas",
                configured=kafka.replication_factor,
                brokers=brokers,
                replication=replication,
            )
        for spec in wanted:  # one by one: a batch fails whole when one topic already exists
            configs = {"min.insync.replicas": str(min_insync)}
            if spec.compacted:
                configs.update(COMPACTION)
            try:
                await admin.create_topics(
                    [
                        NewTopic(
                            name=spec.name,
                            num_partitions=spec.partitions,
                            replication_factor=replication,
                            topic_configs=configs,
                        )
                    ]
                )
                created.append(spec.name)
            except TopicAlreadyExistsError:
                pass  # another process won the race; the topic exists, which is all we need
        return created
    finally:
        await admin.close()
