"""The binder against the in-memory backend: idempotency, conflicts, retries, dead letters, gangs."""

from __future__ import annotations

import asyncio
import base64

import pytest
from berth.schemas import CordonNode, EvictPod, PlacePods, PodPlacement, ScalePool
from berth.schemas.samples import T0
from berth.services.binder.applier import Binder, RetryPolicy
from berth.services.binder.ports import Outcome
from berth.services.binder.ratelimit import TokenBucket
from berth.services.binder.service import CommandHandler, SourceRecord
from berth_dev.binder.fake import FakeCluster

NO_WAIT = RetryPolicy(max_attempts=3, initial_backoff_s=0, max_backoff_s=0, jitter_s=0)


async def _no_sleep(_: float) -> None:
    return None


def binder(cluster: FakeCluster, retry: RetryPolicy = NO_WAIT) -> Binder:
    return Binder(cluster, limiter=TokenBucket(0, 1), retry=retry, sleep=_no_sleep, clock=lambda: T0)


def cluster(*pods: str, nodes=("node-a", "node-b")) -> FakeCluster:
    fake = FakeCluster(nodes=set(nodes))
    for name in pods:
        fake.add_pod("ml", name)
    return fake


def place(*members: tuple[str, str], command_id: str = "cmd-1", victims=(), cell: int = 0, uid=None) -> PlacePods:
    return PlacePods(
        command_id=command_id,
        decision_id=f"dec-{command_id}",
        cell=cell,
        issued_at=T0,
        victims=victims,
        pod_group="g" if len(members) > 1 else None,
        placements=tuple(
            PodPlacement(pod_uid=uid or f"uid-{pod}", namespace="ml", name=pod, node=node, gpu_devices=(0,))
            for pod, node in members
        ),
    )


class RecordingOutputs:
    def __init__(self, cells=frozenset({0, 1})):
        self.cells = cells
        self.results, self.dead_letters, self.flushes = [], [], 0

    async def result(self, result, cell):
        self.results.append((cell, result))

    async def dead_letter(self, letter):
        self.dead_letters.append(letter)

    async def flush(self):
        self.flushes += 1


def source(offset: int = 7) -> SourceRecord:
    return SourceRecord("berth.scheduler.commands.v1", 2, offset, b"key", b'{"body": 1}', (("ce_id", b"x"),))


# --- binding -------------------------------------------------------------------------------------


async def test_bind_applies_and_records_devices():
    fake = cluster("p1")
    verdict = await binder(fake).apply(place(("p1", "node-a")))
    assert verdict.result.status == "applied" and verdict.dead_letter_reason is None
    assert verdict.result.target == "ml/p1" and verdict.result.attempts == 1
    assert fake.pods["ml/p1"].node == "node-a" and fake.pods["ml/p1"].gpu_devices == (0,)


async def test_reapplying_a_bind_to_the_same_node_is_applied():
    fake = cluster("p1")
    await binder(fake).apply(place(("p1", "node-a")))
    # A fresh binder (a restart) sees the same command again: applied, nothing changes.
    again = await binder(fake).apply(place(("p1", "node-a")))
    assert again.result.status == "applied" and again.result.reason == "ml/p1: already bound"
    assert fake.pods["ml/p1"].node == "node-a"


async def test_duplicate_command_in_one_process_does_not_touch_the_cluster_again():
    fake = cluster("p1")
    b = binder(fake)
    first = await b.apply(place(("p1", "node-a")))
    second = await b.apply(place(("p1", "node-a")))
    assert second == first and fake.count("bind") == 1


@pytest.mark.parametrize(
    "setup, reason",
    [
        (lambda f: f.add_pod("ml", "p1", node="node-b"), "already assigned to node 'node-b'"),
        (
            lambda f: f.add_pod("ml", "p1", uid="uid-other"),
            "UID in precondition: uid-p1, UID in object meta: uid-other",
        ),
        (lambda f: None, 'pods "p1" not found'),
    ],
)
async def test_bind_conflicts(setup, reason):
    fake = cluster()
    setup(fake)
    verdict = await binder(fake).apply(place(("p1", "node-a")))
    assert verdict.result.status == "conflict" and reason in verdict.result.reason
    assert verdict.dead_letter_reason is None


async def test_transient_errors_are_retried_then_applied():
    fake = cluster("p1")
    fake.fail("bind", [Outcome.retryable("HTTP 503"), Outcome.retryable("timeout")])
    verdict = await binder(fake).apply(place(("p1", "node-a")))
    assert verdict.result.status == "applied" and verdict.result.attempts == 3
    assert fake.count("bind") == 3


async def test_retries_are_bounded_then_failed_and_dead_lettered():
    fake = cluster("p1")
    fake.fail("bind", [Outcome.retryable("HTTP 503: apiserver overloaded")] * 10)
    outputs = RecordingOutputs()
    verdict = await CommandHandler(binder(fake), outputs).handle(place(("p1", "node-a")), source())
    assert fake.count("bind") == NO_WAIT.max_attempts
    assert verdict.result.status == "failed" and verdict.result.attempts == NO_WAIT.max_attempts
    assert "gave up after 3 attempts: HTTP 503: apiserver overloaded" in verdict.result.reason
    assert [r.status for _, r in outputs.results] == ["failed"]
    [letter] = outputs.dead_letters
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("berth.scheduler.commands.v1", 2, 7)
    assert base64.b64decode(letter.value_b64) == b'{"body": 1}' and letter.consumer == "binder"
    assert "place-pods failed: ml/p1: gave up after 3 attempts" in letter.reason


async def test_a_failed_command_is_tried_again_when_it_comes_again():
    fake = cluster("p1")
    fake.fail("bind", [Outcome.permanent("webhook denied the request")])
    b = binder(fake)
    assert (await b.apply(place(("p1", "node-a")))).result.status == "failed"
    assert (await b.apply(place(("p1", "node-a")))).result.status == "applied"


async def test_permanent_errors_are_not_retried():
    fake = cluster("p1")
    fake.fail("bind", [Outcome.permanent("Binding.v1 is invalid: target.name: Required value")])
    verdict = await binder(fake).apply(place(("p1", "node-a")))
    assert verdict.result.status == "failed" and fake.count("bind") == 1
    assert verdict.dead_letter_reason and "target.name: Required value" in verdict.dead_letter_reason


async def test_a_backend_exception_counts_as_transient():
    class Exploding(FakeCluster):
        async def bind(self, placement):
            raise RuntimeError("boom")

    verdict = await binder(Exploding(nodes={"node-a"})).apply(place(("p1", "node-a")))
    assert verdict.result.status == "failed" and "RuntimeError: boom" in verdict.result.reason


async def test_backoff_grows_exponentially():
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    fake = cluster("p1")
    fake.fail("bind", [Outcome.retryable("503")] * 4)
    b = Binder(
        fake,
        limiter=TokenBucket(0, 1),
        sleep=sleep,
        retry=RetryPolicy(max_attempts=5, initial_backoff_s=0.1, max_backoff_s=0.3, jitter_s=0),
    )
    assert (await b.apply(place(("p1", "node-a")))).result.status == "applied"
    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.3])


# --- gangs ---------------------------------------------------------------------------------------


async def test_gang_binds_every_member():
    fake = cluster("w0", "w1", "w2")
    verdict = await binder(fake).apply(place(("w0", "node-a"), ("w1", "node-a"), ("w2", "node-b")))
    assert verdict.result.status == "applied"
    assert [fake.pods[f"ml/w{i}"].node for i in range(3)] == ["node-a", "node-a", "node-b"]


async def test_gang_with_a_conflicting_member_binds_nothing_and_names_each_problem():
    fake = cluster("w0", "w2")
    fake.add_pod("ml", "w1", node="node-b")
    verdict = await binder(fake).apply(place(("w0", "node-a"), ("w1", "node-a"), ("w2", "node-a"), ("w3", "node-a")))
    assert verdict.result.status == "conflict"
    assert "ml/w1: pod ml/w1 is already assigned to node 'node-b'" in verdict.result.reason
    assert 'ml/w3: pods "w3" not found' in verdict.result.reason
    assert fake.pods["ml/w0"].node is None and fake.pods["ml/w2"].node is None
    assert fake.count("bind") == 0


async def test_gang_member_failing_at_bind_time_reports_the_partial_gang():
    fake = cluster("w0", "w1")
    fake.fail("bind", [Outcome.conflict('nodes "node-a" not found')])
    verdict = await binder(fake).apply(place(("w0", "node-a"), ("w1", "node-a")))
    assert verdict.result.status == "conflict"
    assert "not found" in verdict.result.reason and "bound anyway: ml/w" in verdict.result.reason


async def test_victims_are_evicted_before_binding():
    fake = cluster("low", "high")
    fake.pods["ml/low"].node = "node-a"
    verdict = await binder(fake).apply(place(("high", "node-a"), victims=("ml/low", "ml/already-gone")))
    assert verdict.result.status == "applied"
    assert "ml/low" not in fake.pods and fake.calls[:3] == [
        ("nominate", "ml/high"),
        ("evict", "ml/low"),
        ("evict", "ml/already-gone"),
    ]
    assert fake.nominated == {"ml/high": "node-a"}
    assert fake.pods["ml/high"].node == "node-a"


# --- other commands ------------------------------------------------------------------------------


async def test_evict_scale_and_cordon():
    fake = cluster("p1")
    fake.pools["serving/chat"] = 1
    b = binder(fake)
    evict = EvictPod(command_id="e", decision_id="d", issued_at=T0, pod_uid="uid-p1", namespace="ml", name="p1")
    assert (await b.apply(evict)).result.status == "applied" and "ml/p1" not in fake.pods
    again = await binder(fake).apply(evict)
    assert again.result.status == "applied" and again.result.reason == "ml/p1: already gone"
    fake.add_pod("ml", "p1", uid="uid-new")
    recreated = await binder(fake).apply(evict)
    assert recreated.result.status == "conflict" and "ml/p1" in fake.pods
    scale = ScalePool(
        command_id="s", decision_id="d", issued_at=T0, pool="chat", namespace="serving", replicas=4, previous_replicas=1
    )
    assert (await b.apply(scale)).result.status == "applied" and fake.pools["serving/chat"] == 4
    missing = scale.model_copy(update={"command_id": "s2", "pool": "nope"})
    assert (await b.apply(missing)).result.status == "conflict"
    cordon = CordonNode(command_id="c", decision_id="d", issued_at=T0, node="node-b")
    assert (await b.apply(cordon)).result.status == "applied" and fake.cordoned == {"node-b"}
    gone = CordonNode(command_id="c2", decision_id="d", issued_at=T0, node="node-z")
    assert (await b.apply(gone)).result.status == "conflict"


async def test_an_eviction_a_disruption_budget_keeps_refusing_is_reported_as_a_conflict_not_dead_lettered():
    fake = cluster("p1")
    refusal = "eviction refused for now: Cannot evict pod as it would violate the pod's disruption budget."
    fake.fail("evict", [Outcome.refused_for_now(refusal)] * 10)
    outputs = RecordingOutputs()
    evict = EvictPod(command_id="e", decision_id="d", issued_at=T0, pod_uid="uid-p1", namespace="ml", name="p1")
    verdict = await CommandHandler(binder(fake), outputs).handle(evict, source())
    assert fake.count("evict") == NO_WAIT.max_attempts and "ml/p1" in fake.pods
    assert verdict.result.status == "conflict" and verdict.dead_letter_reason is None
    assert f"ml/p1: still refused after 3 attempts: {refusal}" == verdict.result.reason
    assert [r.status for _, r in outputs.results] == ["conflict"] and outputs.dead_letters == []


async def test_an_eviction_the_budget_allows_on_a_later_attempt_is_applied():
    fake = cluster("p1")
    fake.fail("evict", [Outcome.refused_for_now("eviction refused for now: disruption budget")])
    evict = EvictPod(command_id="e", decision_id="d", issued_at=T0, pod_uid="uid-p1", namespace="ml", name="p1")
    verdict = await binder(fake).apply(evict)
    assert verdict.result.status == "applied" and verdict.result.attempts == 2 and "ml/p1" not in fake.pods


async def test_an_eviction_keeps_a_pod_with_the_volumes_its_command_protects():
    fake = cluster()
    fake.add_pod("ml", "scratch", volumes=[{"name": "tmp", "emptyDir": {}}])
    fake.add_pod("ml", "claim", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])

    def evict(name: str, **keep: bool) -> EvictPod:
        return EvictPod(
            command_id=f"e-{name}-{sorted(keep.items())}",
            decision_id="d",
            issued_at=T0,
            pod_uid=f"uid-{name}",
            namespace="ml",
            name=name,
            **keep,
        )

    kept = await binder(fake).apply(evict("scratch", keep_with_local_storage=True))
    assert kept.result.status == "conflict" and "local storage" in kept.result.reason and "ml/scratch" in fake.pods
    assert kept.dead_letter_reason is None and kept.result.attempts == 1  # not retried: the pod will not change
    kept = await binder(fake).apply(evict("claim", keep_with_local_storage=True, keep_with_pvc=True))
    assert kept.result.status == "conflict" and "PersistentVolumeClaim" in kept.result.reason
    assert (await binder(fake).apply(evict("claim", keep_with_local_storage=True))).result.status == "applied"
    assert (await binder(fake).apply(evict("scratch"))).result.status == "applied"
    assert fake.pods == {}


# --- the handler: routing, ordering --------------------------------------------------------------


async def test_results_that_did_not_apply_go_to_the_issuing_cell():
    fake = cluster("p1", "p2")
    outputs = RecordingOutputs()
    handler = CommandHandler(binder(fake), outputs)
    await handler.handle_batch(
        [
            (place(("p1", "node-a"), command_id="a", cell=1), source(1)),
            (place(("p2", "node-a"), command_id="b", cell=0), source(2)),
            (place(("p3", "node-a"), command_id="c", cell=1), source(3)),  # no such pod
        ]
    )
    # An applied placement reaches its cell as the bound pod's event; only the conflict is copied.
    assert sorted((r.command_id, cell, r.status) for cell, r in outputs.results) == [
        ("a", None, "applied"),
        ("b", None, "applied"),
        ("c", 1, "conflict"),
    ]
    assert outputs.dead_letters == []


async def test_a_command_for_an_unknown_cell_is_refused_and_dead_lettered():
    fake = cluster("p1")
    outputs = RecordingOutputs(cells=frozenset({0, 1}))
    verdict = await CommandHandler(binder(fake), outputs).handle(place(("p1", "node-a"), cell=5), source())
    assert verdict.result.status == "failed" and "cell 5 is not a partition" in verdict.result.reason
    assert fake.calls == [] and len(outputs.dead_letters) == 1
    assert [(cell, r.status) for cell, r in outputs.results] == [(None, "failed")]  # results topic only


async def test_commands_for_the_same_pod_apply_in_log_order():
    fake = cluster("p1")
    evict = EvictPod(command_id="e", decision_id="d", issued_at=T0, pod_uid="uid-p1", namespace="ml", name="p1")
    outputs = RecordingOutputs()
    verdicts = await CommandHandler(binder(fake), outputs).handle_batch(
        [(place(("p1", "node-a")), source(1)), (evict, source(2))]
    )
    assert [v.result.status for v in verdicts] == ["applied", "applied"]
    assert [op for op, _ in fake.calls] == ["bind", "evict"] and "ml/p1" not in fake.pods


# --- rate limit ----------------------------------------------------------------------------------


async def test_token_bucket_allows_a_burst_then_paces_at_qps():
    now = [0.0]
    bucket = TokenBucket(50, 100, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(100)] == [0.0] * 100
    waits = [bucket.reserve() for _ in range(3)]
    assert waits == pytest.approx([0.02, 0.04, 0.06])
    now[0] = 10.0  # refilled, but never beyond the burst
    assert bucket.reserve() == 0.0 and bucket._tokens == pytest.approx(99)


async def test_every_request_takes_a_token_retries_included():
    taken = []

    class CountingBucket(TokenBucket):
        async def acquire(self):
            taken.append(1)

    fake = cluster("w0", "w1")
    fake.fail("bind", [Outcome.retryable("503")])
    b = Binder(fake, limiter=CountingBucket(50, 100), retry=NO_WAIT, sleep=_no_sleep)
    await b.apply(place(("w0", "node-a"), ("w1", "node-a")))
    assert len(taken) == len(fake.calls) == 2 + 3  # two checks, two binds, one retry


async def _take_in_order(bucket: TokenBucket, urgent: int) -> list[str]:
    """A deferrable caller arrives while one urgent caller is queued, then ``urgent`` more arrive."""
    order: list[str] = []

    async def take(name: str, deferrable: bool = False) -> None:
        await bucket.acquire(deferrable=deferrable)
        order.append(name)

    await bucket.acquire()  # the burst is spent: everyone after this queues
    tasks = [asyncio.create_task(take("urgent-0"))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(take("report", deferrable=True)))
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(take(f"urgent-{i}")) for i in range(1, urgent + 1)]
    await asyncio.gather(*tasks)
    return order


async def test_a_deferrable_caller_lets_queued_urgent_callers_go_first():
    order = await _take_in_order(TokenBucket(200, 1), urgent=3)
    assert order == ["urgent-0", "urgent-1", "urgent-2", "urgent-3", "report"]


async def test_a_deferrable_caller_is_never_starved():
    bucket = TokenBucket(200, 1, max_defer_s=0.02)
    await bucket.acquire()
    loop = asyncio.get_running_loop()
    finished: dict[str, float] = {}

    async def urgent_stream() -> None:  # a new urgent caller every token's time for 200 ms
        callers = []
        for _ in range(40):
            callers.append(asyncio.create_task(bucket.acquire()))
            await asyncio.sleep(0.005)
        await asyncio.gather(*callers)
        finished["urgent"] = loop.time()

    async def report() -> None:
        await asyncio.sleep(0.01)
        await bucket.acquire(deferrable=True)
        finished["report"] = loop.time()

    await asyncio.gather(urgent_stream(), report())
    assert finished["report"] < finished["urgent"] - 0.1
