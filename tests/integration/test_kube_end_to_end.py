"""Berth end to end on a real kube-apiserver: pods with ``schedulerName: berth`` created through the
API end bound to the right nodes, and unschedulable ones say why, as kube-scheduler would.

One pipeline for the module: its own etcd + kube-apiserver (a fresh control plane, so no other
test's pods or nodes are in view), its own Kafka broker (topic names are fixed, so the session
broker would mix runs), a fresh database on the session's Postgres, and every Berth service as a
subprocess (:mod:`berth_dev.supervisor`): ingest (watching the apiserver), inventory, token-lag,
decision, audit and ``binder --backend kube``. The CRDs (PodGroup, AgentPool) are applied first.

Each test works in a namespace of its own and on fake GPU nodes of its own (no kubelet), a node
pool ``berth.io/node-pool=<test>``; its pods select that pool with a node selector, so tests never
compete for capacity. The pool label is also what pins a pod and its nodes to one *cell*
(``berth.schemas.cells``: the decision service splits the cluster into cells, one per partition
of ``berth.scheduler.inputs.v1``, and a pinned pod is decided against the nodes of its own cell;
its "0/N nodes are available" still counts every node of the cluster, as kube-scheduler's does,
the other cells' nodes from the census the inventory sends each cell, see
:func:`all_nodes`; pods that pin nothing are handed from cell to cell). Nodes are never deleted. Every assertion reads
the API objects (``spec.nodeName``, the ``berth.io/gpu-devices`` annotation, the ``PodScheduled`` condition,
events), never logs.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth.services.audit import db
from berth_dev.devstack.fakenodes import create_fake_nodes
from berth_dev.devstack.kube import KubeConnection, KubeControlPlane
from berth_dev.devstack.scratch import empty_kafka, scratch_database
from berth_dev.supervisor import Supervisor, create_pipeline_topics
from kubernetes.client import ApiClient, ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, SchedulingV1Api

from berth.core import messages
from berth.settings import DatabaseSettings, KafkaSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy/helm/berth/crds"
SUITE_LABEL = "berth.io/node-pool"  # = berth.schemas.cells.NODE_POOL_LABEL
GPU = "nvidia.com/gpu"
DEVICES = "berth.io/gpu-devices"
SCHEDULER = "berth"
BIND_TIMEOUT_S = 90.0
"""How long a pod may take from creation to binding (the pipeline has 4 Kafka hops; the machine
is small and shared, and the first pods also wait for the consumer groups to settle)."""

TICK_S = 3.0
"""The inventory's tick interval here (``--tick-seconds``; 30 s by default)."""

GANG_SETTLE_S = 10.0
"""Time given to the pipeline to decide a gang that cannot be placed (nothing on the API shows it)."""

#: Started in this order (ingest last: it publishes as soon as it holds the Lease).
SERVICES = ("audit", "inventory", "token-lag", "decision", "binder", "ingest")


# --- the pipeline ------------------------------------------------------------------------------


@dataclass
class Pipeline:
    """The running system: the control plane, an admin API client, the services and their args."""

    kube: KubeControlPlane
    api: ApiClient
    services: Supervisor
    args: Mapping[str, list[str]]
    kafka: KafkaSettings

    def restart_all(self, *, kill: bool) -> None:
        """Stop every service (``kill``: SIGKILL, no shutdown at all), then start them again."""
        for name in reversed(SERVICES):
            service = self.services.services[name]
            service.kill() if kill else service.stop()
            assert not service.is_alive()
        for name in SERVICES:
            self.services.start(name, self.args[name], ready_timeout=120)


def _apply_crds(api: ApiClient) -> None:
    extensions = ApiextensionsV1Api(api)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        extensions.create_custom_resource_definition(body)
    deadline = time.monotonic() + 60
    while not all(_crd_established(extensions, name) for name in names):
        assert time.monotonic() < deadline, f"CRDs {names} not established within 60 s"
        time.sleep(0.3)


def _crd_established(extensions: ApiextensionsV1Api, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition(name).status.conditions or ()
    return any(c.type == "Established" and c.status == "True" for c in conditions)


@pytest.fixture(scope="module")
def control_plane(kube_apiserver: KubeConnection) -> Iterator[KubeControlPlane]:
    """A control plane of this module's own (``kube_apiserver`` only settles availability: the
    binaries are built and the session can run one, else the module is skipped / failed in CI)."""
    with KubeControlPlane() as plane:
        yield plane


@pytest.fixture(scope="module")
def module_kafka(kafka_bootstrap: str) -> Iterator[str]:
    """A second, empty broker for this module (the session one proves the jars are there)."""
    with empty_kafka() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def module_database(database_url: str) -> Iterator[str]:
    """A new, empty, migrated database on the session's Postgres server; dropped afterwards."""
    with scratch_database(database_url, "e2e") as url:
        db.upgrade(DatabaseSettings(url=url))
        yield url


@pytest.fixture(scope="module")
def pipeline(
    control_plane: KubeControlPlane, module_kafka: str, module_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    work = tmp_path_factory.mktemp("kube-e2e")
    kubeconfig = str(control_plane.kubeconfig_path)
    asyncio.run(create_pipeline_topics(KafkaSettings(bootstrap=module_kafka)))
    with control_plane.connection().api_client() as api:
        _apply_crds(api)
        args = {
            "audit": ["run"],
            # Frequent ticks: a pod resting at the end of its round goes round again within seconds.
            "inventory": ["run", "--data-dir", str(work / "inventory"), "--tick-seconds", str(TICK_S)],
            "token-lag": ["run", "--data-dir", str(work / "token-lag")],
            "decision": ["run"],
            "binder": ["run", "--backend", "kube", "--kubeconfig", kubeconfig],
            # A short Lease: after a kill -9 the next ingest takes over within seconds.
            "ingest": [
                "run",
                "--kubeconfig",
                kubeconfig,
                "--lease-namespace",
                "default",
                "--lease-duration",
                "4",
                "--renew-deadline",
                "3",
                "--retry-period",
                "1",
            ],
        }
        env = {"BERTH_KAFKA_BOOTSTRAP": module_kafka, "BERTH_DATABASE_URL": module_database, "BERTH_LOG_LEVEL": "info"}
        with Supervisor(work / "logs", env) as services:
            for name in SERVICES:
                services.start(name, args[name], ready_timeout=120)
            yield Pipeline(control_plane, api, services, args, KafkaSettings(bootstrap=module_kafka))


# --- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def suite(request: pytest.FixtureRequest) -> str:
    """A short name for this test: its namespace, node-name prefix and node label value."""
    readable = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())[:30].strip("-")
    return f"{readable}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def namespace(pipeline: Pipeline, suite: str) -> str:
    CoreV1Api(pipeline.api).create_namespace({"metadata": {"name": suite}})
    return suite


def make_nodes(
    pipeline: Pipeline,
    suite: str,
    count: int,
    *,
    gpus: int = 8,
    taints: Sequence[str] = (),
    zones: Sequence[str] = ("zone-a", "zone-b"),
    prefix: str | None = None,
) -> list[str]:
    """``count`` fake GPU nodes labelled for ``suite``: ``<suite>-0000``, ..."""
    return create_fake_nodes(
        pipeline.api,
        count,
        gpus=gpus,
        prefix=prefix or f"{suite}-",
        zones=zones,
        taints=taints,
        labels={SUITE_LABEL: suite},
    )


def pod_body(
    name: str,
    suite: str,
    *,
    gpus: int = 0,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    priority_class: str | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    affinity: Mapping[str, Any] | None = None,
    select_suite: bool = True,
) -> dict[str, Any]:
    """A pending pod for Berth on ``suite``'s nodes (node selector), asking for ``gpus`` whole GPUs."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
        "tolerations": list(tolerations),
    }
    if select_suite:
        spec["nodeSelector"] = {SUITE_LABEL: suite}
    if affinity:
        spec["affinity"] = affinity
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": spec,
    }


def create_pods(pipeline: Pipeline, namespace: str, bodies: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Create the pods; returns name → UID."""
    core = CoreV1Api(pipeline.api)
    return {body["metadata"]["name"]: core.create_namespaced_pod(namespace, body).metadata.uid for body in bodies}


def pods_of(pipeline: Pipeline, namespace: str) -> dict[str, Any]:
    """The namespace's pods by name. (Fails at once, with its log, if a service has died: every
    wait polls this.)"""
    pipeline.services.check_alive()
    return {pod.metadata.name: pod for pod in CoreV1Api(pipeline.api).list_namespaced_pod(namespace).items}


def wait_for(check: Callable[[], Any], what: str, timeout: float = BIND_TIMEOUT_S, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout:.0f} s")
        time.sleep(interval)


def wait_bound(
    pipeline: Pipeline, namespace: str, names: Sequence[str], timeout: float = BIND_TIMEOUT_S
) -> dict[str, Any]:
    """Wait until every pod in ``names`` has a node; return them by name."""

    def bound() -> dict[str, Any] | None:
        pods = pods_of(pipeline, namespace)
        return pods if all(pods.get(n) is not None and pods[n].spec.node_name for n in names) else None

    try:
        pods = wait_for(bound, f"{len(names)} pods bound", timeout)
    except AssertionError:
        pods = pods_of(pipeline, namespace)
        pending = {n: _scheduled_condition(pods[n]) for n in names if n in pods and not pods[n].spec.node_name}
        decided = asyncio.run(_decisions_about(pipeline.kafka, namespace))
        raise AssertionError(
            f"pods still pending after {timeout:.0f} s: {pending}; the decisions about {namespace}: {decided}"
        ) from None
    return {n: pods[n] for n in names}


async def _decisions_about(kafka: KafkaSettings, namespace: str) -> list[tuple[str, str, str]]:
    """(subject, outcome, message) of every decision record about ``namespace`` (for failure messages)."""
    from berth.schemas import DecisionRecord
    from berth.schemas.topics import DECISIONS

    from berth.bus import EventConsumer

    found = []
    async with EventConsumer(kafka, [DECISIONS], group_id=None, name="kube-e2e-decisions") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            event = item.event
            if isinstance(event, DecisionRecord) and event.subject.startswith(f"{namespace}/"):
                found.append((event.subject, event.outcome, event.message[:200]))
    return found


def events_for(pipeline: Pipeline, namespace: str, reason: str | None = None) -> dict[str, list[Any]]:
    """The namespace's events (core/v1 view, which also shows events.k8s.io ones) by pod name."""
    found: dict[str, list[Any]] = defaultdict(list)
    for event in CoreV1Api(pipeline.api).list_namespaced_event(namespace).items:
        if reason is None or event.reason == reason:
            found[event.involved_object.name].append(event)
    return found


def _scheduled_condition(pod: Any) -> tuple[str, str, str] | None:
    for condition in pod.status.conditions or ():
        if condition.type == "PodScheduled":
            return condition.status, condition.reason, condition.message
    return None


def devices_of(pod: Any) -> tuple[int, ...]:
    value = (pod.metadata.annotations or {}).get(DEVICES, "")
    return tuple(int(part) for part in value.split(",") if part.strip())


def node_labels(pipeline: Pipeline, node: str) -> dict[str, str]:
    return CoreV1Api(pipeline.api).read_node(node).metadata.labels


def all_nodes(pipeline: Pipeline) -> list[Any]:
    """Every node of the cluster, as Berth reads them (``NodeInfo``)."""
    from berth.kube.manifests import node_from_manifest

    return [
        node_from_manifest(pipeline.api.sanitize_for_serialization(node))
        for node in CoreV1Api(pipeline.api).list_node().items
    ]


# --- behaviours --------------------------------------------------------------------------------


def test_a_plain_pod_is_bound_with_a_scheduled_event(pipeline, suite, namespace):
    nodes = make_nodes(pipeline, suite, 2)
    uids = create_pods(pipeline, namespace, [pod_body("plain", suite)])
    pod = wait_bound(pipeline, namespace, ["plain"])["plain"]
    assert pod.spec.node_name in nodes
    assert pod.metadata.uid == uids["plain"]
    assert devices_of(pod) == ()
    assert _scheduled_condition(pod) in (None, ("True", None, None))
    scheduled = wait_for(lambda: events_for(pipeline, namespace, "Scheduled").get("plain"), "a Scheduled event")
    assert len(scheduled) == 1
    assert pod.spec.node_name in scheduled[0].message


def test_an_unschedulable_pod_gets_the_kube_message_and_a_failed_scheduling_event(pipeline, suite, namespace):
    make_nodes(pipeline, suite, 2)
    create_pods(pipeline, namespace, [pod_body("too-big", suite, gpus=16)])
    cell = all_nodes(pipeline)  # kube counts every node, whichever cell decided the pod
    # Nodes of other pools fail the node selector, or first their cordon or taint
    # (NodeUnschedulable and TaintToleration run before NodeAffinity in kube's default profile);
    # reasons sorted as strings, kube 1.34 wording.
    elsewhere = [node for node in cell if node.labels.get(SUITE_LABEL) != suite]
    cordoned = sum(1 for node in elsewhere if node.unschedulable)
    tainted = sum(
        1
        for node in elsewhere
        if not node.unschedulable and any(t.effect in ("NoSchedule", "NoExecute") for t in node.taints)
    )
    others = len(elsewhere) - cordoned - tainted
    reasons = ["2 Insufficient nvidia.com/gpu"]
    if others:
        reasons.append(f"{others} node(s) didn't match Pod's node affinity/selector")
    if tainted:
        reasons.append(f"{tainted} node(s) had untolerated taint(s)")
    if cordoned:
        reasons.append(f"{cordoned} node(s) were unschedulable")
    # kube 1.34: a request above a node's allocatable is UnschedulableAndUnresolvable, so
    # preemption is "not helpful" on every node; the PostFilter part (the DRA plugin's, then
    # preemption's) follows the FitError after one space, as kube-scheduler v1.34.10 writes it.
    expected = (
        f"0/{len(cell)} nodes are available: {', '.join(sorted(reasons))}. no new claims to deallocate, "
        f"preemption: 0/{len(cell)} nodes are available: {len(cell)} Preemption is not helpful for scheduling."
    )

    def reported() -> tuple[str, str, str] | None:
        condition = _scheduled_condition(pods_of(pipeline, namespace)["too-big"])
        # The first verdict may predate Berth seeing both nodes' status (a fake node is created,
        # then its status written, as a kubelet does): wait for the verdict on the full picture.
        return condition if condition and condition[2] == expected else None

    try:
        status, reason, message = wait_for(reported, "the expected PodScheduled condition")
    except AssertionError:
        raise AssertionError(
            f"PodScheduled is {_scheduled_condition(pods_of(pipeline, namespace)['too-big'])}, "
            f"expected the message {expected!r}"
        ) from None
    assert (status, reason) == ("False", "Unschedulable")
    failed = wait_for(
        lambda: (
            (events := events_for(pipeline, namespace, "FailedScheduling").get("too-big"))
            and events[-1].message == expected
            and events
        ),
        "a FailedScheduling event with that message",
    )
    messages = [event.message for event in sorted(failed, key=lambda e: e.metadata.creation_timestamp)]
    assert messages[-1] == expected
    assert len(messages) == len(set(messages)), f"one event per distinct message, got {messages}"
    assert {event.type for event in failed} == {"Warning"}
    assert not pods_of(pipeline, namespace)["too-big"].spec.node_name


def test_whole_gpu_pods_get_disjoint_devices_within_an_nvlink_island(pipeline, suite, namespace):
    nodes = make_nodes(pipeline, suite, 2)
    create_pods(pipeline, namespace, [pod_body("full", suite, gpus=8)])
    full = wait_bound(pipeline, namespace, ["full"])["full"]
    assert devices_of(full) == tuple(range(8))
    names = ["quad", "pair", "single-a", "single-b"]
    create_pods(
        pipeline, namespace, [pod_body(name, suite, gpus=gpus) for name, gpus in zip(names, (4, 2, 1, 1), strict=True)]
    )
    pods = wait_bound(pipeline, namespace, names)
    # The other node holds exactly the 8 GPUs the four pods ask for: each device once.
    [other] = set(nodes) - {full.spec.node_name}
    assert {pod.spec.node_name for pod in pods.values()} == {other}
    devices = [device for pod in pods.values() for device in devices_of(pod)]
    assert sorted(devices) == list(range(8))
    assert [len(devices_of(pods[name])) for name in names] == [4, 2, 1, 1]
    # Topology (the berth.io/gpu-topology annotation: NVLink islands 0-3 and 4-7): a multi-GPU pod
    # never straddles two islands.
    for name in ("quad", "pair"):
        assert len({device // 4 for device in devices_of(pods[name])}) == 1, (name, devices_of(pods[name]))


def test_fractional_pods_share_one_device_and_the_share_is_annotated(pipeline, suite, namespace):
    [node] = make_nodes(pipeline, suite, 1, gpus=1)
    halves = [pod_body(f"half-{i}", suite, annotations={"gpu-fraction": "0.5"}) for i in range(2)]
    create_pods(pipeline, namespace, halves)
    pods = wait_bound(pipeline, namespace, ["half-0", "half-1"])
    for pod in pods.values():
        assert pod.spec.node_name == node
        assert devices_of(pod) == (0,)
        assert pod.metadata.annotations["berth.io/gpu-milli"] == "500"
    # The device is full now: a third half waits, saying so the kube way.
    create_pods(pipeline, namespace, [pod_body("half-2", suite, annotations={"gpu-fraction": "0.5"})])
    condition = wait_for(
        lambda: _scheduled_condition(pods_of(pipeline, namespace)["half-2"]), "a PodScheduled condition"
    )
    assert condition[:2] == ("False", "Unschedulable")
    assert not pods_of(pipeline, namespace)["half-2"].spec.node_name


def test_tainted_nodes_take_only_pods_that_tolerate_them(pipeline, suite, namespace):
    [tainted] = make_nodes(pipeline, suite, 1, taints=["dedicated=gpu:NoSchedule"], prefix=f"{suite}-t-")
    [plain] = make_nodes(pipeline, suite, 1, prefix=f"{suite}-p-")
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    on_tainted = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [tainted]}]}
                ]
            }
        }
    }
    create_pods(
        pipeline,
        namespace,
        [
            pod_body("tolerates", suite, gpus=8, tolerations=[toleration], affinity=on_tainted),
            pod_body("intolerant", suite, gpus=8),
        ],
    )
    pods = wait_bound(pipeline, namespace, ["tolerates", "intolerant"])
    assert pods["tolerates"].spec.node_name == tainted
    assert pods["intolerant"].spec.node_name == plain
    # Both nodes are full now; a pod that does not tolerate the taint is told both reasons.
    create_pods(pipeline, namespace, [pod_body("late", suite, gpus=1)])
    message = wait_for(
        lambda: (_scheduled_condition(pods_of(pipeline, namespace)["late"]) or (None,) * 3)[2],
        "an unschedulable message",
    )
    assert "1 node(s) had untolerated taint(s)" in message, message
    assert "1 Insufficient nvidia.com/gpu" in message, message


def test_node_and_pod_affinity_are_honoured(pipeline, suite, namespace):
    nodes = make_nodes(pipeline, suite, 4, zones=("zone-a", "zone-b"))
    zone_b = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
                        ]
                    }
                ]
            }
        }
    }
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    create_pods(
        pipeline,
        namespace,
        [
            pod_body("in-zone-b", suite, gpus=1, affinity=zone_b),
            pod_body("leader", suite, gpus=1, labels={"app": "leader"}),
        ]
        + [pod_body(f"spread-{i}", suite, gpus=1, labels={"app": "spread"}, affinity=apart) for i in range(4)],
    )
    spread = [f"spread-{i}" for i in range(4)]
    pods = wait_bound(pipeline, namespace, ["in-zone-b", "leader", *spread])
    assert node_labels(pipeline, pods["in-zone-b"].spec.node_name)["topology.kubernetes.io/zone"] == "zone-b"
    assert sorted(pods[name].spec.node_name for name in spread) == sorted(nodes)
    together = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "leader"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    create_pods(
        pipeline,
        namespace,
        [
            pod_body("follower", suite, gpus=1, affinity=together),
            pod_body(f"spread-{4}", suite, gpus=1, labels={"app": "spread"}, affinity=apart),
        ],
    )
    follower = wait_bound(pipeline, namespace, ["follower"])["follower"]
    assert follower.spec.node_name == pods["leader"].spec.node_name
    # A fifth pod that must keep away from the four others has no node left.
    condition = wait_for(lambda: _scheduled_condition(pods_of(pipeline, namespace)["spread-4"]), "spread-4 reported")
    assert condition[:2] == ("False", "Unschedulable")
    assert "didn't match pod anti-affinity rules" in condition[2], condition


def test_pod_affinity_selects_namespaces_by_their_labels(pipeline, suite, namespace):
    """namespaceSelector reads Namespace labels, which reach the decision cells from ingest."""
    make_nodes(pipeline, suite, 2, zones=("zone-a",))
    team = f"{suite}-db"
    CoreV1Api(pipeline.api).create_namespace({"metadata": {"name": team, "labels": {"berth-e2e/team": suite}}})
    create_pods(pipeline, team, [pod_body("db", suite, gpus=1, labels={"app": "db"})])
    db = wait_bound(pipeline, team, ["db"])["db"]

    def near_db(team_label: str) -> dict[str, Any]:
        return {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "db"}},
                        "topologyKey": "kubernetes.io/hostname",
                        "namespaceSelector": {"matchLabels": {"berth-e2e/team": team_label}},
                    }
                ]
            }
        }

    create_pods(
        pipeline,
        namespace,
        [
            pod_body("near-db", suite, gpus=1, affinity=near_db(suite)),
            pod_body("near-nothing", suite, gpus=1, affinity=near_db("nobody")),
        ],
    )
    assert wait_bound(pipeline, namespace, ["near-db"])["near-db"].spec.node_name == db.spec.node_name
    condition = wait_for(
        lambda: _scheduled_condition(pods_of(pipeline, namespace)["near-nothing"]), "near-nothing reported"
    )
    assert condition[:2] == ("False", "Unschedulable")
    assert "didn't match pod affinity rules" in condition[2], condition


def _pod_group(pipeline: Pipeline, namespace: str, name: str, min_member: int) -> None:
    CustomObjectsApi(pipeline.api).create_namespaced_custom_object(
        "scheduling.x-k8s.io",
        "v1alpha1",
        namespace,
        "podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": min_member},
        },
    )


def delete_pods(pipeline: Pipeline, namespace: str, names: Sequence[str]) -> None:
    """Delete at once (grace 0: there is no kubelet to confirm a graceful stop) and wait until gone."""
    core = CoreV1Api(pipeline.api)
    for name in names:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    wait_for(lambda: not set(names) & set(pods_of(pipeline, namespace)), f"pods {names} gone", timeout=30)


def test_a_gang_is_bound_all_together_or_not_at_all(pipeline, suite, namespace):
    nodes = make_nodes(pipeline, suite, 2)
    _pod_group(pipeline, namespace, "trio", 3)
    _pod_group(pipeline, namespace, "pair", 2)
    trio = [f"trio-{i}" for i in range(3)]
    create_pods(
        pipeline,
        namespace,
        [pod_body(name, suite, gpus=4, labels={"scheduling.x-k8s.io/pod-group": "trio"}) for name in trio],
    )
    bound = wait_bound(pipeline, namespace, trio)
    assert Counter(pod.spec.node_name for pod in bound.values()).most_common() in (
        [(nodes[0], 2), (nodes[1], 1)],
        [(nodes[1], 2), (nodes[0], 1)],
    )
    # 4 GPUs are left: one member of the pair would fit, both cannot — so neither may be bound.
    # Nothing on the API says that the pair was decided (the test below checks the members say why), so give the
    # pipeline time to decide it, then send a single pod of the same size: it takes the 4 GPUs
    # only if the pair did not take them first.
    pair = ["pair-0", "pair-1"]
    create_pods(
        pipeline,
        namespace,
        [pod_body(name, suite, gpus=4, labels={"scheduling.x-k8s.io/pod-group": "pair"}) for name in pair],
    )
    time.sleep(GANG_SETTLE_S)
    create_pods(pipeline, namespace, [pod_body("single", suite, gpus=4)])
    single = wait_bound(pipeline, namespace, ["single"])["single"]
    pods = pods_of(pipeline, namespace)
    assert [pods[name].spec.node_name for name in pair] == [None, None]
    # Once the trio is gone the pair fits, and goes together.
    delete_pods(pipeline, namespace, trio)
    pods = wait_bound(pipeline, namespace, pair)
    used = Counter({single.spec.node_name: 4})
    for pod in pods.values():
        used[pod.spec.node_name] += len(devices_of(pod))
    assert max(used.values()) <= 8, used


def test_members_of_a_gang_that_cannot_fit_say_why(pipeline, suite, namespace):
    make_nodes(pipeline, suite, 1)
    _pod_group(pipeline, namespace, "too-wide", 2)
    members = ["wide-0", "wide-1"]
    create_pods(
        pipeline,
        namespace,
        [pod_body(name, suite, gpus=8, labels={"scheduling.x-k8s.io/pod-group": "too-wide"}) for name in members],
    )
    conditions = wait_for(
        lambda: (
            [c for name, pod in pods_of(pipeline, namespace).items() if (c := _scheduled_condition(pod)) is not None]
            or None
        ),
        "a PodScheduled condition on a member",
        timeout=GANG_SETTLE_S * 3,
    )
    assert all(condition[:2] == ("False", "Unschedulable") for condition in conditions)


def test_a_pod_hashed_to_a_full_cell_is_bound_in_a_cell_with_room(pipeline, suite, namespace):
    """A pod that names no cell, node pool or gang may go to any node, as with kube-scheduler: the
    cell its UID hashes to hands it on when it has no room (``PodRouted`` / ``HandOverPod``)."""
    from berth.schemas.cells import CELL_LABEL, stable_hash
    from berth.schemas.topics import DECISION_INPUTS

    cells = DECISION_INPUTS.partitions
    selector = {"berth-e2e/handover": suite}  # selects this test's nodes and pins nothing
    [full] = create_fake_nodes(pipeline.api, 1, gpus=8, prefix=f"{suite}-full-", labels={CELL_LABEL: "0", **selector})
    [roomy] = create_fake_nodes(pipeline.api, 1, gpus=8, prefix=f"{suite}-roomy-", labels={CELL_LABEL: "1", **selector})

    def body(name: str, gpus: int, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        pod = pod_body(name, suite, gpus=gpus, labels=labels, select_suite=False)
        pod["spec"]["nodeSelector"] = dict(selector)
        return pod

    create_pods(pipeline, namespace, [body("filler", 8, {CELL_LABEL: "0"})])  # pinned: fills cell 0
    assert wait_bound(pipeline, namespace, ["filler"])["filler"].spec.node_name == full
    # One-GPU pods until one hashes to the full cell (each does with probability 1/cells).
    homes: dict[str, int] = {}
    while 0 not in homes.values() and len(homes) < 8:
        name = f"free-{len(homes)}"
        uid = create_pods(pipeline, namespace, [body(name, 1)])[name]
        homes[name] = stable_hash(f"pod/{uid}") % cells
    assert 0 in homes.values(), f"no pod of {len(homes)} hashed to cell 0: {homes}"
    bound = wait_bound(pipeline, namespace, list(homes))
    assert {name: pod.spec.node_name for name, pod in bound.items()} == {name: roomy for name in homes}
    handed_over = {
        subject
        for subject, outcome, _ in asyncio.run(_decisions_about(pipeline.kafka, namespace))
        if outcome == "handed-over"
    }
    assert handed_over == {f"{namespace}/{name}" for name, home in homes.items() if home == 0}
    # A pod no cell can place is reported by the last cell of its round over every cell's nodes.
    create_pods(pipeline, namespace, [body("too-big", 16)])
    condition = wait_for(lambda: _scheduled_condition(pods_of(pipeline, namespace)["too-big"]), "too-big reported")
    nodes = len(CoreV1Api(pipeline.api).list_node().items)
    assert condition[:2] == ("False", "Unschedulable")
    assert condition[2].startswith(f"0/{nodes} nodes are available: "), condition[2]
    assert "2 Insufficient nvidia.com/gpu" in condition[2]


def test_room_freed_in_another_cell_reaches_a_pod_resting_at_the_end_of_its_round(pipeline, suite, namespace):
    """Both cells full: the pod is tried in both and rests in the last. Room freed in the other
    cell is not an event of the resting cell; the ticks send the pod round again."""
    from berth.schemas.cells import CELL_LABEL, stable_hash
    from berth.schemas.topics import DECISION_INPUTS

    selector = {"berth-e2e/handover": suite}
    nodes = {
        cell: create_fake_nodes(
            pipeline.api, 1, gpus=8, prefix=f"{suite}-c{cell}-", labels={CELL_LABEL: str(cell), **selector}
        )[0]
        for cell in (0, 1)
    }

    def body(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        pod = pod_body(name, suite, gpus=8, labels=labels, select_suite=False)
        pod["spec"]["nodeSelector"] = dict(selector)
        return pod

    fillers = [f"filler-{cell}" for cell in nodes]
    create_pods(pipeline, namespace, [body(f"filler-{cell}", {CELL_LABEL: str(cell)}) for cell in nodes])
    wait_bound(pipeline, namespace, fillers)
    uid = create_pods(pipeline, namespace, [body("waiter")])["waiter"]
    condition = wait_for(lambda: _scheduled_condition(pods_of(pipeline, namespace)["waiter"]), "waiter reported")
    assert condition[:2] == ("False", "Unschedulable")
    home = stable_hash(f"pod/{uid}") % DECISION_INPUTS.partitions  # its round began here, ends in the other
    delete_pods(pipeline, namespace, [f"filler-{home}"])
    waiter = wait_bound(pipeline, namespace, ["waiter"])["waiter"]
    assert waiter.spec.node_name == nodes[home]


def test_a_gated_pod_waits_until_its_last_scheduling_gate_is_removed(pipeline, suite, namespace):
    """Kueue's admission: a pod created with schedulingGates is not scheduled (the apiserver marks
    it SchedulingGated, as with kube-scheduler); removing the gates lets Berth bind it."""
    nodes = make_nodes(pipeline, suite, 1)
    gated = pod_body("gated", suite)
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}, {"name": "example.com/quota"}]
    create_pods(pipeline, namespace, [gated, pod_body("free", suite)])
    wait_bound(pipeline, namespace, ["free"])  # Berth is deciding: the gated pod was not forgotten by chance
    core = CoreV1Api(pipeline.api)
    core.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": [{"name": "example.com/quota"}]}})
    time.sleep(3)
    pod = pods_of(pipeline, namespace)["gated"]
    assert pod.spec.node_name is None
    assert _scheduled_condition(pod) == ("False", "SchedulingGated", messages.SCHEDULING_GATED)
    core.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": None}})
    assert wait_bound(pipeline, namespace, ["gated"])["gated"].spec.node_name in nodes


def test_deleting_a_pod_frees_its_gpus_for_the_next(pipeline, suite, namespace):
    [node] = make_nodes(pipeline, suite, 1)
    create_pods(pipeline, namespace, [pod_body("first", suite, gpus=8)])
    assert wait_bound(pipeline, namespace, ["first"])["first"].spec.node_name == node
    create_pods(pipeline, namespace, [pod_body("second", suite, gpus=8)])
    condition = wait_for(lambda: _scheduled_condition(pods_of(pipeline, namespace)["second"]), "second reported")
    assert condition[:2] == ("False", "Unschedulable")
    delete_pods(pipeline, namespace, ["first"])
    second = wait_bound(pipeline, namespace, ["second"])["second"]
    assert second.spec.node_name == node
    assert devices_of(second) == tuple(range(8))


def test_a_high_priority_pod_preempts_a_lower_one(pipeline, suite, namespace):
    [node] = make_nodes(pipeline, suite, 1)
    scheduling = SchedulingV1Api(pipeline.api)
    low, high = f"{suite}-low", f"{suite}-high"
    scheduling.create_priority_class({"metadata": {"name": low}, "value": 10})
    scheduling.create_priority_class({"metadata": {"name": high}, "value": 100_000})
    try:
        victims = ["low-0", "low-1"]
        create_pods(pipeline, namespace, [pod_body(name, suite, gpus=4, priority_class=low) for name in victims])
        wait_bound(pipeline, namespace, victims)
        create_pods(pipeline, namespace, [pod_body("urgent", suite, gpus=4, priority_class=high)])
        urgent = wait_bound(pipeline, namespace, ["urgent"])["urgent"]
        assert urgent.spec.node_name == node
        left = [name for name in victims if name in pods_of(pipeline, namespace)]
        assert len(left) == 1, f"exactly one low-priority pod should have been evicted, left: {left}"
        survivor = pods_of(pipeline, namespace)[left[0]]
        assert set(devices_of(survivor)).isdisjoint(devices_of(urgent))
        # As kube-scheduler tells its victims: a Preempted event naming the preemptor and the node.
        [evicted] = [name for name in victims if name not in left]
        preempted = wait_for(lambda: events_for(pipeline, namespace, "Preempted").get(evicted), "a Preempted event")
        assert [e.message for e in preempted] == [f"Preempted by pod {urgent.metadata.uid} on node {node}"]
    finally:
        scheduling.delete_priority_class(low)
        scheduling.delete_priority_class(high)


def _pools_in_both_cells(suite: str) -> tuple[str, str]:
    """Two node-pool names whose cells differ, so both decision cells take part."""
    from berth.schemas.cells import stable_hash
    from berth.schemas.topics import DECISION_INPUTS

    first = f"{suite}-a"
    cell = stable_hash(f"pool/{first}") % DECISION_INPUTS.partitions
    second = next(
        name
        for i in range(100)
        if stable_hash(f"pool/{(name := f'{suite}-b{i}')}") % DECISION_INPUTS.partitions != cell
    )
    return first, second


async def _applied_placements(kafka: KafkaSettings, uids: set[str]) -> tuple[dict[str, set[str]], list[str]]:
    """From the commands and results topics: pod UID → ids of the applied commands that bound it,
    and the reasons of every conflict reported for a command placing one of ``uids``."""
    from berth.schemas.scheduler import CommandResult, PlacePods
    from berth.schemas.topics import COMMANDS, RESULTS

    from berth.bus import EventConsumer

    placing: dict[str, list[str]] = {}
    results: dict[str, list[CommandResult]] = defaultdict(list)
    async with EventConsumer(kafka, [COMMANDS, RESULTS], group_id=None, name="kube-e2e") as consumer:
        async for item in consumer.events(idle_timeout_s=3):
            event = item.event
            if isinstance(event, PlacePods) and uids & {p.pod_uid for p in event.placements}:
                placing[event.command_id] = [p.pod_uid for p in event.placements]
            elif isinstance(event, CommandResult):
                results[event.command_id].append(event)
    applied: dict[str, set[str]] = defaultdict(set)
    conflicts = []
    for command_id, pod_uids in placing.items():
        for result in results.get(command_id, ()):
            if result.status == "applied":
                for uid in pod_uids:
                    applied[uid].add(command_id)
            elif result.status == "conflict":
                conflicts.append(f"{command_id}: {result.reason}")
    return applied, conflicts


RESTART_PODS = 100
RESTART_GPUS = (1, 2, 4, 1, 2)
"""GPUs per pod, in turn: 100 pods ask for 200 GPUs of the 256 on two pools of 16 nodes."""


def test_kill_9_of_every_service_mid_run_loses_nothing_and_binds_nothing_twice(pipeline, suite, namespace):
    pools = _pools_in_both_cells(suite)
    nodes = {node: pool for pool in pools for node in make_nodes(pipeline, pool, 16, prefix=f"{pool}-")}
    # Nodes and pods reach a cell by different topics: a pod created the instant its nodes were
    # may be decided before the cell has any ("no nodes available", reported as kube-scheduler
    # would). That is not what this test is about, so the cells learn the nodes first.
    warm_up = [pod_body(f"warm-up-{i}", pool) for i, pool in enumerate(pools)]
    create_pods(pipeline, namespace, warm_up)
    wait_bound(pipeline, namespace, [body["metadata"]["name"] for body in warm_up])
    delete_pods(pipeline, namespace, [body["metadata"]["name"] for body in warm_up])
    bodies = [
        pod_body(f"p-{i:03d}", pools[i % 2], gpus=RESTART_GPUS[i % len(RESTART_GPUS)]) for i in range(RESTART_PODS)
    ]
    requested = {
        body["metadata"]["name"]: int(body["spec"]["containers"][0]["resources"]["requests"][GPU]) for body in bodies
    }
    uids: dict[str, str] = {}
    failures: list[BaseException] = []

    def create_steadily() -> None:
        # About 25 s of arrivals: the kill lands while pods keep coming.
        try:
            for body in bodies:
                uids.update(create_pods(pipeline, namespace, [body]))
                time.sleep(0.25)
        except BaseException as exc:
            failures.append(exc)

    creator = threading.Thread(target=create_steadily, name="pod-creator")
    creator.start()
    try:

        def third_bound() -> bool:
            return sum(1 for pod in pods_of(pipeline, namespace).values() if pod.spec.node_name) >= RESTART_PODS // 3

        wait_for(third_bound, "a third of the pods bound", timeout=BIND_TIMEOUT_S)
        assert creator.is_alive(), "the kill must land while pods are still being created"
        pipeline.restart_all(kill=True)
    finally:
        creator.join()
    assert not failures, failures
    pods = wait_bound(pipeline, namespace, list(requested), timeout=240)

    # None lost, none re-created: every pod is the one we created, and bound.
    assert {name: pod.metadata.uid for name, pod in pods.items()} == uids
    # Every node fits: GPUs requested ≤ capacity, and each device given to one pod only.
    by_node: dict[str, list[Any]] = defaultdict(list)
    for pod in pods.values():
        assert pod.spec.node_name in nodes and nodes[pod.spec.node_name] == pod.spec.node_selector[SUITE_LABEL]
        assert len(devices_of(pod)) == requested[pod.metadata.name], (pod.metadata.name, devices_of(pod))
        by_node[pod.spec.node_name].append(pod)
    for node, placed in by_node.items():
        assert sum(requested[pod.metadata.name] for pod in placed) <= 8, node
        devices = [device for pod in placed for device in devices_of(pod)]
        assert len(devices) == len(set(devices)), (node, devices)
    assert {nodes[node] for node in by_node} == set(pools)
    # Bound once: one Scheduled event per pod, no failure reported for any.
    scheduled = wait_for(
        lambda: (
            (
                events := {
                    name: found
                    for name, found in events_for(pipeline, namespace, "Scheduled").items()
                    if name in requested
                }
            )
            and len(events) >= RESTART_PODS
            and events
        ),
        "a Scheduled event for every pod",
        timeout=30,
    )
    assert {name: len(events) for name, events in scheduled.items()} == dict.fromkeys(requested, 1)
    assert not set(events_for(pipeline, namespace, "FailedScheduling")) & set(requested)
    # ... and on the pipeline's own record: each pod in exactly one applied command, no conflicts.
    applied, conflicts = asyncio.run(_applied_placements(pipeline.kafka, set(uids.values())))
    assert conflicts == []
    assert {uid: len(commands) for uid, commands in applied.items()} == dict.fromkeys(uids.values(), 1)
