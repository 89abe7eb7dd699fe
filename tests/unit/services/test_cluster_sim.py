"""The cluster simulator without Kafka: its API semantics (aiohttp test client) and the player."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from berth.schemas import (
    NodeObserved,
    NodeRemoved,
    PodDeleted,
    PodObserved,
    PolicyObserved,
    QueueLagObserved,
    SpotInterruptionNotice,
)
from berth.schemas.samples import T0, h100_node
from berth_dev.cluster_sim.api import make_app
from berth_dev.cluster_sim.clock import SimClock
from berth_dev.cluster_sim.outbox import RecordingSink
from berth_dev.cluster_sim.player import WorkloadPlayer
from berth_dev.cluster_sim.state import ClusterState
from berth_dev.workloads import AgentPool, from_documents
from berth_dev.workloads.generate import pod_manifest

POOL = AgentPool("serving", "chat", {"replicas": 2, "gpuRequirements": {"count": 1}})


def pending(name: str, gpus: int = 1, **extra):
    from berth.schemas import PodInfo

    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": gpus},
        creation_time=T0,
        **extra,
    )


@pytest.fixture
def state() -> ClusterState:
    state = ClusterState()
    state.add_node(h100_node("node-a"), T0)
    state.add_node(h100_node("node-b", spot=True), T0)
    state.create_pod(pending("p1"), T0)
    state.add_pool(POOL, T0)
    return state


@pytest_asyncio.fixture(loop_scope="function")  # the test's own loop (the default here is the session's)
async def api(state: ClusterState):
    sink = RecordingSink()
    app = make_app(state, sink, SimClock(start=T0))
    async with TestClient(TestServer(app)) as client:
        client.sink = sink  # type: ignore[attr-defined]  # a test's attribute on the client
        yield client


def binding(node: str, uid: str | None = "uid-p1", devices: str | None = "0") -> dict:
    metadata: dict = {"name": "p1", "namespace": "ml", "annotations": {}}
    if uid:
        metadata["uid"] = uid
    if devices is not None:
        metadata["annotations"]["berth.io/gpu-devices"] = devices
    return {"apiVersion": "v1", "kind": "Binding", "metadata": metadata, "target": {"kind": "Node", "name": node}}


BIND = "/api/v1/namespaces/ml/pods/p1/binding"


# --- binding -------------------------------------------------------------------------------------


async def test_bind_publishes_the_bound_pod(api):
    response = await api.post(BIND, json=binding("node-a", devices="2,3"))
    assert response.status == 201
    [event] = api.sink.events
    assert isinstance(event, PodObserved)
    assert (event.pod.node_name, event.pod.gpu_devices, event.pod.phase) == ("node-a", (2, 3), "Running")
    assert event.pod.annotations["berth.io/gpu-devices"] == "2,3"
    pod = await (await api.get("/api/v1/namespaces/ml/pods/p1")).json()
    assert pod["spec"]["nodeName"] == "node-a" and pod["metadata"]["uid"] == "uid-p1"
    assert int(pod["metadata"]["resourceVersion"]) == int(event.resource_version)


async def test_binding_twice_is_a_conflict_and_publishes_nothing(api):
    assert (await api.post(BIND, json=binding("node-a"))).status == 201
    again = await api.post(BIND, json=binding("node-a"))
    body = await again.json()
    assert again.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "node-a"'
    )
    assert len(api.sink.events) == 1


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        (
            BIND,
            binding("node-a", uid="uid-old"),
            409,
            "Precondition failed: UID in precondition: uid-old, UID in object meta: uid-p1",
        ),
        ("/api/v1/namespaces/ml/pods/ghost/binding", binding("node-a"), 404, 'pods "ghost" not found'),
        (BIND, binding("node-z"), 409, 'node "node-z" not found'),
        (BIND, binding("node-a", devices="0,9"), 422, "has no GPU device(s) [9]"),
        (BIND, {"kind": "Binding", "metadata": {}, "target": {}}, 422, "target.name: Required value"),
    ],
)
async def test_binding_refusals(api, path, body, status, message):
    response = await api.post(path, json=body)
    assert response.status == status
    assert message in (await response.json())["message"]
    assert api.sink.events == []


async def test_overcommitted_binds_are_counted(api, state):
    state.create_pod(pending("big", gpus=8), T0)
    big = {
        "kind": "Binding",
        "metadata": {"uid": "uid-big", "annotations": {"berth.io/gpu-devices": "0,1,2,3,4,5,6,7"}},
        "target": {"name": "node-a"},
    }
    assert (await api.post("/api/v1/namespaces/ml/pods/big/binding", json=big)).status == 201
    assert state.counters.overcommitted_binds == 0
    assert (await api.post(BIND, json=binding("node-a", devices="7"))).status == 201
    assert state.counters.overcommitted_binds == 1


# --- eviction, deletion, nodes -------------------------------------------------------------------


async def test_evict_deletes_and_publishes(api, state):
    await api.post(BIND, json=binding("node-b"))
    eviction = {"kind": "Eviction", "deleteOptions": {"preconditions": {"uid": "uid-p1"}}}
    response = await api.post("/api/v1/namespaces/ml/pods/p1/eviction", json=eviction)
    assert response.status == 201
    deleted = api.sink.of_type(PodDeleted)
    assert [(e.uid, e.node_name) for e in deleted] == [("uid-p1", "node-b")]
    assert (await api.post("/api/v1/namespaces/ml/pods/p1/eviction", json=eviction)).status == 404
    state.create_pod(pending("p1").model_copy(update={"uid": "uid-new"}), T0)
    wrong = await api.post("/api/v1/namespaces/ml/pods/p1/eviction", json=eviction)
    assert wrong.status == 409 and "ml/p1" in state.pods


async def test_cordon_publishes_once(api):
    patch = {"spec": {"unschedulable": True}}
    response = await api.patch("/api/v1/nodes/node-b", json=patch)
    assert response.status == 200 and (await response.json())["spec"]["unschedulable"] is True
    assert (await api.patch("/api/v1/nodes/node-b", json=patch)).status == 200
    [event] = api.sink.of_type(NodeObserved)
    assert event.node.name == "node-b" and event.node.unschedulable
    assert (await api.patch("/api/v1/nodes/nope", json=patch)).status == 404
    assert (await api.patch("/api/v1/nodes/node-b", json={"spec": {"taints": []}})).status == 400


async def test_removing_a_node_deletes_its_pods(api, state):
    await api.post(BIND, json=binding("node-b"))
    assert (await api.delete("/api/v1/nodes/node-b")).status == 200
    kinds = [type(e).__name__ for e in api.sink.events[1:]]
    assert kinds == ["NodeRemoved", "PodDeleted"]
    assert "node-b" not in state.nodes and "ml/p1" not in state.pods
    assert (await api.get("/api/v1/nodes/node-b")).status == 404


async def test_create_pod_from_a_manifest(api, state):
    manifest = pod_manifest("web", "ml", requests={"cpu": "2", "memory": "4Gi"})
    response = await api.post("/api/v1/namespaces/ml/pods", json=manifest)
    assert response.status == 201
    [event] = api.sink.of_type(PodObserved)
    assert event.pod.key == "ml/web" and event.pod.requests["cpu"] == 2000 and event.pod.node_name is None
    assert (await api.post("/api/v1/namespaces/ml/pods", json=manifest)).status == 409
    bad = pod_manifest("bad", "ml", requests={"cpu": "lots"})
    assert (await api.post("/api/v1/namespaces/ml/pods", json=bad)).status == 422


# --- pools ---------------------------------------------------------------------------------------

SCALE = "/apis/berth.io/v1alpha1/namespaces/serving/agentpools/chat/scale"


async def test_scale_creates_and_removes_replicas(api, state):
    assert sorted(k for k, r in state.pods.items() if r.pool) == ["serving/chat-0", "serving/chat-1"]
    response = await api.patch(SCALE, json={"spec": {"replicas": 4}})
    assert response.status == 200 and (await response.json())["status"]["replicas"] == 4
    created = [e.pod.name for e in api.sink.of_type(PodObserved)]
    assert created == ["chat-2", "chat-3"]
    assert all(e.pod.scheduler_name == "berth" and e.pod.whole_gpus == 1 for e in api.sink.of_type(PodObserved))
    # bind chat-3, then scale down to 1: unbound replicas go first, newest first
    state.bind("serving", "chat-3", "node-a", T0)
    await api.patch(SCALE, json={"spec": {"replicas": 1}})
    assert sorted(k for k, r in state.pods.items() if r.pool) == ["serving/chat-3"]
    assert [e.name for e in api.sink.of_type(PodDeleted)] == ["chat-2", "chat-1", "chat-0"]
    assert (await api.patch(SCALE.replace("chat", "nope"), json={"spec": {"replicas": 1}})).status == 404
    assert (await api.patch(SCALE, json={"spec": {"replicas": "two"}})).status == 400
    assert (await (await api.get(SCALE)).json())["spec"]["replicas"] == 1


async def test_a_pool_replaces_evicted_replicas_with_new_names(state):
    result = state.evict("serving", "chat-0", T0)
    assert result.status == 201
    assert [type(e).__name__ for e in result.events] == ["PodDeleted", "PodObserved"]
    assert result.events[1].pod.name == "chat-2"


async def test_status_counts(api, state):
    await api.post(BIND, json=binding("node-a"))
    assert state.mark_decided("serving/chat-0", unschedulable=True) == 1
    status = await (await api.get("/status")).json()
    assert status == {"nodes": 2, "pods": 3, "pending": 2, "bound": 1, "unschedulable": 1, "undecided": 1}


def test_gang_decisions_mark_every_pending_member():
    state = ClusterState()
    for i in range(3):
        state.create_pod(pending(f"w{i}", pod_group="train"), T0)
    state.create_pod(pending("other"), T0)
    assert state.mark_decided("ml/train", unschedulable=True) == 3
    assert state.counts()["undecided"] == 1
    state.mark_decided("ml/train", unschedulable=False)
    assert state.counts()["undecided"] == 4


# --- the player ----------------------------------------------------------------------------------

TIMELINE = {
    "apiVersion": "sim.berth.io/v1alpha1",
    "kind": "Timeline",
    "metadata": {"name": "t"},
    "spec": {
        "spotNotices": [{"node": "n-1", "atSeconds": 5, "noticeSeconds": 30}],
        "queueLag": [{"pool": "chat", "namespace": "ml", "atSeconds": 1, "tokensInQueue": 500, "tokenRate": 10}],
    },
}


def small_workload():
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n-{i}"},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}},
    }
    nodes = [{**node, "metadata": {"name": f"n-{i}"}} for i in range(2)]
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml"},
        "spec": {"minMember": 1},
    }
    pool = {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": {"replicas": 1, "gpuRequirements": {"count": 1}},
    }
    pods = [
        pod_manifest("short", "ml", at_s=2, run_s=10, requests={"cpu": "1", "memory": "1Gi"}),
        pod_manifest("first", "ml", at_s=0, requests={"cpu": "1", "memory": "1Gi"}),
    ]
    return from_documents([*nodes, group, pool, *pods, TIMELINE], name="small")


async def test_player_publishes_cluster_then_plays_the_timeline():
    workload = small_workload()
    state, sink, clock = ClusterState(workload.policies), RecordingSink(), SimClock(None, start=T0)
    player = WorkloadPlayer(workload, state, sink, clock)
    await player.setup()
    kinds = [type(e).__name__ for e in sink.events]
    assert kinds == ["NodeObserved", "NodeObserved", "PolicyObserved", "PodObserved"]  # + the pool's replica
    assert sink.events[3].pod.name == "chat-0"
    task = asyncio.create_task(player.run())
    for _ in range(200):
        if player.played:
            break
        await asyncio.sleep(0.01)
    assert player.played and player.arrived == 2
    arrivals = [e.pod.name for e in sink.of_type(PodObserved)][1:]
    assert arrivals == ["first", "short"]
    [lag] = sink.of_type(QueueLagObserved)
    assert lag.ready_replicas == 0 and lag.observed_at == T0 + timedelta(seconds=1)
    [notice] = sink.of_type(SpotInterruptionNotice)
    assert notice.node == "n-1" and notice.deadline - notice.issued_at == timedelta(seconds=30)
    assert [e.name for e in sink.of_type(NodeRemoved)] == ["n-1"]
    assert clock.seconds() == 35
    # A pod with a run time ends that long after it is bound.
    state.bind("ml", "short", "n-0", clock.now())
    for _ in range(200):
        if sink.of_type(PodDeleted):
            break
        await asyncio.sleep(0.01)
    [deleted] = sink.of_type(PodDeleted)
    assert deleted.name == "short" and deleted.observed_at == T0 + timedelta(seconds=45)
    player.stop()
    await task
    assert isinstance(sink.events[2], PolicyObserved) and sink.events[2].kind == "PodGroup"


async def test_player_waits_for_simulated_time_at_speed():
    workload = small_workload()
    state, sink = ClusterState(workload.policies), RecordingSink()
    player = WorkloadPlayer(workload, state, sink, SimClock(100.0, start=T0))  # 1 s real = 100 s simulated
    await player.setup()
    task = asyncio.create_task(player.run())
    await asyncio.sleep(0.005)
    assert player.arrived == 1  # "first" at 0 s; "short" at 2 s = 20 ms real
    await asyncio.sleep(0.1)
    assert player.arrived == 2
    player.stop()
    await task


# --- the outbox, the clock, the command line -----------------------------------------------------


class _SlowAckProducer:
    """Acknowledges sends in reverse order, to show the outbox still publishes in order."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.acks: list[asyncio.Future[None]] = []

    async def send(self, event):
        self.sent.append(event.name)
        ack = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack


async def test_outbox_sends_in_emit_order_and_resolves_once_acknowledged():
    from berth_dev.cluster_sim.outbox import KafkaOutbox

    producer = _SlowAckProducer()
    outbox = KafkaOutbox(producer)  # type: ignore[arg-type]  # a test double for the producer
    runner = asyncio.create_task(outbox.run())
    first = outbox.emit([NodeRemoved(name="a", observed_at=T0), NodeRemoved(name="b", observed_at=T0)])
    second = outbox.emit([NodeRemoved(name="c", observed_at=T0)])
    while len(producer.acks) < 3:
        await asyncio.sleep(0)
    assert producer.sent == ["a", "b", "c"] and not first.done() and not second.done()
    for ack in reversed(producer.acks):
        ack.set_result(None)
    await asyncio.wait_for(asyncio.gather(first, second), timeout=1)
    await outbox.drain()
    assert outbox.published == 3
    runner.cancel()


async def test_clock_maps_simulated_seconds_to_event_time():
    ticks = [100.0]
    clock = SimClock(10.0, start=T0, monotonic=lambda: ticks[0])
    ticks[0] = 101.5
    assert clock.seconds() == 15.0 and clock.now() == T0 + timedelta(seconds=15)
    fast = SimClock(None, start=T0)
    assert await fast.wait_until(42.0, asyncio.Event()) and fast.seconds() == 42.0
    with pytest.raises(ValueError):
        SimClock(0)


def test_cli_generate_writes_loadable_manifests_and_pools(tmp_path):
    import yaml
    from berth_dev.cluster_sim.cli import app
    from berth_dev.workloads import load_workload
    from typer.testing import CliRunner

    out, pools = tmp_path / "bench.yaml", tmp_path / "pools.yaml"
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "bench:3",
            "--out",
            str(out),
            "--nodes",
            "4",
            "--pods",
            "10",
            "--rate",
            "5",
            "--pools-out",
            str(pools),
        ],
    )
    assert result.exit_code == 0, result.output
    workload = load_workload(out)
    assert len(workload.nodes) == 4 and len(workload.pods) == 10 and workload.pods[-1].at_s == pytest.approx(1.8)
    assert yaml.safe_load(pools.read_text()) == {"pools": {}}
    both = CliRunner().invoke(app, ["run", "--workload", str(out), "--generate", "demo"])
    assert both.exit_code == 2 and "exactly one of --workload" in both.output
    bad = CliRunner().invoke(app, ["run", "--generate", "chaos"])
    assert bad.exit_code == 2 and "unknown generator" in bad.output
