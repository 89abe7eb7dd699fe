"""``berth inventory run`` against a real broker: routing to cells, state topic, dead letters, restart.

The topics are Berth's fixed ones and other tests may write to them, so every test uses node and
pod names of its own and reads only the records that mention them.
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
from berth.schemas import (
    CellTick,
    ForeignNodeObserved,
    GpuDevice,
    GpuDeviceSample,
    GpuTelemetry,
    NodeInfo,
    NodeObserved,
    PodDeleted,
    PodInfo,
    PodObserved,
    PolicyObserved,
    PriorityClassInfo,
    SpotInterruptionNotice,
)
from berth.schemas.cells import CELL_LABEL
from berth.schemas.topics import DEAD_LETTER, DECISION_INPUTS, INVENTORY_STATE, PODS
from berth_dev.supervisor import Supervisor

from berth.bus import EventProducer, ensure_topics
from berth.bus.consumer import read_matching
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration
CELL = 1  # nodes of these tests carry the berth.io/cell label "1"


@pytest.fixture(scope="module")
def inventory_broker(kafka_bootstrap: str) -> Iterator[str]:
    """A broker for this module alone. The inventory's consumer group and changelog topics have
    fixed names: on the session's broker a worker taking partitions over would first restore the
    tables of every earlier test of the session that ran an inventory (in CI, the takeover test
    once saw only 4 of 16 nodes within 90 s)."""
    from berth_dev.devstack.scratch import empty_kafka

    with empty_kafka() as bootstrap:
        yield bootstrap


@pytest.fixture
def kafka(inventory_broker: str) -> KafkaSettings:
    settings = KafkaSettings(bootstrap=inventory_broker)
    asyncio.run(ensure_topics(settings))
    return settings


@pytest.fixture
def supervisor(inventory_broker: str, tmp_path: Path) -> Iterator[Supervisor]:
    with Supervisor(tmp_path / "logs", {"BERTH_KAFKA_BOOTSTRAP": inventory_broker}) as running:
        yield running


def start_inventory(supervisor: Supervisor, data_dir: Path, *options: str) -> Any:
    return supervisor.start("inventory", ["run", "--data-dir", str(data_dir), *options], ready_timeout=90)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def now() -> datetime:
    return datetime.now(UTC)


def gpu_node(name: str) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={CELL_LABEL: str(CELL)},
        allocatable={"nvidia.com/gpu": 2},
        gpus=(GpuDevice(index=0, model="H100"), GpuDevice(index=1, model="H100")),
    )


def bound_pod(name: str, node: str, *, devices: tuple[int, ...], milli: int | None = None) -> PodInfo:
    return PodInfo(
        uid=unique("uid"),
        namespace="ml",
        name=name,
        scheduler_name="berth",
        node_name=node,
        gpu_devices=devices,
        gpu_fraction_milli=milli,
        phase="Running",
        requests={} if milli else {"nvidia.com/gpu": len(devices)},
        creation_time=now(),
    )


async def publish(kafka: KafkaSettings, *events: Any) -> None:
    async with EventProducer(kafka, source="tests/inventory") as producer:
        for event in events:
            await producer.send_and_wait(event)


async def wait_for(
    kafka: KafkaSettings, topic: str, match: Callable[[Any], bool], count: int = 1, timeout: float = 60.0
) -> list[Any]:
    """The first ``count`` records of ``topic`` whose event ``match``es; fails after ``timeout``."""
    try:
        return await read_matching(kafka, topic, match, count, timeout_s=timeout, name="tests-inventory")
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def about(name: str) -> Callable[[Any], bool]:
    return lambda event: name in (getattr(event, "subject", "") or "")


async def test_routes_to_cells_publishes_inventory_and_survives_bad_records(kafka, supervisor, tmp_path):
    t = now()
    service = start_inventory(supervisor, tmp_path / "data", "--tick-seconds", "1")
    node = unique("node")
    await publish(kafka, NodeObserved(node=gpu_node(node), observed_at=t))
    # The node goes to its cell; the other cell gets it in its census of foreign nodes.
    [seen] = await wait_for(kafka, DECISION_INPUTS.name, lambda e: isinstance(e, NodeObserved) and e.node.name == node)
    assert (seen.partition, seen.event.type) == (CELL, "io.berth.cluster.node-observed.v1")
    [census] = await wait_for(
        kafka, DECISION_INPUTS.name, lambda e: isinstance(e, ForeignNodeObserved) and e.name == node
    )
    assert census.partition == 1 - CELL and census.event.cell == CELL

    # A bad record on the pod topic, then a good one: the bad one is dead-lettered, the next processed.
    share = bound_pod(unique("share"), node, devices=(1,), milli=250)
    producer = AIOKafkaProducer(**kafka.client_options())
    await producer.start()
    try:
        await producer.send_and_wait(
            PODS.name,
            key=share.uid.encode(),
            value=b"{broken",
            headers=[("ce_type", b"io.berth.cluster.pod-observed.v1")],
        )
    finally:
        await producer.stop()
    await publish(kafka, PodObserved(pod=share, observed_at=t + timedelta(seconds=1)))
    letters = await wait_for(
        kafka,
        DEAD_LETTER.name,
        lambda e: e.consumer == "inventory" and e.key_b64 == b64encode(share.uid.encode()).decode(),
    )
    assert letters[0].event.source_topic == PODS.name and "missing header" in letters[0].event.reason
    [pod_input] = await wait_for(kafka, DECISION_INPUTS.name, about(share.name))
    assert pod_input.partition == CELL and pod_input.event.pod.uid == share.uid

    # Telemetry: device 0 unhealthy → the effective node goes to the cell; spot notice → draining.
    deadline = t + timedelta(seconds=120)
    await publish(
        kafka,
        GpuTelemetry(
            node=node,
            sampled_at=t + timedelta(seconds=2),
            devices=(
                GpuDeviceSample(index=0, utilization_pct=0, memory_used_mib=0, healthy=False),
                GpuDeviceSample(index=1, utilization_pct=40, memory_used_mib=2048),
            ),
        ),
        SpotInterruptionNotice(node=node, issued_at=t + timedelta(seconds=3), deadline=deadline, provider="aws"),
    )
    # Telemetry and spot notices come from two topics: the cell may get them in either order, and
    # the notice may reach the cell before the telemetry's effect on the node does.
    [unhealthy] = await wait_for(
        kafka,
        DECISION_INPUTS.name,
        lambda e: (
            isinstance(e, NodeObserved) and e.node.name == node and [d.healthy for d in e.node.gpus] == [False, True]
        ),
    )
    [notice] = await wait_for(
        kafka, DECISION_INPUTS.name, lambda e: isinstance(e, SpotInterruptionNotice) and e.node == node
    )
    assert unhealthy.partition == CELL and notice.partition == CELL
    # The state published once both have been folded (either may have been published alone first).
    states = await wait_for(
        kafka,
        INVENTORY_STATE.name,
        lambda e: (
            e.node.name == node and e.draining_until is not None and [d.healthy for d in e.devices] == [False, True]
        ),
    )
    state = states[0].event
    assert state.draining_until == deadline and state.cell == CELL
    assert [(d.index, d.free_milli, d.healthy) for d in state.devices] == [(0, 1000, False), (1, 750, True)]
    assert [a.pod_uid for a in state.allocations] == [share.uid]
    assert states[0].decoded.partition_key == node  # compacted by node name

    # Policies other than PodGroups reach every cell.
    priority = unique("prio")
    await publish(
        kafka,
        PolicyObserved(kind="PriorityClass", priority_class=PriorityClassInfo(name=priority, value=5), observed_at=t),
    )
    broadcast = await wait_for(kafka, DECISION_INPUTS.name, about(priority), count=2)
    assert sorted(item.partition for item in broadcast) == [0, 1]

    # Time reaches every cell, whether anything happens there or not.
    ticks = await wait_for(kafka, DECISION_INPUTS.name, lambda e: isinstance(e, CellTick) and e.issued_at >= t, count=4)
    assert {item.partition for item in ticks} == {0, 1}
    assert service.is_alive()


async def test_restart_rebuilds_node_and_pod_state_from_the_changelogs(kafka, supervisor, tmp_path):
    service = start_inventory(supervisor, tmp_path / "data")
    node = unique("node")
    t = now()
    first = bound_pod(unique("first"), node, devices=(0,))
    await publish(
        kafka,
        NodeObserved(node=gpu_node(node), observed_at=t),
        PodObserved(pod=first, observed_at=t + timedelta(seconds=1)),
    )
    await wait_for(kafka, INVENTORY_STATE.name, lambda e: e.node.name == node and len(e.allocations) == 1)

    service.stop()
    assert service.popen.returncode == 0, "SIGTERM must stop the service cleanly"
    start_inventory(supervisor, tmp_path / "data-after-restart")  # empty local store: changelogs only

    second = bound_pod(unique("second"), node, devices=(1,), milli=500)
    await publish(kafka, PodObserved(pod=second, observed_at=t + timedelta(seconds=2)))
    # The node's allocations from before the restart are still there (waited for before the
    # deletion: the node stage publishes a node once per batch, so a batch holding both would
    # not show this state), then the first pod's deletion (which names no node: only the
    # rebuilt pod-routes table knows it) releases device 0.
    both = await wait_for(kafka, INVENTORY_STATE.name, lambda e: e.node.name == node and len(e.allocations) == 2)
    assert [d.free_milli for d in both[0].event.devices] == [0, 500]
    await publish(
        kafka, PodDeleted(uid=first.uid, namespace="ml", name=first.name, observed_at=t + timedelta(seconds=3))
    )
    after = await wait_for(
        kafka,
        INVENTORY_STATE.name,
        lambda e: e.node.name == node and [a.pod_uid for a in e.allocations] == [second.uid],
    )
    assert [d.free_milli for d in after[0].event.devices] == [1000, 500]
    [deleted] = await wait_for(
        kafka, DECISION_INPUTS.name, lambda e: e.type == "io.berth.cluster.pod-deleted.v1" and e.uid == first.uid
    )
    assert deleted.partition == CELL


async def test_two_workers_share_the_nodes_and_one_takes_over_when_the_other_leaves(kafka, supervisor, tmp_path):
    from berth_dev.devstack import procs
    from berth_dev.supervisor import ServiceProcess

    start_inventory(supervisor, tmp_path / "a")
    # A second member of the group (the supervisor keys services by name, so start it by hand).
    [port] = procs.free_ports(1)
    second = ServiceProcess(
        "inventory", ["run", "--data-dir", str(tmp_path / "b")], tmp_path / "b.log", supervisor.env, port
    )
    try:
        second.start()
        second.wait_ready(90)
        names = [unique("node") for _ in range(16)]
        t = now()

        async def bind_everywhere(device: int, timeout: float = 90) -> None:
            events: list[Any] = [NodeObserved(node=gpu_node(name), observed_at=t) for name in names if device == 0]
            events += [
                PodObserved(
                    pod=bound_pod(f"p{device}", name, devices=(device,)), observed_at=t + timedelta(seconds=device + 1)
                )
                for name in names
            ]
            await publish(kafka, *events)
            found = await wait_for(
                kafka,
                INVENTORY_STATE.name,
                lambda e: e.node.name in names and len(e.allocations) == device + 1,
                count=len(names),
                timeout=timeout,
            )
            assert {item.event.node.name for item in found} == set(names)

        await bind_everywhere(0)
        routed_by_second = second.log_path.read_text().count('"node routed"')
        assert 0 < routed_by_second < len(names), "both members should own some nodes"
        second.stop()
        assert second.popen.returncode == 0
        # The first worker now owns every partition, its nodes' state restored from the changelogs.
        # The takeover waits for the group to rebalance and the tables' recovery, which a loaded
        # 2-core CI machine once stretched past 90 s.
        await bind_everywhere(1, timeout=240)
    finally:
        second.stop()
