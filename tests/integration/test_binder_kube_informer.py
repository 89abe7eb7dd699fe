"""The Kubernetes backend's node informer and its one-request unschedulable reports, on a real
kube-apiserver 1.34 (``kube_apiserver``): what each binding and report costs in API requests.

Every request takes a token from the backend's limiter; the informer's own LIST and WATCH
requests are counted by the backend (``backend.informer_requests``), so ``limiter.taken -
backend.informer_requests`` is what the operations themselves sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import test_binder_kube_backend as backend_tests
from berth.schemas import PodPlacement
from berth.services.binder.kube_backend import KubeBackend
from berth.services.binder.ports import OutcomeKind
from berth_dev.devstack.fakenodes import create_fake_nodes
from berth_dev.devstack.kube import KubeConnection
from kubernetes.client import ApiClient, CoreV1Api
from test_binder_kube_backend import MESSAGE
from test_binder_kube_backend import CountingBucket as Tokens

pytestmark = pytest.mark.integration

# The backend tests' apiserver client and namespace fixtures, shared by binding them here.
api = backend_tests.api
namespace = backend_tests.namespace

APPLIED, CONFLICT = OutcomeKind.APPLIED, OutcomeKind.CONFLICT


@pytest_asyncio.fixture(loop_scope="function")
async def backend(kube_apiserver: KubeConnection) -> AsyncIterator[KubeBackend]:
    cluster = KubeBackend(
        kube_apiserver.api_client(pool_size=6),
        limiter=Tokens(),
        event_limiter=Tokens(),
        workers=4,
        instance="berth-binder-informer-test",
    )
    await cluster.start()
    assert cluster.informer is not None and cluster.informer.cache.synced
    yield cluster
    await cluster.close()


def own_requests(backend: KubeBackend) -> int:
    """Main-limiter requests sent by the operations, not by the informer."""
    assert backend.informer is not None
    return backend.limiter.taken - backend.informer_requests


def make_pod(api: ApiClient, namespace: str, name: str) -> str:
    body = {
        "metadata": {"name": name},
        "spec": {"schedulerName": "berth", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    return CoreV1Api(api).create_namespaced_pod(namespace, body).metadata.uid


def placement(namespace: str, name: str, uid: str, node: str) -> PodPlacement:
    return PodPlacement(pod_uid=uid, namespace=namespace, name=name, node=node, gpu_devices=(0,))


async def until(check, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s"
        await asyncio.sleep(0.05)


def pod_scheduled(api: ApiClient, namespace: str, name: str):
    pod = CoreV1Api(api).read_namespaced_pod(name, namespace)
    return pod.spec.node_name, next(c for c in pod.status.conditions if c.type == "PodScheduled")


async def test_a_node_created_after_start_is_bound_to_and_then_served_from_the_cache(api, namespace, backend):
    [node] = create_fake_nodes(api, 1, prefix=f"late-{uuid.uuid4().hex[:6]}-")
    first = make_pod(api, namespace, "first")
    # Right after creation the watch may not have delivered the node yet: then one GET decides.
    assert (await backend.bind(placement(namespace, "first", first, node))).kind is APPLIED
    assert own_requests(backend) in (1, 2)  # the binding, and at most one GET of the node
    await until(lambda: backend.informer.cache.knows(node) is True, "the watch delivering the node")
    before = own_requests(backend)
    second = make_pod(api, namespace, "second")
    assert (await backend.bind(placement(namespace, "second", second, node))).kind is APPLIED
    assert own_requests(backend) - before == 1  # the binding alone
    assert CoreV1Api(api).read_namespaced_pod("second", namespace).spec.node_name == node


async def test_a_deleted_node_is_a_conflict_without_any_request(api, namespace, backend):
    [node] = create_fake_nodes(api, 1, prefix=f"gone-{uuid.uuid4().hex[:6]}-")
    await until(lambda: backend.informer.cache.knows(node) is True, "the watch delivering the node")
    CoreV1Api(api).delete_node(node)
    await until(lambda: backend.informer.cache.knows(node) is False, "the watch delivering the deletion")
    before = own_requests(backend)
    for name in ("a", "b", "c"):
        uid = make_pod(api, namespace, name)
        outcome = await backend.bind(placement(namespace, name, uid, node))
        assert outcome.kind is CONFLICT and f'nodes "{node}" not found' in outcome.reason
        assert CoreV1Api(api).read_namespaced_pod(name, namespace).spec.node_name is None
    assert own_requests(backend) == before


async def test_a_report_is_one_patch_and_a_message_change_another(api, namespace, backend):
    make_pod(api, namespace, "waiting")
    before = own_requests(backend)
    assert (await backend.report_unschedulable(namespace, "waiting", None, MESSAGE)).kind is APPLIED
    assert own_requests(backend) - before == 1
    _, condition = pod_scheduled(api, namespace, "waiting")
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", MESSAGE)
    first_transition = condition.last_transition_time

    changed = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable."
    await asyncio.sleep(1.1)  # a new lastTransitionTime would differ by at least a second
    assert (await backend.report_unschedulable(namespace, "waiting", None, changed)).kind is APPLIED
    assert own_requests(backend) - before == 2
    _, condition = pod_scheduled(api, namespace, "waiting")
    assert (condition.message, condition.last_transition_time) == (changed, first_transition)
    same = await backend.report_unschedulable(namespace, "waiting", None, changed)
    assert (same.kind, same.reason, own_requests(backend) - before) == (APPLIED, "already reported", 2)
    await backend.flush_events()
    events = [e for e in CoreV1Api(api).list_namespaced_event(namespace).items if e.reason == "FailedScheduling"]
    assert sorted(e.message for e in events) == sorted([MESSAGE, changed])


async def test_a_binding_that_lands_first_is_never_marked_unschedulable(api, namespace, backend):
    uid = make_pod(api, namespace, "raced")
    assert (await backend.report_unschedulable(namespace, "raced", None, MESSAGE)).kind is APPLIED
    [node] = create_fake_nodes(api, 1, prefix=f"race-{uuid.uuid4().hex[:6]}-")
    # Another client binds the pod: this backend's memory of the pod is now stale.
    CoreV1Api(api).create_namespaced_pod_binding(
        "raced",
        namespace,
        {"metadata": {"name": "raced", "uid": uid}, "target": {"kind": "Node", "name": node}},
        _preload_content=False,
    )
    late = await backend.report_unschedulable(namespace, "raced", None, "0/3 nodes are available: 3 Too many pods.")
    assert late.kind is APPLIED and "meanwhile" in late.reason
    bound_to, condition = pod_scheduled(api, namespace, "raced")
    assert (bound_to, condition.status) == (node, "True")


async def test_a_recreated_pod_is_a_conflict_for_a_report_with_the_old_uid(api, namespace, backend):
    make_pod(api, namespace, "reborn")
    CoreV1Api(api).delete_namespaced_pod("reborn", namespace, grace_period_seconds=0)
    await until(
        lambda: not [p for p in CoreV1Api(api).list_namespaced_pod(namespace).items if p.metadata.name == "reborn"],
        "the pod being gone",
    )
    make_pod(api, namespace, "reborn")
    outcome = await backend.report_unschedulable(namespace, "reborn", "uid-of-the-first-pod", MESSAGE)
    assert outcome.kind is CONFLICT and "UID in precondition" in outcome.reason
    assert not CoreV1Api(api).read_namespaced_pod("reborn", namespace).status.conditions
