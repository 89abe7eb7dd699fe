"""What the Kubernetes backend needs from the rest of the binder, against the in-memory backend:
nomination before preemption, per-request metering, and unschedulable reports (dedupe, LRU)."""

from __future__ import annotations

from berth.schemas import DecisionRecord, InputPosition
from berth.schemas.samples import T0
from berth.services.binder.applier import Binder
from berth.services.binder.ports import Outcome
from berth.services.binder.ratelimit import TokenBucket
from berth.services.binder.unschedulable import UnschedulableReporter, latest_verdicts
from test_binder import NO_WAIT, _no_sleep, binder, cluster, place

MESSAGE = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def verdict(subject: str, outcome: str = "unschedulable", message: str = MESSAGE, offset: int = 0) -> DecisionRecord:
    return DecisionRecord(
        decision_id=f"d-{offset}",
        cell="cell-0",
        input=InputPosition(topic="t", partition=0, offset=offset),
        subject=subject,
        outcome=outcome,
        message=message if outcome == "unschedulable" else "",
        config_version="v",
        snapshot_hash="s",
        config_hash="c",
        decision_hash="h",
        event_time=T0,
    )


# -- nomination -----------------------------------------------------------------------------------


async def test_a_preemptor_is_nominated_before_its_victims_are_evicted():
    fake = cluster("low", "high")
    fake.pods["ml/low"].node = "node-a"
    verdict_ = await binder(fake).apply(place(("high", "node-a"), victims=("ml/low",)))
    assert verdict_.result.status == "applied"
    assert [op for op, _ in fake.calls] == ["nominate", "evict", "bind"]
    assert fake.nominated == {"ml/high": "node-a"}


async def test_no_victim_is_evicted_for_a_preemptor_that_is_gone():
    fake = cluster("low")
    fake.pods["ml/low"].node = "node-a"
    result = (await binder(fake).apply(place(("gone", "node-a"), victims=("ml/low",)))).result
    assert result.status == "conflict" and 'pods "gone" not found' in result.reason
    assert "ml/low" in fake.pods and fake.count("evict") == 0


async def test_a_failed_nomination_stops_the_preemption():
    fake = cluster("low", "high")
    fake.fail("nominate", [Outcome.permanent("forbidden")])
    result = (await binder(fake).apply(place(("high", "node-a"), victims=("ml/low",)))).result
    assert result.status == "failed" and fake.count("evict") == 0 and fake.count("bind") == 0


async def test_without_victims_nothing_is_nominated():
    fake = cluster("p1")
    assert (await binder(fake).apply(place(("p1", "node-a")))).result.status == "applied"
    assert fake.count("nominate") == 0


# -- metering -------------------------------------------------------------------------------------


class CountingBucket(TokenBucket):
    def __init__(self) -> None:
        super().__init__(0, 1)
        self.taken = 0

    async def acquire(self) -> None:
        self.taken += 1


async def test_a_backend_that_meters_its_requests_is_not_metered_again():
    metering = cluster("p1")
    metering.meters_requests = True  # type: ignore[misc]  # as the Kubernetes backend says
    bucket = CountingBucket()
    b = Binder(metering, limiter=bucket, retry=NO_WAIT, sleep=_no_sleep)
    assert (await b.apply(place(("p1", "node-a")))).result.status == "applied"
    assert bucket.taken == 0 and metering.count("bind") == 1
    plain_bucket = CountingBucket()
    await Binder(cluster("p1"), limiter=plain_bucket, retry=NO_WAIT, sleep=_no_sleep).apply(place(("p1", "node-a")))
    assert plain_bucket.taken == 1


# -- unschedulable reports ------------------------------------------------------------------------


def test_only_the_last_verdict_per_pod_counts():
    records = [
        verdict("ml/a", message="first", offset=1),
        verdict("ml/b", offset=2),
        verdict("ml/a", message="second", offset=3),
        verdict("ml/b", "placed", offset=4),
        verdict("node-x", "cordoned", offset=5),
    ]
    assert latest_verdicts(records) == {"ml/a": "second", "ml/b": None}


def test_a_gangs_verdict_is_reported_on_each_member():
    gang = verdict("ml/train", offset=1).model_copy(update={"pods": ("ml/t0", "ml/t1")})
    placed = verdict("ml/train", "placed", offset=2).model_copy(update={"pods": ("ml/t0",)})
    assert latest_verdicts([gang]) == {"ml/t0": MESSAGE, "ml/t1": MESSAGE}
    assert latest_verdicts([gang, placed]) == {"ml/t0": None, "ml/t1": MESSAGE}


async def test_a_verdict_is_reported_once_while_its_message_is_unchanged():
    fake = cluster("p1")
    reporter = UnschedulableReporter(binder(fake))
    assert await reporter.handle_batch([verdict("ml/p1")]) == {"ml/p1": "reported"}
    assert await reporter.handle_batch([verdict("ml/p1", offset=1)]) == {"ml/p1": "unchanged"}
    assert fake.count("report_unschedulable") == 1 and fake.events == [("FailedScheduling", "ml/p1", MESSAGE)]
    changed = MESSAGE.replace("2 Insufficient", "1 node(s) were unschedulable, 1 Insufficient")
    assert await reporter.handle_batch([verdict("ml/p1", message=changed, offset=2)]) == {"ml/p1": "reported"}
    assert fake.unschedulable["ml/p1"] == changed and len(fake.events) == 2


async def test_after_a_restart_the_backend_keeps_the_event_from_repeating():
    fake = cluster("p1")
    await UnschedulableReporter(binder(fake)).handle_batch([verdict("ml/p1")])
    restarted = UnschedulableReporter(binder(fake))  # empty LRU
    assert await restarted.handle_batch([verdict("ml/p1")]) == {"ml/p1": "skipped"}
    assert len(fake.events) == 1


async def test_a_placement_forgets_the_message_so_a_later_verdict_is_reported_again():
    fake = cluster("p1")
    reporter = UnschedulableReporter(binder(fake))
    await reporter.handle_batch([verdict("ml/p1")])
    await reporter.handle_batch([verdict("ml/p1", "placed", offset=1)])
    fake.unschedulable.clear()  # e.g. re-created under the same name, no condition yet
    assert await reporter.handle_batch([verdict("ml/p1", offset=2)]) == {"ml/p1": "reported"}


async def test_gone_pods_and_gangs_are_counted_not_remembered():
    fake = cluster("p1")
    reporter = UnschedulableReporter(binder(fake))
    assert await reporter.handle_batch([verdict("ml/gang-of-four"), verdict("ml/p1", offset=1)]) == {
        "ml/gang-of-four": "gone",
        "ml/p1": "reported",
    }
    fake.add_pod("ml", "gang-of-four")
    assert (await reporter.handle_batch([verdict("ml/gang-of-four", offset=2)]))["ml/gang-of-four"] == "reported"


async def test_the_lru_is_bounded():
    fake = cluster("a", "b", "c")
    reporter = UnschedulableReporter(binder(fake), remember=2)
    await reporter.handle_batch([verdict("ml/a"), verdict("ml/b", offset=1), verdict("ml/c", offset=2)])
    assert list(reporter._reported) == ["ml/b", "ml/c"]


async def test_a_transient_failure_is_retried_then_counted_failed_and_not_remembered():
    fake = cluster("p1")
    fake.fail("report_unschedulable", [Outcome.retryable("503")] * 3)
    reporter = UnschedulableReporter(binder(fake))
    assert await reporter.handle_batch([verdict("ml/p1")]) == {"ml/p1": "failed"}
    assert fake.count("report_unschedulable") == 3
    assert await reporter.handle_batch([verdict("ml/p1", offset=1)]) == {"ml/p1": "reported"}


def _headers(record: DecisionRecord) -> tuple[bytes | None, bytes | None, bytes | None]:
    """What the binder's report loop reads of a record before deciding to parse it."""
    from berth.schemas.envelope import encode

    header = dict(encode(record, source="berth/decision").headers).get
    return header("ce_type"), header("ce_outcome"), header("ce_subject")


async def test_the_report_loop_parses_only_records_that_can_change_a_report():
    fake = cluster("p1", "t0", "t1")
    reporter = UnschedulableReporter(binder(fake))
    assert reporter.wants(*_headers(verdict("ml/p1")))
    assert not reporter.wants(*_headers(verdict("ml/p1", "placed", offset=1)))  # never reported
    assert not reporter.wants(*_headers(verdict("ml/p1", "preempting", offset=1)))
    assert not reporter.wants(b"io.berth.scheduler.config.v1", None, None)
    assert reporter.wants(b"io.berth.scheduler.decision.v1", None, b"ml/p1")  # an older producer: no ce_outcome
    await reporter.handle_batch([verdict("ml/p1")])
    assert reporter.wants(*_headers(verdict("ml/p1", "placed", offset=2)))  # forgets the reported message
    gang = verdict("ml/train", offset=3).model_copy(update={"pods": ("ml/t0", "ml/t1")})
    await reporter.handle_batch([gang])
    assert reporter.wants(*_headers(verdict("ml/train", "placed", offset=4)))  # its members were reported
    await reporter.handle_batch([verdict("ml/train", "placed", offset=4).model_copy(update={"pods": ("ml/t0",)})])
    assert reporter.wants(*_headers(verdict("ml/train", "placed", offset=5)))  # placed in parts: t1 later
    assert not reporter.wants(*_headers(verdict("ml/other", "placed", offset=6)))
