"""Ingest against a real kube-apiserver and a real Kafka: what arrives on the cluster topics.

- the initial list and the watch publish Berth's pods (pending and bound), other schedulers'
  bound pods, nodes, PodGroups, AgentPools (after applying the CRDs) and PriorityClasses; changes
  and deletions follow;
- a watch resumed from a compacted resourceVersion gets 410 Gone, relists, and publishes what
  changed while it was away (its own control plane: etcd compaction needs the watch cache off);
- two instances: only the Lease holder publishes; when it dies the other takes over and
  publishes what happened in between, nothing twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth.schemas.cluster import NodeObserved, NodeRemoved, PodDeleted, PodObserved
from berth.schemas.policy import PolicyObserved, PolicyRemoved
from berth.schemas.topics import NODES, PODS, POLICIES
from berth.services.ingest.kubeapi import KubeApi, close_stream, lines
from berth.services.ingest.service import IngestConfig, IngestService
from berth.services.ingest.watch import ResourceWatcher
from berth_dev.devstack.gobuild import kubernetes_binaries_present
from berth_dev.devstack.kube import KubeControlPlane
from kubernetes.client import (
    ApiClient,
    ApiextensionsV1Api,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    SchedulingV1Api,
)
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from berth.bus import EventConsumer, EventProducer, ensure_topics
from berth.bus.consumer import read_matching
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "berth" / "crds"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


async def kube(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking client call off the event loop the service under test runs on."""
    return await asyncio.to_thread(call, *args, **kwargs)


def apply_crds(client: ApiClient) -> None:
    """Create the chart's CRDs (already there is fine) and wait until they are Established."""
    api = ApiextensionsV1Api(client)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        try:
            api.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            conditions = api.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established within 30 s"
            time.sleep(0.2)


def new_namespace(client: ApiClient) -> str:
    tag = uuid.uuid4().hex[:8]
    name = f"ingest-{tag}"
    CoreV1Api(client).create_namespace({"metadata": {"name": name, "labels": {"team": tag}}})
    return name


def pod_body(
    name: str,
    *,
    scheduler: str = "berth",
    node: str | None = None,
    labels: dict[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "100m"}}}],
    }
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def node_body(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100"}},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
        },
    }


def topics_for(topic_name: str) -> dict[str, str]:
    return {"pods": f"{topic_name}.pods", "nodes": f"{topic_name}.nodes", "policies": f"{topic_name}.policies"}


def topic(contract: Any, name: str) -> Any:
    return dataclasses.replace(contract, name=name)


async def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        await asyncio.sleep(0.1)


async def all_events(kafka: KafkaSettings, contract_topic: Any, idle_s: float = 3.0) -> list[Any]:
    """Every event of a topic so far (until it has been quiet for ``idle_s``)."""
    async with EventConsumer(kafka, [contract_topic], group_id=None, name="ingest-test") as consumer:
        return [item.event async for item in consumer.events(idle_timeout_s=idle_s)]


def relists(resource: str) -> float:
    return REGISTRY.get_sample_value("berth_ingest_relists_total", {"resource": resource}) or 0.0


# --- 1. what is published ----------------------------------------------------------------------


async def test_ingest_publishes_pods_nodes_and_policies_and_follows_changes(
    kube_apiserver, kafka_bootstrap, topic_name
):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    names = topics_for(topic_name)
    client = kube_apiserver.api_client()
    core, custom = CoreV1Api(client), CustomObjectsApi(client)
    try:
        await kube(apply_crds, client)
        ns = await kube(new_namespace, client)
        tag = ns.removeprefix("ingest-")
        nodes = [f"ingest-{tag}-n1", f"ingest-{tag}-n2"]
        for name in nodes:
            await kube(core.create_node, node_body(name))
        priority_class = f"ingest-{tag}-high"
        await kube(SchedulingV1Api(client).create_priority_class, {"metadata": {"name": priority_class}, "value": 1000})
        await kube(
            custom.create_namespaced_custom_object,
            "scheduling.x-k8s.io",
            "v1alpha1",
            ns,
            "podgroups",
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "train"},
                "spec": {"minMember": 2},
            },
        )
        await kube(
            custom.create_namespaced_custom_object,
            "berth.io",
            "v1alpha1",
            ns,
            "agentpools",
            {
                "apiVersion": "berth.io/v1alpha1",
                "kind": "AgentPool",
                "metadata": {"name": "llama"},
                "spec": {
                    "model": "llama-70b",
                    "replicas": 2,
                    "ttftSloMs": 500,
                    "gpuRequirements": {"count": 2, "type": "H100", "topology": {"locality": "nvlink"}},
                    "scheduling": {"spotEnabled": True},
                },
            },
        )
        created = {}
        for body in (
            pod_body("berth-pending", labels={"scheduling.x-k8s.io/pod-group": "train"}, priority_class=priority_class),
            pod_body("berth-bound", node=nodes[0]),
            pod_body("other-pending", scheduler="default-scheduler"),
            pod_body("other-bound", scheduler="default-scheduler", node=nodes[1]),
        ):
            created[body["metadata"]["name"]] = await kube(core.create_namespaced_pod, ns, body)

        config = IngestConfig(
            identity="solo",
            lease_namespace=ns,
            namespaces=(ns,),
            topic_names=names,
            lease_duration_s=6,
            renew_deadline_s=4,
            retry_period_s=1,
        )
        service = IngestService(config, kafka, KubeApi(client))
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        try:
            pods_topic = topic(PODS, names["pods"])
            observed = await read_matching(
                kafka, pods_topic, lambda e: isinstance(e, PodObserved) and e.pod.namespace == ns, 3
            )
            by_name = {item.event.pod.name: item.event.pod for item in observed}
            assert set(by_name) == {"berth-pending", "berth-bound", "other-bound"}
            pending = by_name["berth-pending"]
            assert pending.uid == created["berth-pending"].metadata.uid
            assert (pending.node_name, pending.priority, pending.pod_group) == (None, 1000, "train")
            assert pending.requests == {"cpu": 100}
            assert by_name["other-bound"].node_name == nodes[1]
            assert {item.event.resource_version for item in observed} == {
                created[name].metadata.resource_version for name in by_name
            }

            node_events = await read_matching(
                kafka, topic(NODES, names["nodes"]), lambda e: isinstance(e, NodeObserved) and e.node.name in nodes, 2
            )
            assert all(item.event.node.allocatable["nvidia.com/gpu"] == 8 for item in node_events)

            wanted = {
                ("PodGroup", "train"),
                ("AgentPool", "llama"),
                ("PriorityClass", priority_class),
                ("Namespace", ns),
            }
            policies_topic = topic(POLICIES, names["policies"])
            policy_events = await read_matching(
                kafka, policies_topic, lambda e: isinstance(e, PolicyObserved) and (e.kind, e.obj.name) in wanted, 4
            )
            by_kind = {item.event.kind: item.event for item in policy_events}
            assert by_kind["PodGroup"].pod_group.min_member == 2
            assert by_kind["AgentPool"].agent_pool.spec["gpuRequirements"]["topology"] == {"locality": "nvlink"}
            assert by_kind["AgentPool"].agent_pool.spec["scheduling"] == {"spotEnabled": True}
            assert by_kind["PriorityClass"].priority_class.value == 1000
            # Namespaces' labels, for namespaceSelector terms (the apiserver adds the name label).
            assert by_kind["Namespace"].namespace_info.labels == {"kubernetes.io/metadata.name": ns, "team": tag}

            # Changes while watching: a deletion, a finished pod, a new pod, a node and a pool gone.
            await kube(core.delete_namespaced_pod, "berth-pending", ns, grace_period_seconds=0)
            await kube(core.patch_namespaced_pod_status, "berth-bound", ns, {"status": {"phase": "Succeeded"}})
            await kube(core.create_namespaced_pod, ns, pod_body("berth-new"))
            await kube(core.delete_node, nodes[1])
            await kube(custom.delete_namespaced_custom_object, "berth.io", "v1alpha1", ns, "agentpools", "llama")

            gone = await read_matching(kafka, pods_topic, lambda e: isinstance(e, PodDeleted) and e.namespace == ns, 2)
            assert {(item.event.name, item.event.node_name) for item in gone} == {
                ("berth-pending", None),
                ("berth-bound", nodes[0]),
            }
            await read_matching(
                kafka, pods_topic, lambda e: isinstance(e, PodObserved) and e.pod.key == f"{ns}/berth-new", 1
            )
            await read_matching(
                kafka, topic(NODES, names["nodes"]), lambda e: isinstance(e, NodeRemoved) and e.name == nodes[1], 1
            )
            await read_matching(
                kafka,
                policies_topic,
                lambda e: (
                    isinstance(e, PolicyRemoved) and e.kind == "AgentPool" and e.name == "llama" and e.namespace == ns
                ),
                1,
            )
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

        # Another scheduler's pending pod was never published, and nothing was published twice.
        pod_events = [
            e
            for e in await all_events(kafka, pods_topic)
            if (e.pod.namespace if isinstance(e, PodObserved) else e.namespace) == ns
        ]
        names_seen = [(type(e).__name__, e.pod.name if isinstance(e, PodObserved) else e.name) for e in pod_events]
        assert "other-pending" not in {name for _, name in names_seen}
        assert sorted(names_seen) == sorted(set(names_seen)), names_seen
        # A clean stop gives the Lease up.
        lease = await kube(CoordinationV1Api(client).read_namespaced_lease, "berth-ingest", ns)
        assert lease.spec.holder_identity is None
    finally:
        client.close()


# --- 2. 410 Gone → relist ----------------------------------------------------------------------


def compact_etcd(etcd_url: str, revision: int) -> None:
    """Physically compact etcd's history before ``revision`` (etcd's v3 JSON gateway)."""
    request = urllib.request.Request(
        f"{etcd_url}/v3/kv/compaction",
        method="POST",
        data=json.dumps({"revision": str(revision), "physical": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def first_watch_line(api: KubeApi, path: str, resource_version: str) -> dict[str, Any]:
    response = api.open_watch(path, [("resourceVersion", resource_version), ("timeoutSeconds", "5")], read_timeout_s=10)
    try:
        return json.loads(next(lines(response)))
    finally:
        close_stream(response)


@pytest.fixture
def uncached_control_plane(kube_apiserver):
    """etcd + kube-apiserver of our own with the watch cache off, so that a watch reads etcd and a
    compaction makes older resourceVersions answer 410 (the shared one's watch cache would keep
    them). Depends on ``kube_apiserver`` so the binaries are built first."""
    if not kubernetes_binaries_present():
        pytest.fail("kube-apiserver/etcd binaries missing although kube_apiserver started", pytrace=False)
    plane = KubeControlPlane(extra_apiserver_args=["--watch-cache=false"]).start()
    try:
        yield plane
    finally:
        plane.stop()


async def test_a_watch_resumed_from_a_compacted_version_relists_and_publishes_what_it_missed(
    uncached_control_plane, kafka_bootstrap, topic_name
):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    pods_topic = topic(PODS, f"{topic_name}.pods")
    client = uncached_control_plane.connection().api_client()
    core = CoreV1Api(client)
    api = KubeApi(client)
    try:
        ns = await kube(new_namespace, client)
        await ensure_topics(kafka, [pods_topic])
        for name in ("a", "b"):
            await kube(core.create_namespaced_pod, ns, pod_body(name))
        async with EventProducer(kafka, source="berth/ingest-test") as producer:

            async def publish(events):
                for event in events:
                    await producer.send_and_wait(event, topic=pods_topic.name)

            watcher = ResourceWatcher(api, "pods", publish, namespace=ns, watch_timeout_s=30)
            task = asyncio.create_task(watcher.run())
            await read_matching(kafka, pods_topic, lambda e: isinstance(e, PodObserved) and e.pod.namespace == ns, 2)
            assert sorted(p.pod.name for p in watcher.known.values()) == ["a", "b"]
            # The connection goes away; while nobody watches, b is deleted and c created.
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            stale = watcher.resource_version
            assert stale
            uid_b = next(p.pod.uid for p in watcher.known.values() if p.pod.name == "b")
            await kube(core.delete_namespaced_pod, "b", ns, grace_period_seconds=0)
            c = await kube(core.create_namespaced_pod, ns, pod_body("c"))
            await kube(compact_etcd, uncached_control_plane.etcd_url, int(c.metadata.resource_version))
            # The premise: the apiserver no longer serves the version the watcher would resume from.
            try:
                line = await kube(first_watch_line, api, watcher.path, stale)
                assert line["type"] == "ERROR" and line["object"]["code"] == 410, line
            except ApiException as exc:
                assert exc.status == 410

            before = relists("pods")
            task = asyncio.create_task(watcher.run())
            try:
                caught_up = await read_matching(
                    kafka,
                    pods_topic,
                    lambda e: (
                        (isinstance(e, PodDeleted) and e.uid == uid_b)
                        or (isinstance(e, PodObserved) and e.pod.key == f"{ns}/c")
                    ),
                    2,
                )
                assert {type(item.event) for item in caught_up} == {PodDeleted, PodObserved}
                assert relists("pods") == before + 1
                assert watcher.lists == 2
                assert sorted(p.pod.name for p in watcher.known.values()) == ["a", "c"]
                # And it watches again afterwards.
                await kube(core.delete_namespaced_pod, "a", ns, grace_period_seconds=0)
                await read_matching(
                    kafka, pods_topic, lambda e: isinstance(e, PodDeleted) and e.namespace == ns and e.name == "a", 1
                )
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        client.close()


# --- 3. one publisher through the Lease --------------------------------------------------------


async def test_only_the_lease_holder_publishes_and_a_standby_takes_over(kube_apiserver, kafka_bootstrap, topic_name):
    kafka = KafkaSettings(bootstrap=kafka_bootstrap)
    names = topics_for(topic_name)
    pods_topic = topic(PODS, names["pods"])
    client = kube_apiserver.api_client()
    core = CoreV1Api(client)
    try:
        ns = await kube(new_namespace, client)

        def config(identity: str) -> IngestConfig:
            return IngestConfig(
                identity=identity,
                lease_namespace=ns,
                namespaces=(ns,),
                resources=("pods",),
                topic_names=names,
                lease_duration_s=4,
                renew_deadline_s=3,
                retry_period_s=0.5,
            )

        first, second = (IngestService(config(i), kafka, KubeApi(client)) for i in ("ingest-a", "ingest-b"))
        stop_first, stop_second = asyncio.Event(), asyncio.Event()
        task_first = asyncio.create_task(first.run(stop_first))
        await wait_until(lambda: first.is_leader, 30, "first instance leading")
        task_second = asyncio.create_task(second.run(stop_second))
        try:
            await kube(core.create_namespaced_pod, ns, pod_body("p1"))
            await read_matching(kafka, pods_topic, lambda e: isinstance(e, PodObserved) and e.pod.key == f"{ns}/p1", 1)
            await asyncio.sleep(2.0)  # the standby has tried the Lease several times by now
            assert first.published == 1
            assert (second.is_leader, second.terms, second.published) == (False, 0, 0)

            # The leader dies without releasing the Lease; meanwhile p1 goes and p2 comes.
            task_first.cancel()
            await asyncio.gather(task_first, return_exceptions=True)
            await kube(core.delete_namespaced_pod, "p1", ns, grace_period_seconds=0)
            await kube(core.create_namespaced_pod, ns, pod_body("p2"))
            await wait_until(lambda: second.is_leader, 30, "standby taking over")
            caught_up = await read_matching(
                kafka,
                pods_topic,
                lambda e: (
                    (isinstance(e, PodDeleted) and e.name == "p1")
                    or (isinstance(e, PodObserved) and e.pod.name == "p2")
                ),
                2,
            )
            assert {type(item.event) for item in caught_up} == {PodDeleted, PodObserved}
            lease = await kube(CoordinationV1Api(client).read_namespaced_lease, "berth-ingest", ns)
            assert lease.spec.holder_identity == "ingest-b"
            assert lease.spec.lease_transitions >= 1
            await asyncio.sleep(1.0)
            # It read back what the first leader published: p1 is not observed a second time.
            assert second.published == 2
        finally:
            stop_second.set()
            await asyncio.wait_for(task_second, 30)
            if not task_first.done():
                task_first.cancel()
        # Over both terms, each fact exactly once (the topic is this test's alone).
        events = await all_events(kafka, pods_topic)
        facts = sorted((type(e).__name__, e.pod.name if isinstance(e, PodObserved) else e.name) for e in events)
        assert facts == [("PodDeleted", "p1"), ("PodObserved", "p1"), ("PodObserved", "p2")]
    finally:
        client.close()
