"""Descheduling in the running pipeline, on a real kube-apiserver: the decision service, given a
DeschedulerPolicy, evicts a pod whose node was tainted after it was placed, through the binder and
the Eviction API; the pod its controller creates again is placed by Berth on a good node; a
PodDisruptionBudget the apiserver enforces blocks the other eviction, and the binder reports the
refusal back instead of retrying it; ``berth audit replay`` re-derives every decision, evictions
included, without a mismatch.

The pipeline is this module's own (as in ``test_kube_end_to_end``): etcd + kube-apiserver, a Kafka
broker, a scratch database, and every Berth service as a subprocess. The inventory ticks every
second and the decision service plans a round every ``INTERVAL_S`` seconds of those ticks. No
controller-manager and no kubelet run: the test marks bound pods Running, as a kubelet would, and
creates the evicted pod's successor, as its ReplicaSet would. With no disruption controller, a
budget's ``status.disruptionsAllowed`` stays 0, so the apiserver refuses every eviction it covers
(HTTP 429) while Berth, counting the budget itself from the live pods, sees one allowed: the
eviction is issued and the refusal comes from the cluster.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth.schemas import CommandResult, DecisionRecord, PodObserved
from berth.schemas.topics import DECISION_INPUTS, DECISIONS
from berth.services.audit import db
from berth_dev.demo import _wait_for_audit
from berth_dev.devstack.fakenodes import create_fake_nodes
from berth_dev.devstack.kube import KubeConnection, KubeControlPlane
from berth_dev.devstack.scratch import empty_kafka, scratch_database
from berth_dev.supervisor import Supervisor, create_pipeline_topics
from kubernetes.client import ApiClient, ApiextensionsV1Api, CoreV1Api, PolicyV1Api

from berth.bus import EventConsumer
from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy/helm/berth/crds"
POOL_LABEL = "berth.io/node-pool"
POOL = "dsch"
NAMESPACE = "dsch"
INTERVAL_S = 3
SERVICES = ("audit", "inventory", "token-lag", "decision", "binder", "ingest")
TIMEOUT_S = 60.0
POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "nodeSelector": f"{POOL_LABEL}={POOL}",
    "profiles": [{"name": "taints", "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}],
}


def _wait(check: Callable[[], Any], what: str, timeout: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s"
        time.sleep(0.5)


def _apply_crds(api: ApiClient) -> None:
    extensions = ApiextensionsV1Api(api)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        extensions.create_custom_resource_definition(body)

    def established() -> bool:
        return all(
            any(
                c.type == "Established" and c.status == "True"
                for c in extensions.read_custom_resource_definition(n).status.conditions or ()
            )
            for n in names
        )

    _wait(established, "CRDs established")


class Stack:
    def __init__(self, api: ApiClient, services: Supervisor, kafka: KafkaSettings, database_url: str) -> None:
        self.api = api
        self.core = CoreV1Api(api)
        self.services = services
        self.kafka = kafka
        self.database_url = database_url

    def pods(self) -> dict[str, Any]:
        self.services.check_alive()
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(NAMESPACE).items}

    def inputs(self) -> list[Any]:
        return asyncio.run(_events(self.kafka, DECISION_INPUTS))

    def decisions(self) -> list[DecisionRecord]:
        return [e for e in asyncio.run(_events(self.kafka, DECISIONS)) if isinstance(e, DecisionRecord)]


async def _events(kafka: KafkaSettings, topic: Any) -> list[Any]:
    """The topic's committed events up to its end as of now (ticks keep arriving, so the read
    cannot wait for the topic to go quiet)."""
    found = []
    async with EventConsumer(kafka, [topic], group_id=None, name="deschedule-pipeline-test") as consumer:
        raw = consumer.raw
        deadline = time.monotonic() + 30
        while not raw.assignment():
            await raw.getmany(timeout_ms=200)
            assert time.monotonic() < deadline, "no partitions assigned"
        partitions = sorted(raw.assignment(), key=lambda tp: tp.partition)
        await raw.seek_to_beginning(*partitions)  # the records that waiting for the assignment fetched
        ends = await raw.end_offsets(partitions)
        while [tp for tp in partitions if await raw.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "the topic not read to its end within 30 s"
            batches = await raw.getmany(timeout_ms=500)
            for tp in sorted(batches, key=lambda t: t.partition):
                for record in batches[tp]:
                    consumed = await consumer.accept(record)
                    if consumed is not None:
                        found.append(consumed.event)
    return found


@pytest.fixture(scope="module")
def stack(
    kube_apiserver: KubeConnection, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("deschedule-pipeline")
    policy = work / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    with KubeControlPlane() as plane, empty_kafka() as bootstrap, scratch_database(database_url, "dsch") as url:
        db.upgrade(DatabaseSettings(url=url))
        asyncio.run(create_pipeline_topics(KafkaSettings(bootstrap=bootstrap)))
        kubeconfig = str(plane.kubeconfig_path)
        args = {
            "audit": ["run"],
            "inventory": ["run", "--data-dir", str(work / "inventory"), "--tick-seconds", "1"],
            "token-lag": ["run", "--data-dir", str(work / "token-lag")],
            "decision": [
                "run",
                "--descheduler-policy",
                str(policy),
                "--descheduling-interval",
                str(INTERVAL_S),
                "--descheduling-cooldown",
                "600",
            ],
            "binder": ["run", "--backend", "kube", "--kubeconfig", kubeconfig],
            "ingest": ["run", "--kubeconfig", kubeconfig, "--lease-namespace", "default"],
        }
        env = {"BERTH_KAFKA_BOOTSTRAP": bootstrap, "BERTH_DATABASE_URL": url, "BERTH_LOG_LEVEL": "info"}
        with plane.connection().api_client() as api:
            _apply_crds(api)
            with Supervisor(work / "logs", env) as services:
                for name in SERVICES:
                    services.start(name, args[name], ready_timeout=120)
                yield Stack(api, services, KafkaSettings(bootstrap=bootstrap), url)


def _pod(name: str, app: str, owner_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": app},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app, "uid": owner_uid, "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "berth",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {POOL_LABEL: POOL},
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "500m"}}}
            ],
        },
    }


def _gone(stack: Stack, name: str) -> bool:
    pod = stack.pods().get(name)
    return pod is None or pod.metadata.deletion_timestamp is not None


def _replay(database_url: str) -> subprocess.CompletedProcess[str]:
    berth = str(Path(sys.executable).with_name("berth"))
    env = {**os.environ, "BERTH_DATABASE_URL": database_url}
    return subprocess.run([berth, "audit", "replay"], env=env, capture_output=True, text=True, timeout=120)


def _metric(stack: Stack, service: str, sample: str) -> float:
    port = stack.services.services[service].metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(sample + " ")]
    return values[0] if values else 0.0


def test_the_running_services_evict_a_pod_on_a_tainted_node_and_berth_places_its_successor(stack: Stack) -> None:
    core = stack.core
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    labels = {POOL_LABEL: POOL}
    (bad,) = create_fake_nodes(stack.api, 1, gpus=0, prefix=f"{POOL}-bad-", cpu="8", labels=labels)
    web_owner, cache_owner = str(uuid.uuid4()), str(uuid.uuid4())
    PolicyV1Api(stack.api).create_namespaced_pod_disruption_budget(
        NAMESPACE,
        {"metadata": {"name": "cache"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "cache"}}}},
    )
    for body in (_pod("web-0", "web", web_owner), _pod("cache-0", "cache", cache_owner)):
        core.create_namespaced_pod(NAMESPACE, body)

    # Berth places both on the only node; a kubelet would then report them Running.
    _wait(lambda: all(p.spec.node_name == bad for p in stack.pods().values()) and len(stack.pods()) == 2, "both bound")
    web_uid = stack.pods()["web-0"].metadata.uid
    for name in ("web-0", "cache-0"):
        core.patch_namespaced_pod_status(name, NAMESPACE, {"status": {"phase": "Running"}})

    def running_seen() -> bool:
        seen = {e.pod.name for e in stack.inputs() if isinstance(e, PodObserved) and e.pod.phase == "Running"}
        return {"web-0", "cache-0"} <= seen

    _wait(running_seen, "the cell told that both pods run")

    # The node goes into maintenance after the pods were placed; a good node joins.
    (good,) = create_fake_nodes(stack.api, 1, gpus=0, prefix=f"{POOL}-good-", cpu="8", labels=labels)
    core.patch_node(bad, {"spec": {"taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}})

    _wait(lambda: _gone(stack, "web-0"), "web-0 evicted")

    # The binder reports the apiserver's refusal of cache-0's eviction back to the cell.
    def cache_refused() -> list[CommandResult]:
        return [
            e
            for e in stack.inputs()
            if isinstance(e, CommandResult)
            and e.target == f"{NAMESPACE}/cache-0"
            and e.command_type.endswith("evict-pod.v1")
        ]

    [refusal] = _wait(cache_refused, "the result of cache-0's eviction")
    assert refusal.status == "conflict" and "disruption budget" in refusal.reason, refusal
    assert "still refused after" in refusal.reason and refusal.attempts > 1
    assert not _gone(stack, "cache-0") and stack.pods()["cache-0"].spec.node_name == bad

    # The evictions are decisions of the cell, with the strategy that made them.
    evicting = {d.subject: d for d in stack.decisions() if d.outcome == "evicting"}
    assert set(evicting) == {f"{NAMESPACE}/web-0", f"{NAMESPACE}/cache-0"}
    assert evicting[f"{NAMESPACE}/web-0"].node == bad
    assert evicting[f"{NAMESPACE}/web-0"].message.startswith("descheduler RemovePodsViolatingNodeTaints: ")
    assert (
        _metric(stack, "decision", 'berth_descheduler_evictions_total{strategy="RemovePodsViolatingNodeTaints"}') == 2
    )

    # Its ReplicaSet creates the successor; Berth places it on the good node.
    core.create_namespaced_pod(NAMESPACE, _pod("web-1", "web", web_owner))
    placed = _wait(lambda: stack.pods().get("web-1") and stack.pods()["web-1"].spec.node_name, "web-1 bound")
    assert placed == good and stack.pods()["web-1"].metadata.uid != web_uid

    # Later rounds evict nothing more (cache-0 and web are cooling down; web-1 is well placed).
    rounds_later = time.monotonic() + 3 * INTERVAL_S
    _wait(lambda: time.monotonic() > rounds_later, "three more rounds")
    assert sum(d.outcome == "evicting" for d in stack.decisions()) == 2

    # Every decision, the evictions included, replays from the audit store alone.
    stack.services.services["inventory"].stop()  # no more ticks: the logs stop growing
    _wait_for_audit(BerthSettings(kafka=stack.kafka, database=DatabaseSettings(url=stack.database_url)), timeout_s=60)
    replayed = _replay(stack.database_url)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert ", 0 mismatch(es)" in replayed.stdout, replayed.stdout
    compared = int(replayed.stdout.split(" decisions compared")[0].rsplit(" ", 1)[1])
    assert compared >= len(stack.decisions()) > 0
