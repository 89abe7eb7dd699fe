"""``berth binder run --backend sim`` against ``berth cluster-sim run``, on a real broker.

Both run as subprocesses (killed with the test). Commands are published with EventProducer as
the decision service would; the test reads the results topic, the issuing cell's partition of the
decision-input topic, the pods topic and the dead-letter topic, looking only at records about its
own uniquely named pods and commands (other tests share these topics). The binder uses a consumer
group of its own, started at the end of the commands topic, so it never acts on other tests'
commands.
"""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from berth.schemas import CommandResult, DeadLetter, PlacePods, PodObserved, PodPlacement, topic_named
from berth.schemas.envelope import decode
from berth.schemas.topics import COMMANDS, DEAD_LETTER, DECISION_INPUTS, PODS, RESULTS
from berth_dev.devstack import procs
from berth_dev.supervisor import Supervisor
from berth_dev.workloads import write_documents
from berth_dev.workloads.generate import H100, gpu_node_manifest, pod_manifest

from berth.bus import EventProducer, ensure_topics
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration
CELL = 1


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    async with EventProducer(kafka, source="tests/binder") as producer:  # for its metadata
        partitions = [TopicPartition(topic, p) for p in sorted(await producer.raw.partitions_for(topic))]
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=None)
    await consumer.start()
    try:
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def _park_group_at_end(kafka: KafkaSettings, group: str, topic: str = COMMANDS.name) -> None:
    """Commit ``group``'s offsets at the end of ``topic`` (the commands): the binder starts there."""
    ends = await _end_offsets(kafka, topic)
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        offsets = {TopicPartition(topic, p): o for p, o in ends.items()}
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


async def read_from(
    kafka: KafkaSettings,
    topic: str,
    start: dict[int, int],
    match: Callable[[Any], bool],
    *,
    count: int = 1,
    timeout: float = 60.0,
    settle: float = 0.0,
) -> list[tuple[int, int, Any]]:
    """(partition, offset, event) of records of ``topic`` at or after ``start`` whose event
    ``match``es; waits for ``count`` of them, then ``settle`` more seconds for unexpected extras."""
    consumer = AIOKafkaConsumer(
        **kafka.client_options(), group_id=None, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    found: list[tuple[int, int, Any]] = []
    contract = topic_named(topic)
    try:
        assigned = [TopicPartition(topic, p) for p in sorted(start)]
        consumer.assign(assigned)
        for tp in assigned:
            consumer.seek(tp, start[tp.partition])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        settle_until: float | None = None
        while loop.time() < (settle_until if settle_until is not None else deadline):
            batches = await consumer.getmany(timeout_ms=300)
            for tp, records in batches.items():
                for record in records:
                    event = decode(contract, record.key, record.value, record.headers).event
                    if match(event):
                        found.append((tp.partition, record.offset, event))
            if len(found) >= count and settle_until is None:
                if not settle:
                    break
                settle_until = loop.time() + settle
    finally:
        await consumer.stop()
    if len(found) < count:
        raise AssertionError(f"{topic}: {len(found)} of {count} matching records within {timeout:.0f} s")
    return found


class Cluster:
    """A simulator with a few uniquely named pods, and a binder in front of it."""

    def __init__(self, kafka: KafkaSettings, supervisor: Supervisor, tmp_path: Path) -> None:
        self.kafka = kafka
        self.node = unique("it-node")
        self.pods = {name: unique(f"it-{name}") for name in ("solo", "dup", "w0", "w1", "bad")}
        documents = [gpu_node_manifest(self.node, H100, zone="us-east-1a")]
        documents += [
            pod_manifest(pod, "ml", requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, gpu_toleration=True)
            for pod in self.pods.values()
        ]
        workload = tmp_path / "workload.yaml"
        write_documents(documents, workload)
        [port] = procs.free_ports(1)
        self.url = f"http://127.0.0.1:{port}"
        supervisor.start(
            "cluster-sim",
            [
                "run",
                "--workload",
                str(workload),
                "--port",
                str(port),
                "--speed",
                "max",
                "--no-progress",
                "--no-watch-decisions",
            ],
            ready_timeout=90,
        )
        _wait_http(self.url + "/healthz")
        group = unique("it-binder")
        asyncio.run(_park_group_at_end(kafka, group))
        supervisor.start(
            "binder",
            ["run", "--backend", "sim", "--sim-url", self.url, "--group", group, "--max-attempts", "2"],
            ready_timeout=90,
        )

    def uid(self, pod: str) -> str:
        """The UID the workload gives a pod (deterministic, from its namespace and name)."""
        import json

        with urllib.request.urlopen(f"{self.url}/api/v1/namespaces/ml/pods/{self.pods[pod]}") as response:
            return json.load(response)["metadata"]["uid"]

    def place(
        self, *pods: str, devices: tuple[int, ...] = (0,), command_id: str | None = None, uid: str | None = None
    ) -> PlacePods:
        placements = tuple(
            PodPlacement(
                pod_uid=uid or self.uid(p) if p in self.pods else uid or "uid-nobody",
                namespace="ml",
                name=self.pods.get(p, p),
                node=self.node,
                gpu_devices=(devices[0] + i,) if devices else (),
            )
            for i, p in enumerate(pods)
        )
        command_id = command_id or unique("cmd")
        return PlacePods(
            command_id=command_id,
            decision_id=f"dec-{command_id}",
            cell=CELL,
            issued_at=datetime.now(UTC),
            placements=placements,
            pod_group="gang" if len(pods) > 1 else None,
        )


def _wait_http(url: str, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout:.0f} s")


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    asyncio.run(ensure_topics(kafka))
    tmp = tmp_path_factory.mktemp("binder")
    with Supervisor(tmp / "logs", {"BERTH_KAFKA_BOOTSTRAP": kafka_bootstrap}) as supervisor:
        yield Cluster(kafka, supervisor, tmp)


async def _publish(kafka: KafkaSettings, *commands: PlacePods) -> None:
    async with EventProducer(kafka, source="tests/binder") as producer:
        for command in commands:
            await producer.send_and_wait(command, event_id=command.command_id)


def _result_of(command: PlacePods) -> Callable[[Any], bool]:
    return lambda event: isinstance(event, CommandResult) and event.command_id == command.command_id


def _bound(uid: str) -> Callable[[Any], bool]:
    return lambda event: isinstance(event, PodObserved) and event.pod.uid == uid and event.pod.node_name is not None


async def _positions(kafka: KafkaSettings) -> dict[str, dict[int, int]]:
    return {
        topic: await _end_offsets(kafka, topic)
        for topic in (RESULTS.name, DECISION_INPUTS.name, PODS.name, DEAD_LETTER.name)
    }


def test_place_pods_is_applied_bound_once_and_its_cell_hears_of_it_from_the_pod(cluster: Cluster):
    kafka = cluster.kafka
    command = cluster.place("solo", devices=(2,))
    uid = command.placements[0].pod_uid
    missing = cluster.place("it-never-created-" + uuid.uuid4().hex[:6], uid="uid-nobody-solo")

    async def scenario() -> None:
        start = await _positions(kafka)
        await _publish(kafka, command)
        [(_, _, result)] = await read_from(kafka, RESULTS.name, start[RESULTS.name], _result_of(command))
        assert (result.status, result.target, result.decision_id) == (
            "applied",
            f"ml/{cluster.pods['solo']}",
            command.decision_id,
        )
        [(_, _, bound)] = await read_from(kafka, PODS.name, start[PODS.name], _bound(uid), settle=2)
        assert (bound.pod.node_name, bound.pod.gpu_devices) == (cluster.node, (2,))
        # A conflict sent after it is copied to the same cell partition by the same producer:
        # had the applied result been copied, it would come before the conflict there.
        await _publish(kafka, missing)
        [(partition, conflict_offset, _)] = await read_from(
            kafka, DECISION_INPUTS.name, start[DECISION_INPUTS.name], _result_of(missing)
        )
        assert partition == CELL
        ids = {command.command_id, missing.command_id}
        before = await read_from(
            kafka,
            DECISION_INPUTS.name,
            start[DECISION_INPUTS.name],
            lambda event: isinstance(event, CommandResult) and event.command_id in ids,
        )
        assert [(p, o) for p, o, _ in before] == [(CELL, conflict_offset)]

    asyncio.run(scenario())


def test_a_duplicate_command_still_binds_once(cluster: Cluster):
    kafka = cluster.kafka
    command = cluster.place("dup")
    uid = command.placements[0].pod_uid

    async def scenario() -> None:
        start = await _positions(kafka)
        await _publish(kafka, command, command)
        results = await read_from(kafka, RESULTS.name, start[RESULTS.name], _result_of(command), count=2)
        assert [r.status for _, _, r in results] == ["applied", "applied"]
        bound = await read_from(kafka, PODS.name, start[PODS.name], _bound(uid), settle=3)
        assert len(bound) == 1

    asyncio.run(scenario())


def test_missing_pod_is_a_conflict_and_a_gang_binds_every_member(cluster: Cluster):
    kafka = cluster.kafka
    missing = cluster.place("it-never-created-" + uuid.uuid4().hex[:6], uid="uid-nobody")
    gang = cluster.place("w0", "w1", devices=(4,))

    async def scenario() -> None:
        start = await _positions(kafka)
        await _publish(kafka, missing, gang)
        [(_, _, conflict)] = await read_from(kafka, RESULTS.name, start[RESULTS.name], _result_of(missing))
        assert conflict.status == "conflict" and "not found" in conflict.reason
        [(partition, _, _)] = await read_from(
            kafka, DECISION_INPUTS.name, start[DECISION_INPUTS.name], _result_of(missing)
        )
        assert partition == CELL
        [(_, _, applied)] = await read_from(kafka, RESULTS.name, start[RESULTS.name], _result_of(gang))
        assert applied.status == "applied"
        for placement in gang.placements:
            [(_, _, bound)] = await read_from(kafka, PODS.name, start[PODS.name], _bound(placement.pod_uid))
            assert bound.pod.gpu_devices == placement.gpu_devices

    asyncio.run(scenario())


def test_a_command_that_can_never_apply_is_failed_and_dead_lettered(cluster: Cluster):
    kafka = cluster.kafka
    command = cluster.place("bad", devices=(99,))  # the node has devices 0-7: 422 Invalid

    async def scenario() -> None:
        start = await _positions(kafka)
        commands_start = await _end_offsets(kafka, COMMANDS.name)
        await _publish(kafka, command)
        [(_, _, result)] = await read_from(kafka, RESULTS.name, start[RESULTS.name], _result_of(command))
        assert result.status == "failed" and "no GPU device(s) [99]" in result.reason and result.attempts == 1
        [(_, _, letter)] = await read_from(
            kafka,
            DEAD_LETTER.name,
            start[DEAD_LETTER.name],
            lambda e: (
                isinstance(e, DeadLetter)
                and e.source_topic == COMMANDS.name
                and command.command_id in _decoded_command_id(e)
            ),
        )
        assert letter.consumer == "binder" and "place-pods failed" in letter.reason
        assert letter.source_offset >= commands_start[letter.source_partition]

    asyncio.run(scenario())


def _decoded_command_id(letter: DeadLetter) -> str:
    from berth.bus.deadletter import original_value

    return original_value(letter).decode(errors="replace")
