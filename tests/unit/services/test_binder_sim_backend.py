"""The binder's simulator backend against the simulator's API, in process: HTTP answers → outcomes."""

from __future__ import annotations

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from berth.schemas import PodInfo, PodPlacement
from berth.schemas.samples import T0, h100_node
from berth.services.binder.ports import OutcomeKind
from berth_dev.binder.sim_backend import SimulatorBackend
from berth_dev.cluster_sim.api import make_app
from berth_dev.cluster_sim.clock import SimClock
from berth_dev.cluster_sim.outbox import RecordingSink
from berth_dev.cluster_sim.state import ClusterState
from berth_dev.workloads import AgentPool

APPLIED, CONFLICT = OutcomeKind.APPLIED, OutcomeKind.CONFLICT
RETRYABLE, PERMANENT = OutcomeKind.RETRYABLE, OutcomeKind.PERMANENT


def pod(name: str, uid: str | None = None) -> PodInfo:
    return PodInfo(
        uid=uid or f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        requests={"nvidia.com/gpu": 1},
        creation_time=T0,
    )


def placement(name: str, node: str = "node-a", uid: str | None = None, devices=(0,)) -> PodPlacement:
    return PodPlacement(pod_uid=uid or f"uid-{name}", namespace="ml", name=name, node=node, gpu_devices=devices)


@pytest_asyncio.fixture(loop_scope="function")
async def sim():
    state = ClusterState()
    for name in ("node-a", "node-b"):
        state.add_node(h100_node(name), T0)
    for name in ("p1", "p2"):
        state.create_pod(pod(name), T0)
    state.add_pool(AgentPool("serving", "chat", {"replicas": 1}), T0)
    sink = RecordingSink()
    server = TestServer(make_app(state, sink, SimClock(start=T0)))
    await server.start_server()
    backend = SimulatorBackend(str(server.make_url("")))
    yield backend, state, sink
    await backend.close()
    await server.close()


async def test_bind_and_rebind(sim):
    backend, state, sink = sim
    first = await backend.bind(placement("p1", devices=(3,)))
    assert first.kind is APPLIED and state.pods["ml/p1"].pod.gpu_devices == (3,)
    again = await backend.bind(placement("p1", devices=(3,)))
    assert (again.kind, again.reason) == (APPLIED, "already bound")
    assert len([e for e in sink.events if getattr(e, "pod", None) and e.pod.name == "p1"]) == 1


@pytest.mark.parametrize(
    "target, kind, words",
    [
        (placement("p1", node="node-b"), CONFLICT, "already assigned to node 'node-a'"),
        (placement("p1", uid="uid-stale"), CONFLICT, "UID in precondition: uid-stale"),
        (placement("ghost"), CONFLICT, 'pods "ghost" not found'),
    ],
)
async def test_bind_conflicts(sim, target, kind, words):
    backend, _, _ = sim
    assert (await backend.bind(placement("p1"))).kind is APPLIED
    outcome = await backend.bind(target)
    assert outcome.kind is kind and words in outcome.reason


async def test_bind_to_a_missing_node_keeps_the_servers_reason(sim):
    backend, _, _ = sim
    outcome = await backend.bind(placement("p2", node="node-gone"))
    assert outcome.kind is CONFLICT and 'node "node-gone" not found' in outcome.reason


async def test_invalid_binding_is_permanent(sim):
    backend, _, _ = sim
    outcome = await backend.bind(placement("p2", devices=(42,)))
    assert outcome.kind is PERMANENT and "no GPU device(s) [42]" in outcome.reason


async def test_check_bind(sim):
    backend, state, _ = sim
    assert (await backend.check_bind(placement("p1"))).kind is APPLIED
    state.bind("ml", "p1", "node-b", T0)
    assert (await backend.check_bind(placement("p1", node="node-b"))).reason == "already bound"
    assert (await backend.check_bind(placement("p1"))).kind is CONFLICT
    assert (await backend.check_bind(placement("nobody"))).kind is CONFLICT


async def test_evict_scale_cordon(sim):
    backend, state, _ = sim
    assert (await backend.evict("ml", "p1", "uid-wrong")).kind is CONFLICT
    assert (await backend.evict("ml", "p1", "uid-p1")).kind is APPLIED and "ml/p1" not in state.pods
    gone = await backend.evict("ml", "p1", "uid-p1")
    assert (gone.kind, gone.reason) == (APPLIED, "already gone")
    assert (await backend.scale("serving", "chat", 3)).kind is APPLIED
    assert sum(1 for r in state.pods.values() if r.pool == "serving/chat") == 3
    assert (await backend.scale("serving", "nope", 3)).kind is CONFLICT
    assert (await backend.cordon("node-b")).kind is APPLIED and state.nodes["node-b"].unschedulable
    assert (await backend.cordon("node-b")).kind is APPLIED
    assert (await backend.cordon("node-x")).kind is CONFLICT


async def test_unreachable_and_server_errors_are_retryable():
    unreachable = SimulatorBackend("http://127.0.0.1:9", timeout_s=2)
    outcome = await unreachable.cordon("node-a")
    await unreachable.close()
    assert outcome.kind is RETRYABLE and "unreachable" in outcome.reason

    async def overloaded(_: web.Request) -> web.Response:
        return web.json_response(
            {"kind": "Status", "message": "etcdserver: request timed out", "code": 503}, status=503
        )

    async def throttled(_: web.Request) -> web.Response:
        return web.Response(status=429, text="Too many requests")

    app = web.Application()
    app.router.add_patch("/api/v1/nodes/{name}", overloaded)
    app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/eviction", throttled)
    server = TestServer(app)
    await server.start_server()
    backend = SimulatorBackend(str(server.make_url("")))
    try:
        busy = await backend.cordon("node-a")
        assert (busy.kind, busy.reason) == (RETRYABLE, "etcdserver: request timed out")
        assert (await backend.evict("ml", "p1")).kind is RETRYABLE  # a PDB says not now
    finally:
        await backend.close()
        await server.close()
