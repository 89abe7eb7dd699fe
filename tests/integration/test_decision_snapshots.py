"""A decision cell taken over restores its snapshot instead of re-reading its log from offset 0.

Real broker, the decision service as a process with a snapshot every 40 inputs: it decides a
first stream of pods, is stopped, and started again. The new owner must say it restored a
snapshot and folded only the inputs after it; the decisions it then makes for a second stream of
pods must be exactly those of a cell that folded the whole log from the start (computed here, in
process, from the committed inputs).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from berth.schemas import DecisionRecord, InputPosition, NodeObserved, PodInfo, PodObserved
from berth.schemas.envelope import encode
from berth.schemas.samples import T0, h100_node
from berth.schemas.topics import DECISION_INPUTS, DECISIONS

from berth.bus import EventConsumer, EventProducer, ensure_topics
from berth.cells import Cell, CellConfig
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration

BERTH = str(Path(sys.executable).with_name("berth"))
EVERY = 40


def _pod(name: str, gpus: int) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": gpus},
        creation_time=T0,
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
    )


async def _publish(bootstrap: str, events: list[Any]) -> None:
    kafka = KafkaSettings(bootstrap=bootstrap)
    await ensure_topics(kafka)
    async with EventProducer(kafka, source="tests/snapshots") as producer:
        futures = []
        for event in events:
            record = encode(event, source="tests/snapshots")
            futures.append(
                await producer.raw.send(
                    DECISION_INPUTS.name, record.value, key=record.key, headers=record.headers, partition=0
                )
            )
        for future in futures:
            await future


async def _read(bootstrap: str, topic: Any) -> list[tuple[int, Any]]:
    kafka = KafkaSettings(bootstrap=bootstrap)
    found = []
    async with EventConsumer(kafka, [topic], group_id=None, name="tests-snapshots") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            found.append((item.offset, item.event))
    return found


def _start(bootstrap: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BERTH_SNAPSHOT_EVERY": str(EVERY), "BERTH_LOG_FORMAT": "json"}
    return subprocess.Popen(
        [BERTH, "decision", "run", "--kafka", bootstrap], env=env, stdout=log_path.open("ab"), stderr=subprocess.STDOUT
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _placed(bootstrap: str) -> list[DecisionRecord]:
    return [
        e
        for _, e in asyncio.run(_read(bootstrap, DECISIONS))
        if isinstance(e, DecisionRecord) and e.outcome == "placed"
    ]


def _wait_placed(bootstrap: str, count: int, log_path: Path, timeout: float = 120) -> list[DecisionRecord]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        placed = _placed(bootstrap)
        if len(placed) >= count:
            return placed
        time.sleep(1)
    raise AssertionError(f"fewer than {count} placements within {timeout:.0f}s:\n{log_path.read_text()[-3000:]}")


def test_a_restarted_cell_restores_its_snapshot_and_decides_as_if_it_never_stopped(
    own_kafka: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "decision.log"
    nodes = [NodeObserved(node=h100_node(f"gpu-{i}"), observed_at=T0) for i in range(60)]
    first = [PodObserved(pod=_pod(f"a-{i}", 1 + i % 2), observed_at=T0) for i in range(100)]
    second = [PodObserved(pod=_pod(f"b-{i}", 1 + i % 3), observed_at=T0) for i in range(60)]

    process = _start(own_kafka, log_path)
    try:
        asyncio.run(_publish(own_kafka, [*nodes, *first]))
        _wait_placed(own_kafka, len(first), log_path)
    finally:
        _stop(process)

    process = _start(own_kafka, log_path)
    try:
        asyncio.run(_publish(own_kafka, second))
        after = _wait_placed(own_kafka, len(first) + len(second), log_path)
    finally:
        _stop(process)

    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    written = [line for line in lines if line.get("event") == "cell snapshot written"]
    takeovers = [line for line in lines if line.get("event") == "cell taken over"]
    assert written and all(line["cell"] == 0 for line in written)
    assert len(takeovers) >= 2, takeovers
    restart = [t for t in takeovers if t["cell"] == 0][-1]
    assert restart["snapshot_offset"], f"the restarted cell did not restore a snapshot: {restart}"
    # Only the tail after the snapshot was folded, not the whole log.
    assert restart["inputs_folded"] == restart["committed_offset"] - restart["snapshot_offset"] < EVERY, restart
    assert restart["committed_offset"] >= len(nodes) + len(first), restart

    # The decisions after the restart are those of a cell that folded the whole log.
    inputs = [(offset, event) for offset, event in asyncio.run(_read(own_kafka, DECISION_INPUTS))]
    cell = Cell(0, CellConfig())
    expected: dict[str, str] = {}
    for offset, event in sorted(inputs, key=lambda item: item[0]):
        for decision in cell.handle(event, InputPosition(topic=DECISION_INPUTS.name, partition=0, offset=offset)):
            expected[decision.record.decision_id] = decision.record.decision_hash
    second_uids = {f"ml/b-{i}" for i in range(len(second))}
    made = {d.decision_id: d.decision_hash for d in after if d.subject in second_uids}
    assert len(made) == len(second)
    assert made == {key: expected[key] for key in made}
