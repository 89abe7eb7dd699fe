"""``berth token-lag run`` against a real broker: lag state, cell input, dead letters, restart.

The topics are Berth's fixed ones and other tests may write to them, so every test uses pool
names of its own and reads only the records about them.
"""

from __future__ import annotations

import asyncio
import uuid
from base64 import b64encode
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from berth.schemas import QueueLagObserved
from berth.schemas.cells import cell_of_pool
from berth.schemas.topics import DEAD_LETTER, DECISION_INPUTS, LAG_STATE, QUEUE_LAG
from berth_dev.supervisor import Supervisor

from berth.bus import EventProducer, ensure_topics
from berth.bus.consumer import read_matching
from berth.bus.streams import partition_counts
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration
NAMESPACE = "serving"
T0 = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def kafka(kafka_bootstrap: str) -> KafkaSettings:
    settings = KafkaSettings(bootstrap=kafka_bootstrap)
    asyncio.run(ensure_topics(settings))
    return settings


@pytest.fixture
def pool() -> str:
    return f"pool-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pools_file(tmp_path: Path, pool: str) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(f"pools:\n  {NAMESPACE}/{pool}: {{model_load_seconds: 90}}\n")
    return path


@pytest.fixture
def supervisor(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Supervisor]:
    with Supervisor(tmp_path / "logs", {"BERTH_KAFKA_BOOTSTRAP": kafka_bootstrap}) as running:
        yield running


def start_token_lag(supervisor: Supervisor, data_dir: Path, pools_file: Path) -> Any:
    return supervisor.start(
        "token-lag",
        ["run", "--data-dir", str(data_dir), "--pools", str(pools_file), "--half-life-seconds", "10"],
        ready_timeout=90,
    )


def observation(pool: str, seconds: float, tokens: int, rate: float, ready: int = 1) -> QueueLagObserved:
    return QueueLagObserved(
        pool=pool,
        namespace=NAMESPACE,
        tokens_in_queue=tokens,
        token_rate=rate,
        active_sessions=2,
        ready_replicas=ready,
        observed_at=T0 + timedelta(seconds=seconds),
    )


async def publish(kafka: KafkaSettings, *events: Any) -> None:
    async with EventProducer(kafka, source="tests/token-lag") as producer:
        for event in events:
            await producer.send_and_wait(event)


async def states_of(
    kafka: KafkaSettings, topic: str, match: Callable[[Any], bool], count: int, timeout: float = 60.0
) -> list[Any]:
    """The first ``count`` records of ``topic`` whose event ``match``es (as ConsumedEvent)."""
    try:
        return await read_matching(kafka, topic, match, count, timeout_s=timeout, name="tests-token-lag")
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def of_pool(pool: str) -> Callable[[Any], bool]:
    return lambda event: getattr(event, "pool", None) == pool


async def test_publishes_smoothed_lag_to_state_and_cell_and_dead_letters_garbage(
    kafka, supervisor, tmp_path, pool, pools_file
):
    start_token_lag(supervisor, tmp_path / "data", pools_file)
    producer = AIOKafkaProducer(**kafka.client_options())
    await producer.start()
    try:
        await producer.send_and_wait(QUEUE_LAG.name, key=pool.encode(), value=b"not json at all")
    finally:
        await producer.stop()
    await publish(kafka, observation(pool, 0, 4000, 400), observation(pool, 10, 4000, 200, ready=0))

    [letter] = await states_of(kafka, DEAD_LETTER.name, lambda e: e.key_b64 == b64encode(pool.encode()).decode(), 1)
    assert letter.event.consumer == "token-lag" and letter.event.source_topic == QUEUE_LAG.name
    first, second = (item.event for item in await states_of(kafka, LAG_STATE.name, of_pool(pool), 2))
    assert (first.smoothed_token_rate, first.expected_ttft_ms) == (400, 10_000)
    assert second.smoothed_token_rate == pytest.approx(300)  # one half-life later: halfway
    assert second.expected_ttft_ms == pytest.approx(4000 / 300 * 1000 + 90_000)  # no replica: + load
    inputs = await states_of(kafka, DECISION_INPUTS.name, of_pool(pool), 2)
    cells = (await partition_counts(kafka, [DECISION_INPUTS.name]))[DECISION_INPUTS.name]
    assert {item.partition for item in inputs} == {cell_of_pool(NAMESPACE, pool, cells)}
    assert [item.event for item in inputs] == [first, second]


async def test_restart_continues_the_average_from_the_changelog(kafka, supervisor, tmp_path, pool, pools_file):
    service = start_token_lag(supervisor, tmp_path / "data", pools_file)
    await publish(kafka, observation(pool, 0, 1000, 800))
    await states_of(kafka, LAG_STATE.name, of_pool(pool), 1)
    service.stop()
    assert service.popen.returncode == 0, "SIGTERM must stop the service cleanly"

    start_token_lag(supervisor, tmp_path / "data-after-restart", pools_file)  # empty local store
    await publish(kafka, observation(pool, 20, 1000, 0))
    states = [item.event for item in await states_of(kafka, LAG_STATE.name, of_pool(pool), 2)]
    resumed = states[-1]
    assert resumed.observations == 2  # the pool's state came back from the changelog
    assert resumed.smoothed_token_rate == pytest.approx(200)  # two half-lives: a quarter of 800 left
