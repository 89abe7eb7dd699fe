"""``berth cluster-sim run`` on a real broker: what it publishes, when, and when it says it is done.

The simulator runs as a subprocess at 4× speed on a tiny workload with unique names: two nodes
(one spot), an AgentPool with one replica, two pods (one that ends 2 simulated seconds after it
is bound), a queue-lag report and a spot notice whose node is reclaimed at the deadline. The test
plays the binder by hand (HTTP bindings) and the decision service by hand (an ``unschedulable``
decision record), and expects the simulator to stop by itself once every pod is decided.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from berth.schemas import (
    DecisionRecord,
    InputPosition,
    NodeObserved,
    NodeRemoved,
    PodDeleted,
    PodObserved,
    QueueLagObserved,
    SpotInterruptionNotice,
    topic_named,
)
from berth.schemas.envelope import decode
from berth.schemas.topics import NODES, PODS, QUEUE_LAG, SPOT
from berth_dev.devstack import procs
from berth_dev.supervisor import Supervisor
from berth_dev.workloads import write_documents
from berth_dev.workloads.generate import L4, gpu_node_manifest, pod_manifest

from berth.bus import EventProducer, ensure_topics
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _end_offsets(kafka: KafkaSettings, topics: list[str]) -> dict[str, dict[int, int]]:
    async with EventProducer(kafka, source="tests/cluster-sim") as producer:
        partitions = [TopicPartition(t, p) for t in topics for p in sorted(await producer.raw.partitions_for(t))]
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=None)
    await consumer.start()
    try:
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    out: dict[str, dict[int, int]] = {}
    for tp, offset in ends.items():
        out.setdefault(tp.topic, {})[tp.partition] = offset
    return out


async def _read(
    kafka: KafkaSettings,
    topic: str,
    start: dict[int, int],
    match: Callable[[Any], bool],
    count: int,
    timeout: float = 60.0,
) -> list[tuple[int, Any]]:
    """(record timestamp ms, event) of the first ``count`` matching records after ``start``."""
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    found: list[tuple[int, Any]] = []
    try:
        assigned = [TopicPartition(topic, p) for p in sorted(start)]
        consumer.assign(assigned)
        for tp in assigned:
            consumer.seek(tp, start[tp.partition])
        deadline = time.monotonic() + timeout
        while len(found) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=300)).values():
                for record in records:
                    event = decode(topic_named(topic), record.key, record.value, record.headers).event
                    if match(event):
                        found.append((record.timestamp, event))
    finally:
        await consumer.stop()
    assert len(found) >= count, f"{topic}: {len(found)} of {count} matching records"
    return found[:count]


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _wait(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached within {timeout:.0f} s")


def _decision(subject: str, outcome: str) -> DecisionRecord:
    now = datetime.now(UTC)
    return DecisionRecord(
        decision_id=unique("dec"),
        cell="cell-0",
        subject=subject,
        outcome=outcome,
        input=InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=0),
        message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        config_version="test",
        snapshot_hash="s",
        config_hash="c",
        decision_hash="d",
        event_time=now,
    )


def test_simulator_publishes_plays_and_stops_once_everything_is_decided(kafka_bootstrap: str, tmp_path: Path):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    asyncio.run(ensure_topics(kafka))
    steady, spot, pool = unique("it-l4"), unique("it-spot"), unique("it-pool")
    first, short = unique("it-first"), unique("it-short")
    documents: list[dict[str, Any]] = [
        gpu_node_manifest(steady, L4, zone="us-east-1a"),
        gpu_node_manifest(spot, L4, zone="us-east-1b", spot=True),
    ]
    documents.append(
        {
            "apiVersion": "berth.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": pool, "namespace": "serving"},
            "spec": {"replicas": 1, "gpuRequirements": {"count": 1}},
        }
    )
    gpu = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    documents += [
        pod_manifest(first, "ml", at_s=0, requests=gpu, gpu_toleration=True),
        pod_manifest(short, "ml", at_s=1, run_s=2, requests=gpu, gpu_toleration=True),
    ]
    documents.append(
        {
            "apiVersion": "sim.berth.io/v1alpha1",
            "kind": "Timeline",
            "metadata": {"name": "t"},
            "spec": {
                "queueLag": [
                    {"pool": pool, "namespace": "serving", "atSeconds": 2, "tokensInQueue": 9000, "tokenRate": 100}
                ],
                "spotNotices": [{"node": spot, "atSeconds": 4, "noticeSeconds": 4}],
            },
        }
    )
    workload = tmp_path / "workload.yaml"
    write_documents(documents, workload)
    start = asyncio.run(_end_offsets(kafka, [NODES.name, PODS.name, SPOT.name, QUEUE_LAG.name]))
    [port] = procs.free_ports(1)
    url = f"http://127.0.0.1:{port}"

    with Supervisor(tmp_path / "logs", {"BERTH_KAFKA_BOOTSTRAP": kafka_bootstrap}) as supervisor:
        sim = supervisor.start(
            "cluster-sim",
            [
                "run",
                "--workload",
                str(workload),
                "--port",
                str(port),
                "--speed",
                "4",
                "--no-progress",
                "--exit-when-decided",
                "--timeout",
                "120",
            ],
            ready_timeout=90,
        )
        _wait(lambda: _status(url) is not None, what="the simulator's API")
        _wait(lambda: _status(url)["pods"]["arrived"] == 2, what="both pods arriving")

        def bind(name: str, node: str) -> int:
            code, pod = _http("GET", f"{url}/api/v1/namespaces/ml/pods/{name}")
            assert code == 200
            binding = {
                "kind": "Binding",
                "metadata": {"uid": pod["metadata"]["uid"], "annotations": {"berth.io/gpu-devices": "0"}},
                "target": {"name": node},
            }
            return _http("POST", f"{url}/api/v1/namespaces/ml/pods/{name}/binding", binding)[0]

        assert bind(first, steady) == 201
        assert bind(short, spot) == 201
        status = _status(url)
        assert status["pods"]["undecided"] == 1  # the pool's replica: nobody decided about it yet
        assert status["all_decided"] is False
        asyncio.run(_publish_decision(kafka, _decision(f"serving/{pool}-0", "unschedulable")))
        _wait(lambda: not sim.is_alive(), timeout=90, what="the simulator stopping by itself")
        assert sim.popen is not None and sim.popen.returncode == 0
        summary = json.loads(
            [
                line
                for line in sim.log_path.read_text().splitlines()
                if line.startswith("{") and '"all_decided"' in line
            ][-1]
        )
    assert summary["all_decided"] is True and summary["played"] is True
    assert summary["pods"]["unschedulable"] == 1 and summary["overcommitted_binds"] == 0

    async def published() -> None:
        nodes = await _read(
            kafka,
            NODES.name,
            start[NODES.name],
            lambda e: isinstance(e, NodeObserved) and e.node.name in (steady, spot),
            2,
        )
        pods = await _read(
            kafka,
            PODS.name,
            start[PODS.name],
            lambda e: isinstance(e, PodObserved) and e.pod.name in (first, short, f"{pool}-0"),
            5,
        )
        assert max(ts for ts, _ in nodes) <= min(ts for ts, _ in pods)  # the cluster exists before its pods
        names = [(e.pod.name, e.pod.node_name) for _, e in pods]
        # The pool's replica is part of the starting cluster (pods of different partitions: by time).
        replica_at = min(ts for ts, e in pods if e.pod.name == f"{pool}-0")
        assert replica_at <= min(ts for ts, e in pods if e.pod.name != f"{pool}-0")
        assert (first, steady) in names and (short, spot) in names
        [(_, lag)] = await _read(
            kafka,
            QUEUE_LAG.name,
            start[QUEUE_LAG.name],
            lambda e: isinstance(e, QueueLagObserved) and e.pool == pool,
            1,
        )
        assert lag.tokens_in_queue == 9000 and lag.ready_replicas == 0
        [(_, notice)] = await _read(
            kafka, SPOT.name, start[SPOT.name], lambda e: isinstance(e, SpotInterruptionNotice) and e.node == spot, 1
        )
        assert (notice.deadline - notice.issued_at).total_seconds() == 4
        [(_, removed)] = await _read(
            kafka, NODES.name, start[NODES.name], lambda e: isinstance(e, NodeRemoved) and e.name == spot, 1
        )
        [(_, ended)] = await _read(
            kafka, PODS.name, start[PODS.name], lambda e: isinstance(e, PodDeleted) and e.name == short, 1
        )
        assert ended.node_name == spot and ended.observed_at <= removed.observed_at

    asyncio.run(published())


def _status(url: str) -> Any:
    try:
        return _http("GET", f"{url}/status")[1]
    except OSError:
        return None


async def _publish_decision(kafka: KafkaSettings, record: DecisionRecord) -> None:
    async with EventProducer(kafka, source="tests/cluster-sim") as producer:
        await producer.send_and_wait(record)
