"""Creating Berth's topics with their partition counts and retention policies."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from berth.schemas import ALL_TOPICS, Topic
from berth.settings import KafkaSettings


async def ensure_topics(kafka: KafkaSettings, topics: Iterable[Topic] = ALL_TOPICS) -> list[str]:
    """Create any of ``topics`` that do not exist; returns the names created. Idempotent."""
    return await create_missing_topics(kafka, [
        TopicSpec(topic.name, topic.partitions, compacted=topic.compacted) for topic in topics])


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: for topics outside the contract, e.g. a stream processor's own."""

    name: str
    partitions: int
    compacted: bool = False


async def create_missing_topics(kafka: KafkaSettings, specs: Iterable[TopicSpec]) -> list[str]:
    """Create those of ``specs`` that do not exist (replication from ``kafka``); returns the
    names created. Idempotent, and safe against another process creating them at the same time."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [spec for spec in specs if spec.name not in existing]
        created = []
        for spec in wanted:  # one by one: a batch fails whole when one topic already exists
            try:
                await admin.create_topics([NewTopic(
                    name=spec.name, num_partitions=spec.partitions,
                    replication_factor=kafka.replication_factor,
                    topic_configs={"cleanup.policy": "compact"} if spec.compacted else {})])
                created.append(spec.name)
            except TopicAlreadyExistsError:
                pass  # another process won the race; the topic exists, which is all we need
        return created
    finally:
        await admin.close()
