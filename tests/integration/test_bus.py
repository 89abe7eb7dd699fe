"""Producing and consuming contract events on a real Kafka broker, including the dead-letter path."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from berth.schemas import ALL_TOPICS, DeadLetter, topic_for_event
from berth.schemas.envelope import decode, encode
from berth.schemas.samples import one_of_each
from berth.schemas.topics import DEAD_LETTER, QUEUE_LAG

from berth.bus import EventConsumer, EventProducer, ensure_topics
from berth.bus.deadletter import original_value
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration


def _private(topic):
    """A copy of a contract topic under a unique name, so tests never see each other's records."""
    return dataclasses.replace(topic, name=f"test.{topic.name}.{uuid.uuid4().hex[:8]}")


async def _read_all(kafka: KafkaSettings, topic: str, expected: int, timeout: float = 30.0):
    consumer = AIOKafkaConsumer(
        topic, **kafka.client_options(), group_id=None, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(records) < expected and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for part in batch.values():
                records.extend(part)
    finally:
        await consumer.stop()
    return records


async def test_every_event_type_round_trips_through_the_broker(kafka_bootstrap):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    events = one_of_each()
    private = {event.type: _private(topic_for_event(event)) for event in events}
    async with EventProducer(kafka, source="tests/bus") as producer:
        for event in events:
            await producer.send_and_wait(event, topic=private[event.type].name)
    for event in events:
        topic = private[event.type]
        [record] = await _read_all(kafka, topic.name, 1)
        headers = dict(record.headers)
        assert headers["ce_type"] == event.type.encode()
        assert headers["ce_source"] == b"tests/bus"
        assert record.key == event.partition_key.encode()
        assert decode(topic, record.key, record.value, record.headers).event == event


async def test_bad_records_go_to_the_dead_letter_topic_and_nothing_after_them_is_lost(kafka_bootstrap):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topics(kafka, [DEAD_LETTER])
    topic = _private(QUEUE_LAG)
    good = next(e for e in one_of_each() if e.type in QUEUE_LAG.event_types)
    good_1 = good.model_copy(update={"tokens_in_queue": 1})
    good_2 = good.model_copy(update={"tokens_in_queue": 2})
    good_3 = good.model_copy(update={"tokens_in_queue": 3})
    valid = encode(good_1, source="tests")
    invalid_body = json.loads(valid.value) | {"tokens_in_queue": -7}

    raw = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await raw.start()
    try:
        for record in (
            encode(good_1, source="tests"),
            None,  # not a CloudEvent at all
            encode(good_2, source="tests"),
            ("invalid", invalid_body),
            ("garbage", None),
            encode(good_3, source="tests"),
        ):
            if record is None:
                await raw.send_and_wait(topic.name, value=b"hello", key=b"llama-70b")
            elif isinstance(record, tuple):
                value = json.dumps(record[1]).encode() if record[1] else b"\xff{not json"
                await raw.send_and_wait(topic.name, value=value, key=valid.key, headers=valid.headers)
            else:
                await raw.send_and_wait(topic.name, value=record.value, key=record.key, headers=record.headers)
    finally:
        await raw.stop()

    accepted = []
    async with EventConsumer(kafka, [topic], group_id=f"g-{uuid.uuid4().hex}", name="test-consumer") as consumer:
        async for item in consumer.events(idle_timeout_s=3):
            accepted.append(item)
        await consumer.commit()
        assert consumer.dead_lettered == 3
    assert [item.event.tokens_in_queue for item in accepted] == [1, 2, 3]
    assert [item.offset for item in accepted] == [0, 2, 5]

    letters = []
    for record in await _read_all(kafka, DEAD_LETTER.name, 10_000, timeout=5):
        letter = decode(DEAD_LETTER, record.key, record.value, record.headers).event
        if letter.source_topic == topic.name:
            letters.append(letter)
    assert isinstance(letters[0], DeadLetter)
    by_offset = {letter.source_offset: letter for letter in letters}
    assert sorted(by_offset) == [1, 3, 4]
    assert "missing header" in by_offset[1].reason
    assert "tokens_in_queue: Input should be greater than or equal to 0" in by_offset[3].reason
    assert "Invalid JSON" in by_offset[4].reason
    assert original_value(by_offset[1]) == b"hello"
    assert all(letter.consumer == "test-consumer" for letter in letters)


async def test_ensure_topics_creates_every_topic_with_its_partitions(kafka_bootstrap):
    from aiokafka.admin import AIOKafkaAdminClient

    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    await ensure_topics(kafka)
    assert await ensure_topics(kafka) == []  # idempotent
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([t.name for t in ALL_TOPICS])
    finally:
        await admin.close()
    partitions = {d["topic"]: len(d["partitions"]) for d in described}
    assert partitions == {t.name: t.partitions for t in ALL_TOPICS}


async def test_compacted_topics_roll_segments_so_compaction_bounds_what_recovery_reads(kafka_bootstrap):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from berth.schemas.topics import INVENTORY_STATE

    from berth.bus.topics_admin import COMPACTION

    await ensure_topics(KafkaSettings(bootstrap=kafka_bootstrap), [INVENTORY_STATE])
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, INVENTORY_STATE.name, dict.fromkeys(COMPACTION))]
        )
    finally:
        await admin.close()
    configs = {entry[0]: entry[1] for entry in response.resources[0][4]}
    assert configs == COMPACTION


async def test_faust_table_changelogs_get_the_compaction_settings(kafka_bootstrap):
    """The inventory's changelogs, created as the service creates them, keep tombstones an hour, not
    Kafka's default day: else a restarted inventory reads every pod deleted in the last day."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from berth.services.inventory.app import Layout, create_app

    from berth.bus.streams import internal_topics
    from berth.bus.topics_admin import COMPACTION, create_missing_topics

    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    built = create_app(
        Layout(cells=2, pod_partitions=2, node_partitions=2),
        app_options={"broker": f"kafka://{kafka_bootstrap}"},
        app_id=f"test-inventory-{uuid.uuid4().hex[:8]}",
    )
    changelogs = [spec for spec in internal_topics(built.app) if spec.compacted]
    assert {spec.name.rsplit("-", 2)[-2] for spec in changelogs} == {"routes", "nodes"}
    await create_missing_topics(kafka, changelogs)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, spec.name, dict.fromkeys(COMPACTION)) for spec in changelogs]
        )
    finally:
        await admin.close()
    for response in responses:
        for resource in response.resources:
            configs = {entry[0]: entry[1] for entry in resource[4]}
            assert configs == COMPACTION, resource[2]
            assert int(configs["delete.retention.ms"]) <= 3600 * 1000


def test_cli_publishes_what_producers_send_and_tail_reads_it_back(kafka_bootstrap):
    from typer.testing import CliRunner

    from berth.cli import app

    runner = CliRunner()
    pool = f"pool-{uuid.uuid4().hex[:6]}"
    result = runner.invoke(
        app,
        ["publish", "queue-lag", "--pool", pool, "--tokens", "120000", "--rate", "4000", "--kafka", kafka_bootstrap],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app,
        ["publish", "spot-notice", "--node", "gpu-17", "--in", "120s", "--provider", "aws", "--kafka", kafka_bootstrap],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deadline"]
    result = runner.invoke(
        app, ["tail", QUEUE_LAG.name, "--kafka", kafka_bootstrap, "--timeout", "3", "--max", "100000"]
    )
    assert result.exit_code == 0, result.output
    pools = [json.loads(line)["event"]["pool"] for line in result.stdout.splitlines() if line.startswith("{")]
    assert pool in pools
