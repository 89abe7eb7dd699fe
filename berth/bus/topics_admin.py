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
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from berth.logs import get_logger
from berth.schemas import ALL_TOPICS, Topic
from berth.settings import KafkaSettings

log = get_logger(__name__)


SERVED_PATIENCE_S = 30.0
"""How long ensure_topics waits for brokers to serve the topics it created (leader elections of a
new topic take well under a second on a healthy cluster; a broker that is down takes longer)."""

COMPACTION = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.2",
    "delete.retention.ms": str(60 * 60 * 1000),
}
"""Compacted topics (tables' changelogs, the inventory state, cell snapshots) roll a segment every
ten minutes so that compaction, which never touches the active segment, keeps up: what a
restarting reader (a faust table recovering its changelog, a cell looking for its snapshot)
reads stays about one record per key plus ten minutes of updates, whatever the history (Kafka's
default, a week or 1 GiB per segment, would let it grow with history).

A deleted key's tombstone is kept an hour after compaction reached it, not Kafka's default day:
every pod deleted leaves one in the inventory's pod-routes changelog, so with a day a restarted
inventory would read a day of deleted pods (bench.recovery.inventory: about 250,000 tombstones
against 500 live keys after 1,000,000 inputs). An hour is still far longer than any reader
takes to read these topics from the start (a recovery takes seconds), which is what a tombstone
must outlive."""


async def ensure_topics(kafka: KafkaSettings, topics: Iterable[Topic] = ALL_TOPICS) -> list[str]:
    """Create any of ``topics`` that do not exist (with the installation's names, see
    :class:`~berth.schemas.topics.KafkaNames`); returns the names created. Idempotent."""
    return await create_missing_topics(
        kafka,
        [TopicSpec(kafka.names.topic(topic), kafka.partitions(topic), compacted=topic.compacted) for topic in topics],
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
            new_topic = NewTopic(
                name=spec.name, num_partitions=spec.partitions, replication_factor=replication, topic_configs=configs
            )
            try:
                response = await admin.create_topics([new_topic])
                _raise_for_topic_errors(response)
                created.append(spec.name)
            except TopicAlreadyExistsError:
                pass  # another process won the race; the topic exists, which is all we need
        await _wait_until_served(admin, {spec.name: spec.partitions for spec in wanted})
        return created
    finally:
        await admin.close()


def _raise_for_topic_errors(response: Any) -> None:
    """CreateTopics answers per topic instead of failing the request: raise the first topic's
    error (``TopicAlreadyExistsError`` included) as the exception aiokafka has for its code."""
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        if code:
            message = entry[2] if len(entry) > 2 and entry[2] else ""
            raise for_code(code)(f"creating topic {name}: {message}".rstrip(": "))


async def _wait_until_served(
    admin: AIOKafkaAdminClient, partitions: dict[str, int], *, patience_s: float = SERVED_PATIENCE_S
) -> None:
    """Return once the metadata of every topic in ``partitions`` lists all of its partitions with
    a leader. The controller acknowledges a creation before the brokers serve the topic; a
    producer or a describe in that gap finds no partitions (or no leader), so callers that create
    topics and use them at once would race. After ``patience_s``, raise naming the topics."""
    deadline = time.monotonic() + patience_s
    waiting = dict(partitions)
    while waiting:
        for topic in await admin.describe_topics(list(waiting)):
            served = [p for p in topic.get("partitions", ()) if p.get("leader", -1) >= 0]
            if not topic.get("error_code") and len(served) >= waiting.get(topic["topic"], 0):
                waiting.pop(topic["topic"], None)
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise KafkaError(
                f"topics created but not served by the brokers within {patience_s:.0f} s: {sorted(waiting)}; "
                "check that every broker is up (berth dev status)"
            )
        await asyncio.sleep(0.2)
