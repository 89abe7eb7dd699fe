"""Berth end to end on a real kube-apiserver: pods with ``schedulerName: berth`` created through the
API end bound to the right nodes, and unschedulable ones say why, as kube-scheduler would.

One pipeline for the module: its own etcd + kube-apiserver (a fresh control plane, so no other
test's pods or nodes are in view), its own Kafka broker (topic names are fixed, so the session
broker would mix runs), a fresh database on the session's Postgres, and every Berth service as a
subprocess (:mod:`berth.supervisor`): ingest (watching the apiserver), inventory, token-lag,
decision, audit and ``binder --backend kube``. The CRDs (PodGroup, AgentPool) are applied first.

Each test works in a namespace of its own and on fake GPU nodes of its own (no kubelet), labelled
``e2e.berth.io/suite=<test>``; its pods select those nodes with a node selector or affinity, so
tests never compete for capacity. Nodes are never deleted: the node count in kube's
"0/N nodes are available" message is the number of nodes in the cluster. Every assertion reads
the API objects (``spec.nodeName``, the ``berth.io/gpu-devices`` annotation, the
``PodScheduled`` condition, events), never logs.
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
import sqlalchemy as sa
import yaml
from kubernetes.client import ApiClient, ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, SchedulingV1Api
from kubernetes.client.exceptions import ApiException
from sqlalchemy.engine import make_url

from berth.audit import db
from berth.devstack.fakenodes import create_fake_nodes
from berth.devstack.kube import KubeConnection, KubeControlPlane
from berth.settings import DatabaseSettings, KafkaSettings
from berth.supervisor import Supervisor, create_pipeline_topics

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy/helm/berth/crds"
SUITE_LABEL = "e2e.berth.io/suite"
GPU = "nvidia.com/gpu"
DEVICES = "berth.io/gpu-devices"
SCHEDULER = "berth"
BIND_TIMEOUT_S = 90.0
"""How long a pod may take from creation to binding (the pipeline has 4 Kafka hops; the machine
is small and shared, and the first pods also wait for the consumer groups to settle)."""

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
    from berth.devstack.kafka import KafkaProcess

    with KafkaProcess() as kafka:
        yield kafka.bootstrap_servers


@pytest.fixture(scope="module")
def module_database(database_url: str) -> Iterator[str]:
    """A new, empty, migrated database on the session's Postgres server; dropped afterwards."""
    name = f"e2e_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(make_url(database_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = make_url(database_url).set(database=name).render_as_string(hide_password=False)
        db.upgrade(DatabaseSettings(url=url))
        yield url
        with admin.connect() as connection:
            connection.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name})
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
    finally:
        admin.dispose()


@pytest.fixture(scope="module")
def pipeline(control_plane: KubeControlPlane, module_kafka: str, module_database: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work = tmp_path_factory.mktemp("kube-e2e")
    kubeconfig = str(control_plane.kubeconfig_path)
    asyncio.run(create_pipeline_topics(KafkaSettings(bootstrap=module_kafka)))
    with control_plane.connection().api_client() as api:
        _apply_crds(api)
        args = {
            "audit": ["run"],
            "inventory": ["run", "--data-dir", str(work / "inventory")],
            "token-lag": ["run", "--data-dir", str(work / "token-lag")],
            "decision": ["run"],
            "binder": ["run", "--backend", "kube", "--kubeconfig", kubeconfig],
            # A short Lease: after a kill -9 the next ingest takes over within seconds.
            "ingest": ["run", "--kubeconfig", kubeconfig, "--lease-namespace", "default",
                       "--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1"],
        }
        env = {"BERTH_KAFKA_BOOTSTRAP": module_kafka, "BERTH_DATABASE_URL": module_database,
               "BERTH_LOG_LEVEL": "info"}
        with Supervisor(work / "logs", env) as services:
            for name in SERVICES:
                services.start(name, args[name], ready_timeout=120)
            yield Pipeline(control_plane, api, services, args)


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


def make_nodes(pipeline: Pipeline, suite: str, count: int, *, gpus: int = 8, taints: Sequence[str] = (),
               zones: Sequence[str] = ("zone-a", "zone-b"), prefix: str | None = None) -> list[str]:
    """``count`` fake GPU nodes labelled for ``suite``: ``<suite>-0000``, ..."""
    return create_fake_nodes(pipeline.api, count, gpus=gpus, prefix=prefix or f"{suite}-", zones=zones,
                             taints=taints, labels={SUITE_LABEL: suite})


def pod_body(name: str, suite: str, *, gpus: int = 0, annotations: Mapping[str, str] | None = None,
             labels: Mapping[str, str] | None = None, priority_class: str | None = None,
             tolerations: Sequence[Mapping[str, str]] = (), affinity: Mapping[str, Any] | None = None,
             select_suite: bool = True) -> dict[str, Any]:
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
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": spec}


def create_pods(pipeline: Pipeline, namespace: str, bodies: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Create the pods; returns name → UID."""
    core = CoreV1Api(pipeline.api)
    return {body["metadata"]["name"]: core.create_namespaced_pod(namespace, body).metadata.uid for body in bodies}


def pods_of(pipeline: Pipeline, namespace: str) -> dict[str, Any]:
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


def wait_bound(pipeline: Pipeline, namespace: str, names: Sequence[str], timeout: float = BIND_TIMEOUT_S) -> dict[str, Any]:
    """Wait until every pod in ``names`` has a node; return them by name."""
    def bound() -> dict[str, Any] | None:
        pods = pods_of(pipeline, namespace)
        return pods if all(pods.get(n) is not None and pods[n].spec.node_name for n in names) else None

    try:
        pods = wait_for(bound, f"{len(names)} pods bound", timeout)
    except AssertionError:
        pods = pods_of(pipeline, namespace)
        pending = {n: _scheduled_condition(pods[n]) for n in names if n in pods and not pods[n].spec.node_name}
        raise AssertionError(f"pods still pending after {timeout:.0f} s: {pending}") from None
    return {n: pods[n] for n in names}


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


def node_count(pipeline: Pipeline) -> int:
    return len(CoreV1Api(pipeline.api).list_node().items)


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
