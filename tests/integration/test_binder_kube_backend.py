"""The binder's Kubernetes backend against a real kube-apiserver 1.34 (``kube_apiserver``), and
``berth binder run --backend kube`` end to end with a real broker (``kafka_bootstrap``).

Nodes are plain API objects (no kubelet), pods use ``schedulerName: berth``; each test works in a
namespace and on nodes of its own. Without kube-controller-manager a PodDisruptionBudget is never
"processed", so the Eviction API refuses (429) every eviction it covers — exactly the "budget
blocks" case; pods are marked Running and Ready by hand so that the budget applies at all.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from berth.schemas import CommandResult, DecisionRecord, InputPosition, PlacePods, PodPlacement
from berth.schemas.topics import DECISIONS, RESULTS
from berth.services.binder.kube_backend import KubeBackend
from berth.services.binder.ports import KeepIf, OutcomeKind, Preemptor
from berth.services.binder.ratelimit import TokenBucket
from berth_dev.devstack.fakenodes import create_fake_nodes
from berth_dev.devstack.kube import KubeConnection
from berth_dev.supervisor import Supervisor
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, PolicyV1Api
from test_binder_service import _end_offsets, _park_group_at_end, _publish, _result_of, read_from, unique

from berth.bus import EventProducer, ensure_topics
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration

APPLIED, CONFLICT = OutcomeKind.APPLIED, OutcomeKind.CONFLICT
RETRYABLE, PERMANENT = OutcomeKind.RETRYABLE, OutcomeKind.PERMANENT
AGENTPOOL_CRD = Path(__file__).resolve().parents[2] / "deploy/helm/berth/crds/agentpools.berth.io.yaml"
MESSAGE = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


class CountingBucket(TokenBucket):
    """Unlimited, but counts the tokens taken (one per API request)."""

    def __init__(self) -> None:
        super().__init__(0, 1)
        self.taken = 0

    async def acquire(self, *, deferrable: bool = False) -> None:
        self.taken += 1


@pytest.fixture(scope="module")
def api(kube_apiserver: KubeConnection) -> Iterator[ApiClient]:
    with kube_apiserver.api_client() as client:
        yield client


@pytest.fixture
def namespace(api: ApiClient) -> str:
    name = f"binder-{uuid.uuid4().hex[:10]}"
    CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def nodes(api: ApiClient) -> list[str]:
    return create_fake_nodes(api, 2, prefix=f"bk-{uuid.uuid4().hex[:6]}-")


@pytest_asyncio.fixture(loop_scope="function")
async def backend(kube_apiserver: KubeConnection) -> AsyncIterator[KubeBackend]:
    cluster = KubeBackend(
        kube_apiserver.api_client(pool_size=4),
        limiter=CountingBucket(),
        event_limiter=CountingBucket(),
        workers=4,
        instance="berth-binder-test",
    )
    yield cluster
    await cluster.close()


def make_pod(api: ApiClient, namespace: str, name: str, labels: dict[str, str] | None = None) -> str:
    """A pending pod for Berth; returns its UID."""
    body = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"schedulerName": "berth", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    return CoreV1Api(api).create_namespaced_pod(namespace, body).metadata.uid


def placement(
    namespace: str, name: str, uid: str, node: str, devices: tuple[int, ...] = (0,), milli: int | None = None
) -> PodPlacement:
    return PodPlacement(pod_uid=uid, namespace=namespace, name=name, node=node, gpu_devices=devices, gpu_milli=milli)


def events_of(api: ApiClient, namespace: str, pod: str, reason: str) -> list[Any]:
    return [
        e
        for e in CoreV1Api(api).list_namespaced_event(namespace).items
        if e.involved_object.name == pod and e.reason == reason
    ]


def read_pod(api: ApiClient, namespace: str, name: str) -> Any:
    return CoreV1Api(api).read_namespaced_pod(name, namespace)


# -- bind -----------------------------------------------------------------------------------------


async def test_bind_sets_the_node_copies_the_devices_and_writes_a_scheduled_event(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "solo")
    outcome = await backend.bind(placement(namespace, "solo", uid, nodes[0], devices=(1, 3), milli=None))
    assert outcome.kind is APPLIED
    pod = read_pod(api, namespace, "solo")
    assert pod.spec.node_name == nodes[0]
    assert pod.metadata.annotations["berth.io/gpu-devices"] == "1,3"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    await backend.flush_events()  # events are written in the background
    [event] = events_of(api, namespace, "solo", "Scheduled")
    assert (event.type, event.message) == ("Normal", f"Successfully assigned {namespace}/solo to {nodes[0]}")
    assert event.reporting_component == "berth"
    # Each request took a token: the POST binding from the main limiter (the node came from the
    # node informer, whose LIST and WATCH took theirs), the event from its own limiter (as
    # kube-scheduler's event client has its own).
    assert backend.informer is not None and backend.informer.cache.knows(nodes[0]) is True
    assert (backend.limiter.taken - backend.informer_requests, backend.event_limiter.taken) == (1, 1)


async def test_a_fractional_pod_gets_its_share_annotated(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "shared")
    assert (await backend.bind(placement(namespace, "shared", uid, nodes[0], devices=(2,), milli=250))).kind is APPLIED
    annotations = read_pod(api, namespace, "shared").metadata.annotations
    assert (annotations["berth.io/gpu-devices"], annotations["berth.io/gpu-milli"]) == ("2", "250")


async def test_bind_with_a_stale_uid_is_a_conflict_and_binds_nothing(api, namespace, nodes, backend):
    make_pod(api, namespace, "recreated")
    outcome = await backend.bind(placement(namespace, "recreated", "uid-of-an-older-pod", nodes[0]))
    assert outcome.kind is CONFLICT and "UID in precondition: uid-of-an-older-pod" in outcome.reason
    assert read_pod(api, namespace, "recreated").spec.node_name is None
    await backend.flush_events()  # events are written in the background
    assert events_of(api, namespace, "recreated", "Scheduled") == []


async def test_binding_twice_to_the_same_node_is_applied_with_one_event(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "twice")
    target = placement(namespace, "twice", uid, nodes[0])
    assert (await backend.bind(target)).kind is APPLIED
    again = await backend.bind(target)
    assert (again.kind, again.reason) == (APPLIED, "already bound")
    await backend.flush_events()  # events are written in the background
    assert len(events_of(api, namespace, "twice", "Scheduled")) == 1
    assert (await backend.check_bind(target)).reason == "already bound"


async def test_a_pod_bound_elsewhere_is_a_conflict(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "elsewhere")
    assert (await backend.bind(placement(namespace, "elsewhere", uid, nodes[0]))).kind is APPLIED
    moved = placement(namespace, "elsewhere", uid, nodes[1])
    outcome = await backend.bind(moved)
    assert outcome.kind is CONFLICT and f"already assigned to node {nodes[0]!r}" in outcome.reason
    assert (await backend.check_bind(moved)).kind is CONFLICT
    assert read_pod(api, namespace, "elsewhere").spec.node_name == nodes[0]


async def test_a_missing_pod_or_node_is_a_conflict(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "nowhere")
    # The apiserver itself would bind to a node that does not exist; the backend checks first.
    outcome = await backend.bind(placement(namespace, "nowhere", uid, "no-such-node"))
    assert outcome.kind is CONFLICT and 'nodes "no-such-node" not found' in outcome.reason
    assert read_pod(api, namespace, "nowhere").spec.node_name is None
    ghost = await backend.bind(placement(namespace, "ghost", "uid-ghost", nodes[0]))
    assert ghost.kind is CONFLICT and "not found" in ghost.reason
    assert (await backend.check_bind(placement(namespace, "ghost", "uid-ghost", nodes[0]))).kind is CONFLICT


async def test_forbidden_says_which_rule_is_missing(kube_apiserver, api, namespace, nodes):
    uid = make_pod(api, namespace, "forbidden")
    client = kube_apiserver.api_client(pool_size=2)
    # The admin may impersonate: a ServiceAccount nobody granted anything.
    client.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:nobody")
    cluster = KubeBackend(client, limiter=CountingBucket(), workers=2)
    try:
        outcome = await cluster.bind(placement(namespace, "forbidden", uid, nodes[0]))
    finally:
        await cluster.close()
    assert outcome.kind is PERMANENT
    assert 'grant the binder\'s account verb "create" on resource "pods/binding"' in outcome.reason
    assert read_pod(api, namespace, "forbidden").spec.node_name is None


# -- preemption: nominate, evict ------------------------------------------------------------------


def run_and_ready(api: ApiClient, namespace: str, name: str) -> None:
    """What a kubelet would report, so that disruption budgets count the pod."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    CoreV1Api(api).patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            }
        },
        _content_type="application/strategic-merge-patch+json",
    )


async def test_nominate_records_the_node_with_the_uid_as_precondition(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "preemptor")
    assert (await backend.nominate(placement(namespace, "preemptor", uid, nodes[1]))).kind is APPLIED
    assert read_pod(api, namespace, "preemptor").status.nominated_node_name == nodes[1]
    stale = await backend.nominate(placement(namespace, "preemptor", "uid-stale", nodes[0]))
    assert stale.kind is CONFLICT and "re-created" in stale.reason
    assert read_pod(api, namespace, "preemptor").status.nominated_node_name == nodes[1]
    assert (await backend.nominate(placement(namespace, "gone", "uid-gone", nodes[0]))).kind is CONFLICT


async def test_evict_applies_once_and_honours_uid_and_disruption_budgets(api, namespace, nodes, backend):
    free_uid = make_pod(api, namespace, "victim")
    guarded_uid = make_pod(api, namespace, "guarded", labels={"app": "guarded"})
    for name, uid in (("victim", free_uid), ("guarded", guarded_uid)):
        assert (await backend.bind(placement(namespace, name, uid, nodes[0]))).kind is APPLIED
        run_and_ready(api, namespace, name)
    PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )

    wrong = await backend.evict(namespace, "victim", "uid-of-an-older-pod")
    assert wrong.kind is CONFLICT and read_pod(api, namespace, "victim").metadata.deletion_timestamp is None
    assert (await backend.evict(namespace, "victim", free_uid)).kind is APPLIED
    # No kubelet finishes the graceful deletion: the pod stays, terminating.
    assert read_pod(api, namespace, "victim").metadata.deletion_timestamp is not None
    assert (await backend.evict(namespace, "victim", free_uid)).kind is APPLIED
    gone = await backend.evict(namespace, "never-existed", None)
    assert (gone.kind, gone.reason) == (APPLIED, "already gone")

    blocked = await backend.evict(namespace, "guarded", guarded_uid)
    assert blocked.kind is RETRYABLE and blocked.refused and "disruption budget" in blocked.reason
    assert read_pod(api, namespace, "guarded").metadata.deletion_timestamp is None


async def test_evict_leaves_pods_with_the_volumes_a_descheduler_policy_keeps(api, namespace, nodes, backend):
    volumes = {
        "scratch": [{"name": "scratch", "emptyDir": {}}],
        "host": [{"name": "logs", "hostPath": {"path": "/var/log"}}],
        "claim": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "plain": [{"name": "config", "configMap": {"name": "settings"}}],
    }
    uids = {}
    for name, pod_volumes in volumes.items():
        body = {
            "metadata": {"name": name},
            "spec": {
                "schedulerName": "berth",
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                "volumes": pod_volumes,
            },
        }
        uids[name] = CoreV1Api(api).create_namespaced_pod(namespace, body).metadata.uid
        assert (await backend.bind(placement(namespace, name, uids[name], nodes[0]))).kind is APPLIED

    keep = KeepIf(local_storage=True, pvc=True)
    for name in ("scratch", "host"):
        kept = await backend.evict(namespace, name, uids[name], keep_if=keep)
        assert kept.kind is CONFLICT and "local storage" in kept.reason
        assert read_pod(api, namespace, name).metadata.deletion_timestamp is None
    kept = await backend.evict(namespace, "claim", uids["claim"], keep_if=keep)
    assert kept.kind is CONFLICT and "PersistentVolumeClaim" in kept.reason
    assert (await backend.evict(namespace, "plain", uids["plain"], keep_if=keep)).kind is APPLIED
    # The same pods go when the policy evicts local storage and PVC pods.
    for name in ("scratch", "claim"):
        assert (await backend.evict(namespace, name, uids[name], keep_if=KeepIf())).kind is APPLIED
        assert read_pod(api, namespace, name).metadata.deletion_timestamp is not None
    gone = await backend.evict(namespace, "never-existed", None, keep_if=keep)
    assert (gone.kind, gone.reason) == (APPLIED, "already gone")


async def test_a_preemption_victim_is_marked_and_told_who_preempts_it_before_it_is_evicted(
    api, namespace, nodes, backend
):
    victim_uid = make_pod(api, namespace, "low")
    assert (await backend.bind(placement(namespace, "low", victim_uid, nodes[0]))).kind is APPLIED
    assert not [c for c in read_pod(api, namespace, "low").status.conditions or () if c.type == "DisruptionTarget"]
    # Marked (DisruptionTarget, as kube-scheduler v1.34 marks victims; the Eviction API then puts its
    # own reason on the condition) and told who preempts it, then evicted.
    assert (
        await backend.evict(namespace, "low", victim_uid, Preemptor("uid-of-the-preemptor", nodes[0]))
    ).kind is APPLIED
    # Evicting again (as a retry does) neither marks nor tells it twice.
    assert (
        await backend.evict(namespace, "low", victim_uid, Preemptor("uid-of-the-preemptor", nodes[0]))
    ).kind is APPLIED
    await backend.flush_events()
    [event] = events_of(api, namespace, "low", "Preempted")
    assert event.message == f"Preempted by pod uid-of-the-preemptor on node {nodes[0]}"
    assert (event.action, event.type, event.reporting_component) == ("Preempting", "Normal", "berth")
    pod = read_pod(api, namespace, "low")
    assert pod.metadata.deletion_timestamp is not None
    assert [(c.type, c.status) for c in pod.status.conditions or () if c.type == "DisruptionTarget"] == [
        ("DisruptionTarget", "True")
    ]
    # A re-created victim (another UID) is neither marked nor evicted.
    make_pod(api, namespace, "other")
    stale = await backend.evict(namespace, "other", "uid-of-an-older-pod", Preemptor("p", nodes[0]))
    assert stale.kind is CONFLICT
    other = read_pod(api, namespace, "other")
    assert other.metadata.deletion_timestamp is None
    assert not [c for c in other.status.conditions or () if c.type == "DisruptionTarget"]


async def test_a_pod_nominated_for_one_node_and_bound_to_another_loses_its_nomination(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "moved")
    assert (await backend.nominate(placement(namespace, "moved", uid, nodes[1]))).kind is APPLIED
    assert read_pod(api, namespace, "moved").status.nominated_node_name == nodes[1]
    assert (await backend.bind(placement(namespace, "moved", uid, nodes[0]))).kind is APPLIED
    await backend.flush_events()
    pod = read_pod(api, namespace, "moved")
    assert pod.spec.node_name == nodes[0] and pod.status.nominated_node_name is None
    # Bound where it was nominated: nothing to clear.
    stays = make_pod(api, namespace, "stays")
    assert (await backend.nominate(placement(namespace, "stays", stays, nodes[1]))).kind is APPLIED
    assert (await backend.bind(placement(namespace, "stays", stays, nodes[1]))).kind is APPLIED
    assert read_pod(api, namespace, "stays").status.nominated_node_name == nodes[1]


# -- scale, cordon --------------------------------------------------------------------------------


def _install_agentpool_crd(api: ApiClient) -> None:
    from kubernetes.client import ApiextensionsV1Api
    from kubernetes.dynamic import DynamicClient

    if AGENTPOOL_CRD.exists():
        document = yaml.safe_load(AGENTPOOL_CRD.read_text())
    else:  # not written yet: the least that has a scale subresource
        document = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "agentpools.berth.io"},
            "spec": {
                "group": "berth.io",
                "scope": "Namespaced",
                "names": {"plural": "agentpools", "singular": "agentpool", "kind": "AgentPool"},
                "versions": [
                    {
                        "name": "v1alpha1",
                        "served": True,
                        "storage": True,
                        "subresources": {
                            "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
                        },
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        }
    dynamic = DynamicClient(api)
    resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
    dynamic.server_side_apply(resource, body=document, field_manager="berth-binder-tests", force_conflicts=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conditions = ApiextensionsV1Api(api).read_custom_resource_definition("agentpools.berth.io").status.conditions
        if any(c.type == "Established" and c.status == "True" for c in conditions or ()):
            return
        time.sleep(0.2)
    raise AssertionError("agentpools.berth.io not Established within 30 s")


def _workload(kind: str, name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"schedulerName": "berth", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        },
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"metadata": {"name": name}, "spec": spec}


async def test_scale_sets_replicas_of_agentpools_deployments_and_statefulsets(api, namespace, backend):
    _install_agentpool_crd(api)
    custom, apps = CustomObjectsApi(api), AppsV1Api(api)
    custom.create_namespaced_custom_object(
        "berth.io",
        "v1alpha1",
        namespace,
        "agentpools",
        {
            "apiVersion": "berth.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": "chat"},
            "spec": {"model": "llama-70b", "replicas": 1},
        },
    )
    apps.create_namespaced_deployment(namespace, _workload("Deployment", "web", 1))
    apps.create_namespaced_stateful_set(namespace, _workload("StatefulSet", "db", 1))

    assert (await backend.scale(namespace, "chat", 4)).kind is APPLIED
    assert (
        custom.get_namespaced_custom_object("berth.io", "v1alpha1", namespace, "agentpools", "chat")["spec"]["replicas"]
        == 4
    )
    assert (await backend.scale(namespace, "web", 3)).kind is APPLIED
    assert apps.read_namespaced_deployment("web", namespace).spec.replicas == 3
    assert (await backend.scale(namespace, "db", 2)).kind is APPLIED
    assert apps.read_namespaced_stateful_set("db", namespace).spec.replicas == 2
    before = backend.limiter.taken
    assert (await backend.scale(namespace, "web", 3)).kind is APPLIED  # same value again: applied
    assert backend.limiter.taken == before + 1  # the kind found is remembered: one request
    missing = await backend.scale(namespace, "no-such-pool", 2)
    assert missing.kind is CONFLICT and "no AgentPool, Deployment or StatefulSet" in missing.reason


async def test_cordon_marks_the_node_unschedulable(api, nodes, backend):
    assert (await backend.cordon(nodes[1])).kind is APPLIED
    assert CoreV1Api(api).read_node(nodes[1]).spec.unschedulable is True
    assert (await backend.cordon(nodes[1])).kind is APPLIED
    assert (await backend.cordon("no-such-node")).kind is CONFLICT


# -- unschedulable --------------------------------------------------------------------------------


def scheduled_condition(api: ApiClient, namespace: str, name: str) -> Any:
    return next(c for c in read_pod(api, namespace, name).status.conditions if c.type == "PodScheduled")


async def test_report_unschedulable_sets_the_condition_and_one_event_per_message(api, namespace, nodes, backend):
    make_pod(api, namespace, "pending")
    assert (await backend.report_unschedulable(namespace, "pending", None, MESSAGE)).kind is APPLIED
    condition = scheduled_condition(api, namespace, "pending")
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", MESSAGE)
    await backend.flush_events()  # events are written in the background
    [event] = events_of(api, namespace, "pending", "FailedScheduling")
    assert (event.type, event.message, event.reporting_component) == ("Warning", MESSAGE, "berth")

    again = await backend.report_unschedulable(namespace, "pending", None, MESSAGE)
    assert (again.kind, again.reason) == (APPLIED, "already reported")
    await backend.flush_events()  # events are written in the background
    assert len(events_of(api, namespace, "pending", "FailedScheduling")) == 1

    changed = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable."
    assert (await backend.report_unschedulable(namespace, "pending", None, changed)).kind is APPLIED
    assert scheduled_condition(api, namespace, "pending").message == changed
    await backend.flush_events()  # events are written in the background
    assert len(events_of(api, namespace, "pending", "FailedScheduling")) == 2


async def test_report_unschedulable_leaves_bound_and_other_pods_alone(api, namespace, nodes, backend):
    uid = make_pod(api, namespace, "bound")
    assert (await backend.bind(placement(namespace, "bound", uid, nodes[0]))).kind is APPLIED
    late = await backend.report_unschedulable(namespace, "bound", None, MESSAGE)
    assert late.kind is APPLIED and "nothing to report" in late.reason
    assert scheduled_condition(api, namespace, "bound").status == "True"
    assert (await backend.report_unschedulable(namespace, "bound", "uid-other", MESSAGE)).kind is CONFLICT
    assert (await backend.report_unschedulable(namespace, "ghost", None, MESSAGE)).kind is CONFLICT
    await backend.flush_events()  # events are written in the background
    assert events_of(api, namespace, "bound", "FailedScheduling") == []


# -- the service, end to end ----------------------------------------------------------------------


def _decision(namespace: str, name: str, message: str) -> DecisionRecord:
    return DecisionRecord(
        decision_id=unique("dec"),
        cell="cell-0",
        input=InputPosition(topic="t", partition=0, offset=0),
        subject=f"{namespace}/{name}",
        outcome="unschedulable",
        message=message,
        config_version="v",
        snapshot_hash="s",
        config_hash="c",
        decision_hash="h",
        event_time=datetime.now(UTC),
    )


def _wait_for(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} not within {timeout:.0f} s")


def test_binder_service_binds_and_reports_with_kafka_and_kubernetes(
    kafka_bootstrap, kube_apiserver, api, namespace, nodes, tmp_path
):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    asyncio.run(ensure_topics(kafka))
    uids = {name: make_pod(api, namespace, name) for name in ("w0", "w1", "starved")}
    group = unique("it-kube-binder")
    asyncio.run(_park_group_at_end(kafka, group))
    asyncio.run(_park_group_at_end(kafka, f"{group}-decisions", DECISIONS.name))
    gang = PlacePods(
        command_id=unique("cmd"),
        decision_id=unique("dec"),
        cell=1,
        issued_at=datetime.now(UTC),
        pod_group="gang",
        placements=tuple(
            placement(namespace, name, uids[name], nodes[0], devices=(i,)) for i, name in enumerate(("w0", "w1"))
        ),
    )
    with Supervisor(tmp_path / "logs", {"BERTH_KAFKA_BOOTSTRAP": kafka_bootstrap}) as supervisor:
        supervisor.start(
            "binder",
            [
                "run",
                "--backend",
                "kube",
                "--kubeconfig",
                str(kube_apiserver.kubeconfig_path),
                "--group",
                group,
                "--qps",
                "20",
                "--burst",
                "10",
            ],
            ready_timeout=90,
        )

        async def scenario() -> None:
            start = await _end_offsets(kafka, RESULTS.name)
            await _publish(kafka, gang)
            async with EventProducer(kafka, source="tests/binder-kube") as producer:
                await producer.send_and_wait(_decision(namespace, "starved", MESSAGE))
            [(_, _, result)] = await read_from(kafka, RESULTS.name, start, _result_of(gang), timeout=90)
            assert isinstance(result, CommandResult) and result.status == "applied", result.reason

        asyncio.run(scenario())
        for index, name in enumerate(("w0", "w1")):
            pod = read_pod(api, namespace, name)
            assert (pod.spec.node_name, pod.metadata.annotations["berth.io/gpu-devices"]) == (nodes[0], str(index))
            _wait_for(lambda: len(events_of(api, namespace, name, "Scheduled")) == 1, "one Scheduled event")  # noqa: B023 -- called now
        condition = _wait_for(
            lambda: next(
                (c for c in read_pod(api, namespace, "starved").status.conditions or () if c.type == "PodScheduled"),
                None,
            ),
            "the PodScheduled condition",
        )
        assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", MESSAGE)
        _wait_for(
            lambda: len(events_of(api, namespace, "starved", "FailedScheduling")) == 1, "one FailedScheduling event"
        )
