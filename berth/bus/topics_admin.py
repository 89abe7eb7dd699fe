"""Creating Berth's topics with their partition counts and retention policies."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from berth.schemas import ALL_TOPICS, Topic
from berth.settings import KafkaSettings


async def ensure_topics(kafka: KafkaSettings, topics: Iterable[Topic] = ALL_TOPICS) -> list[str]:
    """Create any of ``topics`` that do not exist; returns the names created. Idempotent."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [topic for topic in topics if topic.name not in existing]
        if not wanted:
            return []
        new_topics = [
            NewTopic(
                name=topic.name,
                num_partitions=topic.partitions,
                replication_factor=kafka.replication_factor,
                topic_configs={"cleanup.policy": "compact"} if topic.compacted else {},
            )
            for topic in wanted
        ]
        try:
            await admin.create_topics(new_topics)
        except TopicAlreadyExistsError:
            pass  # another process won the race; the topic exists, which is all we need
        return [topic.name for topic in wanted]
    finally:
        await admin.close()
