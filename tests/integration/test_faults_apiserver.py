"""kube-apiserver restarted mid-run: ingest re-lists and misses or repeats no pod, the binder
retries its binds, no pod is bound twice, events are still written (issue 15, item 3;
docs/reliability.md).

The stack: an etcd + kube-apiserver of this module's own (the restart must not disturb other
tests), a Kafka broker of its own, a fresh database on the session's Postgres, and every Berth
service as a process (audit, inventory, token-lag, decision, ``binder --backend kube``, ingest with
a 4 s Lease). Two node pools in the two decision cells, 6 fake 8-GPU nodes each (no kubelet).

The run: pods are created one after another (retrying while the apiserver is away); once a
quarter of them is bound, the binder is paused while a burst of pods is created and decided, the
apiserver is killed (SIGKILL), the binder resumes — its binds meet the apiserver away — and after
a few seconds the apiserver starts again on the same etcd. Ingest's watches break and its Lease cannot be renewed, so
its term ends; the next term re-reads what it published from Kafka and re-lists. Binds refused meanwhile are
retried (an apiserver that does not answer at all is waited out without spending the binder's
attempt budget). At the end every pod is bound once, on a node with room, with one ``Scheduled``
event, every placing command applied, and the audit holds and replays every decision.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from berth.services.audit import db
from berth_dev.demo import _kafka_counts, _replay, _wait_for_audit
from berth_dev.devstack.fakenodes import create_fake_nodes
from berth_dev.devstack.kube import KubeConnection, KubeControlPlane
from berth_dev.devstack.scratch import empty_kafka, scratch_database
from berth_dev.supervisor import Supervisor, create_pipeline_topics
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings
from tests.faults_kit import (
    GPU,
    KUBE_SERVICES,
    POOL_LABEL,
    apply_crds,
    devices_of,
    kube_service_args,
    log_lines,
    metric_value,
    placements,
    pod_body,
    pod_observations,
    pools_in_both_cells,
    results,
    scrape,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

NAMESPACE = "faults"
NODES_PER_POOL = 6
PODS = 60
BURST = 6
"""Pods created all at once just before the apiserver stops: their binds reach it while it is away."""
GPUS = (1, 2, 1)
"""GPUs per pod, in turn: 60 pods ask for 80 of the 96 GPUs."""
CREATE_EVERY_S = 0.4
DOWN_S = 5.0


@pytest.fixture(scope="module")
def control_plane(kube_apiserver: KubeConnection) -> Iterator[KubeControlPlane]:
    """A control plane of this module's own (``kube_apiserver`` settles availability)."""
    with KubeControlPlane() as plane:
        yield plane


@pytest.fixture(scope="module")
def module_kafka(kafka_bootstrap: str) -> Iterator[str]:
    with empty_kafka() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def module_database(database_url: str) -> Iterator[str]:
    with scratch_database(database_url, "faults_apiserver") as url:
        db.upgrade(DatabaseSettings(url=url))
        yield url


def _create_with_retry(core: CoreV1Api, body: dict[str, Any], deadline: float) -> str:
    """Create a pod, retrying while the apiserver is away; a create that went through before the
    connection dropped comes back as 409 on the retry, and counts. Returns the UID."""
    name = body["metadata"]["name"]
    while True:
        try:
            return core.create_namespaced_pod(NAMESPACE, body, _request_timeout=5).metadata.uid
        except ApiException as exc:
            if exc.status == 409:
                return core.read_namespaced_pod(name, NAMESPACE, _request_timeout=5).metadata.uid
            if exc.status and exc.status < 500 and exc.status != 429:
                raise
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"could not create pod {name}")
        time.sleep(0.5)


def test_apiserver_restart_mid_run_binds_every_pod_once(
    control_plane: KubeControlPlane, module_kafka: str, module_database: str, tmp_path: Path
):
    kubeconfig = control_plane.kubeconfig_path
    settings = BerthSettings(
        kafka=KafkaSettings(bootstrap=module_kafka), database=DatabaseSettings(url=module_database)
    )
    asyncio.run(create_pipeline_topics(settings.kafka))
    env = {
        "BERTH_KAFKA_BOOTSTRAP": module_kafka,
        "BERTH_DATABASE_URL": module_database,
        "BERTH_LOG_LEVEL": "info",
        "BERTH_LOG_FORMAT": "json",
    }
    args = kube_service_args(kubeconfig, tmp_path)
    started = time.monotonic()
    timeline: list[str] = []

    def note(what: str) -> None:
        timeline.append(f"{time.monotonic() - started:5.1f}s {what}")
        print(timeline[-1], file=sys.stderr, flush=True)

    with control_plane.connection().api_client() as api, Supervisor(tmp_path / "logs", env) as services:
        apply_crds(api)
        core = CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        pools = pools_in_both_cells("faults")
        nodes = {
            node: pool
            for pool in pools
            for node in create_fake_nodes(api, NODES_PER_POOL, gpus=8, prefix=f"{pool}-", labels={POOL_LABEL: pool})
        }
        for name in KUBE_SERVICES:
            services.start(name, args[name], wait=False)
        for name in KUBE_SERVICES:
            services.services[name].wait_ready(timeout=150)
        note("services up")

        def pods() -> dict[str, Any]:
            services.check_alive()
            return {pod.metadata.name: pod for pod in core.list_namespaced_pod(NAMESPACE).items}

        # The cells learn their nodes first (a pod racing its nodes is another test's subject).
        warm_up = [pod_body(f"warm-up-{i}", pool) for i, pool in enumerate(pools)]
        for body in warm_up:
            core.create_namespaced_pod(NAMESPACE, body)
        wait_for(lambda: all(p.spec.node_name for p in pods().values()) and len(pods()) == 2, "warm-up bound", 120)
        for body in warm_up:
            core.delete_namespaced_pod(body["metadata"]["name"], NAMESPACE, grace_period_seconds=0)
        wait_for(lambda: not pods(), "warm-up pods gone", 30)
        note("warm-up done")

        bodies = [pod_body(f"p-{i:03d}", pools[i % 2], gpus=GPUS[i % len(GPUS)]) for i in range(PODS - BURST)]
        burst = [pod_body(f"burst-{i}", pools[i % 2], gpus=1) for i in range(BURST)]
        requested = {
            body["metadata"]["name"]: int(body["spec"]["containers"][0]["resources"]["requests"][GPU])
            for body in [*bodies, *burst]
        }
        uids: dict[str, str] = {}
        failures: list[BaseException] = []

        def create_steadily() -> None:
            try:
                for body in bodies:
                    uids[body["metadata"]["name"]] = _create_with_retry(core, body, time.monotonic() + 120)
                    time.sleep(CREATE_EVERY_S)
            except BaseException as exc:
                failures.append(exc)

        creator = threading.Thread(target=create_steadily, name="pod-creator")
        creator.start()
        try:
            wait_for(
                lambda: sum(1 for p in pods().values() if p.spec.node_name) >= PODS // 4,
                "a quarter of the pods bound",
                120,
            )
            assert creator.is_alive(), "the restart must land while pods are still being created"
            # Binds in flight when the apiserver goes: the binder is paused (SIGSTOP) while a burst
            # of pods is created and decided, the apiserver is killed (SIGKILL, as a crash would:
            # a SIGTERM'd one keeps answering while it drains), and the binder resumes to find it
            # away. Its pause is a few seconds, shorter than its Kafka session.
            binder = services.services["binder"]
            assert binder.pid is not None
            os.kill(binder.pid, signal.SIGSTOP)
            try:
                for body in burst:
                    uids[body["metadata"]["name"]] = core.create_namespaced_pod(NAMESPACE, body).metadata.uid
                time.sleep(2.0)  # ingest publishes them and the decision service decides them
                note("killing kube-apiserver")
                control_plane.stop_apiserver(kill=True)
            finally:
                os.kill(binder.pid, signal.SIGCONT)
            time.sleep(DOWN_S)
            note("starting kube-apiserver")
            control_plane.start_apiserver()
            note("kube-apiserver ready again")
        finally:
            creator.join()
        note("all pods created")
        assert not failures, failures
        bound = wait_for(
            lambda: (
                (found := pods()) and len(found) == PODS and all(p.spec.node_name for p in found.values()) and found
            ),
            "every pod bound",
            180,
        )
        note("every pod bound")

        # None lost, none re-created: every pod is the one created, bound on a node of its pool,
        # with GPUs of its own (requests ≤ capacity, each device given once).
        assert {name: pod.metadata.uid for name, pod in bound.items()} == uids
        by_node: dict[str, list[Any]] = defaultdict(list)
        for pod in bound.values():
            assert nodes[pod.spec.node_name] == pod.spec.node_selector[POOL_LABEL]
            assert len(devices_of(pod)) == requested[pod.metadata.name], (pod.metadata.name, devices_of(pod))
            by_node[pod.spec.node_name].append(pod)
        for node, placed in by_node.items():
            assert sum(requested[pod.metadata.name] for pod in placed) <= 8, node
            devices = [device for pod in placed for device in devices_of(pod)]
            assert len(devices) == len(set(devices)), (node, devices)
        # Bound once on the pipeline's own record: each pod in exactly one applied command. A bind
        # refused while the apiserver was away is retried: attempts it does not answer at all are
        # waited out (RetryPolicy.unanswered_patience_s, 60 s, longer than this restart) without
        # spending the budget of 5 answered attempts, so no command fails.
        commands, statuses = asyncio.run(placements(settings))
        ours = set(uids.values())
        applied: dict[str, set[str]] = defaultdict(set)
        for command_id, pod_uids in commands.items():
            if "applied" in statuses.get(command_id, ()):
                for uid in pod_uids:
                    applied[uid].add(command_id)
        assert {uid: len(applied[uid]) for uid in ours} == dict.fromkeys(ours, 1)
        placing = {command_id for command_id, pod_uids in commands.items() if ours & set(pod_uids)}
        outcomes = [result for result in asyncio.run(results(settings)) if result.command_id in placing]
        assert outcomes and all(result.status == "applied" for result in outcomes), [
            (r.status, r.reason) for r in outcomes if r.status != "applied"
        ]
        failed_commands = {result.command_id for result in outcomes if result.status == "failed"}
        retried = sum(1 for result in outcomes if result.attempts > 1)
        assert retried >= 1, "no bind met the stopped apiserver: the run did not test the binder's retries"
        requeued = {uid for command_id in failed_commands for uid in commands[command_id]}

        # Events still written: one Scheduled event per pod, and no FailedScheduling.
        def scheduled() -> dict[str, int] | None:
            found = Counter(
                event.involved_object.name
                for event in core.list_namespaced_event(NAMESPACE).items
                if event.reason == "Scheduled" and event.involved_object.name in requested
            )
            return dict(found) if len(found) == PODS else None

        assert wait_for(scheduled, "a Scheduled event for every pod", 60) == dict.fromkeys(requested, 1)
        names_by_uid = {uid: name for name, uid in uids.items()}
        failed = {
            event.involved_object.name
            for event in core.list_namespaced_event(NAMESPACE).items
            if event.reason == "FailedScheduling" and event.involved_object.name in requested
        }
        assert not failed and not requeued, (failed, {names_by_uid.get(uid) for uid in requeued})

        # Ingest: a new term re-listed; no pod missed, no observation published twice.
        observed = asyncio.run(pod_observations(settings, ours))
        assert {uid for uid, _, _ in observed} == ours
        repeated = {key: n for key, n in observed.items() if n > 1}
        assert not repeated, repeated
        ingest = services.services["ingest"]
        listed = log_lines(ingest.log_path, '"listed"')
        assert len([line for line in listed if '"pods"' in line]) >= 2, "ingest did not re-list pods"
        relists = metric_value(scrape(ingest.metrics_port), "berth_ingest_relists_total", 'resource="pods"')

        # The audit holds every decision once and replays it.
        audited = _wait_for_audit(settings, timeout_s=60)
        _, decisions_on_kafka = asyncio.run(_kafka_counts(settings))
        report = _replay(settings)
        assert audited == decisions_on_kafka > 0, (audited, decisions_on_kafka)
        assert report.compared == audited and report.mismatches == [], report.mismatches[:5]
        note("checked")
    print("\n" + "\n".join(timeline))
    print(
        f"{PODS} pods bound once; {len(outcomes)} placing commands, {retried} needed retries "
        f"(max attempts {max(r.attempts for r in outcomes)}), {len(failed_commands)} failed; "
        f"ingest relists metric {relists}, "
        f"'listed' lines {len(listed)}; {audited} decisions audited and replayed, 0 mismatches"
    )


# --- the binder's patience with an apiserver that does not answer (what the run above relies on) --


def _binder(fake: Any, **policy: Any) -> Any:
    from berth.schemas.samples import T0
    from berth.services.binder.applier import Binder, RetryPolicy
    from berth.services.binder.ratelimit import TokenBucket

    async def no_sleep(_: float) -> None:
        return None

    retry = RetryPolicy(**{"max_attempts": 3, "initial_backoff_s": 0, "max_backoff_s": 0, "jitter_s": 0, **policy})
    return Binder(fake, limiter=TokenBucket(0, 1), retry=retry, sleep=no_sleep, clock=lambda: T0)


def _place(pod: str) -> Any:
    from berth.schemas import PlacePods, PodPlacement
    from berth.schemas.samples import T0

    return PlacePods(
        command_id=f"cmd-{pod}",
        decision_id=f"dec-{pod}",
        cell=0,
        issued_at=T0,
        placements=(PodPlacement(pod_uid=f"uid-{pod}", namespace="ml", name=pod, node="node-a", gpu_devices=(0,)),),
    )


def _fake(pod: str) -> Any:
    from berth_dev.binder.fake import FakeCluster

    fake = FakeCluster(nodes={"node-a"})
    fake.add_pod("ml", pod)
    return fake


async def test_attempts_the_apiserver_does_not_answer_do_not_spend_the_bind_budget():
    from berth.services.binder.ports import Outcome

    fake = _fake("p1")
    fake.fail("bind", [Outcome.unanswered("Connection refused")] * 8)
    verdict = await _binder(fake).apply(_place("p1"))
    assert verdict.result.status == "applied" and verdict.result.attempts == 9


async def test_errors_the_apiserver_answers_with_still_spend_it_and_the_patience_is_bounded():
    from berth.services.binder.ports import Outcome

    fake = _fake("p1")
    fake.fail("bind", [Outcome.unanswered("refused")] * 4 + [Outcome.retryable("HTTP 503")] * 5)
    verdict = await _binder(fake).apply(_place("p1"))
    assert verdict.result.status == "failed" and verdict.result.attempts == 4 + 3
    fake = _fake("p2")
    fake.fail("bind", [Outcome.unanswered("refused")] * 1000)
    verdict = await _binder(fake, max_unanswered_attempts=10).apply(_place("p2"))
    assert verdict.result.status == "failed" and verdict.result.attempts == 10


def test_refused_or_cut_connections_are_no_answer_and_timeouts_are_not():
    import ssl
    from unittest import mock

    import aiohttp
    from berth.services.binder.kube_outcomes import Access, Reply, classify
    from berth.services.binder.kube_transport import _no_connection

    refused = aiohttp.ClientConnectorError(mock.Mock(ssl=True), ConnectionRefusedError(111, "Connection refused"))
    assert _no_connection(refused) and _no_connection(aiohttp.ServerDisconnectedError())
    assert _no_connection(aiohttp.ClientOSError(104, "Connection reset by peer"))
    assert _no_connection(ConnectionResetError())
    assert not _no_connection(TimeoutError()) and not _no_connection(aiohttp.ServerTimeoutError("read timed out"))
    certificate = aiohttp.ClientConnectorCertificateError(mock.Mock(ssl=True), ssl.SSLCertVerificationError("bad"))
    assert not _no_connection(certificate)
    access = Access("create", "pods/binding")
    assert classify(Reply(0, None, "refused", unreachable=True), access).no_answer
    assert not classify(Reply(0, None, "read timed out"), access).no_answer
    assert not classify(Reply(503, None, "overloaded"), access).no_answer
