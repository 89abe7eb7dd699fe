"""Unschedulable verdicts → the pod's ``PodScheduled=False`` condition and a ``FailedScheduling`` event.

The decision service does not command anything for a pod that does not fit: it records a
:class:`DecisionRecord` with outcome ``unschedulable`` and kube-scheduler's message on the
decisions topic. kube-scheduler would now mark the pod and emit an event; with the Kubernetes
backend the binder does it, reading that topic (:class:`UnschedulableReporter` is the part
without Kafka).

Repeats are avoided three times over: the decision service records a verdict again only when its
message changed; within a batch only the last verdict per pod counts; and a bounded LRU remembers
the message last reported per pod (forgotten when the pod is placed or gone), so the cluster is
asked nothing for an unchanged message. After a restart the LRU is empty, and the backend's
check of the pod's current condition keeps the event from being written a second time.

Gangs are decided as a whole: ``subject`` names the pod group and ``pods`` its members, and each
member is reported, as kube's coscheduling plugin marks each pod of a gang that cannot fit.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from berth.schemas import DecisionRecord
from prometheus_client import Counter

from berth.logs import get_logger

from .applier import Binder
from .ports import OutcomeKind

log = get_logger(__name__)
_DECISION_TYPE = DecisionRecord.model_fields["type"].default.encode()
REPORTS = Counter(
    "berth_binder_unschedulable_reports_total",
    "Unschedulable verdicts the binder handled, by result: reported (condition and event "
    "written), unchanged (same message as last reported), skipped (already reported or "
    "bound meanwhile), gone (no such pod), failed.",
    ["result"],
)


def latest_verdicts(records: Iterable[Any]) -> dict[str, str | None]:
    """``namespace/name`` → the last unschedulable message in ``records``, or None when the last
    word about that subject is that it was placed (nothing to report any more). Other records
    (other outcomes, configuration announcements) are ignored."""
    latest: dict[str, str | None] = {}
    for record in records:
        if not isinstance(record, DecisionRecord):
            continue
        pods = record.pods or (record.subject,)  # a gang's verdict names its members
        for pod in pods:
            if record.outcome == "unschedulable":
                latest[pod] = record.message
            elif record.outcome == "placed":
                latest[pod] = None
    return latest


class UnschedulableReporter:
    """Reports verdicts through ``binder`` (its retries and rate limit); see the module docstring.
    ``remember`` bounds the LRU; ``max_in_flight`` the pods reported at the same time."""

    def __init__(self, binder: Binder, *, remember: int = 10_000, max_in_flight: int = 32) -> None:
        self.binder = binder
        self._remember = remember
        self._reported: OrderedDict[str, str] = OrderedDict()
        self._gangs: OrderedDict[str, None] = OrderedDict()
        """Subjects (pod groups) of gang verdicts seen: their placed records name the members."""
        self._slots = asyncio.Semaphore(max_in_flight)

    def wants(self, event_type: bytes | None, outcome: bytes | None, subject: bytes | None) -> bool:
        """Whether a record of the decisions topic, known by its envelope's ``ce_type``,
        ``ce_outcome`` and ``ce_subject`` headers, can change what this reporter does: an
        unschedulable verdict, or a placement of a pod (or gang) it may have reported. A record
        without an outcome header (an older producer) is always wanted."""
        if event_type is not None and event_type != _DECISION_TYPE:
            return False  # configuration announcements
        if outcome is None or outcome == b"unschedulable":
            return True
        if outcome != b"placed":
            return False
        name = (subject or b"").decode(errors="replace")
        return name in self._reported or name in self._gangs

    async def handle_batch(self, records: Iterable[Any]) -> dict[str, str]:
        """Handle a batch; returns each subject's result (the metric's ``result`` label)."""
        records = list(records)  # read twice below
        for record in records:
            # Kept after a placement too: a gang may be placed in parts (minMember), each
            # placement naming the members it placed.
            if isinstance(record, DecisionRecord) and record.pods and record.outcome == "unschedulable":
                self._gangs[record.subject] = None
                self._gangs.move_to_end(record.subject)
                if len(self._gangs) > self._remember:
                    self._gangs.popitem(last=False)
        results: dict[str, str] = {}
        work = []
        for subject, message in latest_verdicts(records).items():
            if message is None:
                self._reported.pop(subject, None)
            elif self._reported.get(subject) == message:
                self._reported.move_to_end(subject)
                results[subject] = "unchanged"
            else:
                work.append((subject, message))
        for subject, result in zip(
            (s for s, _ in work), await asyncio.gather(*(self._report(s, m) for s, m in work)), strict=True
        ):
            results[subject] = result
        for result in results.values():
            REPORTS.labels(result).inc()
        return results

    async def _report(self, subject: str, message: str) -> str:
        namespace, _, name = subject.partition("/")
        if not name:
            return "gone"
        async with self._slots:
            outcome = await self.binder.report_unschedulable(namespace, name, message)
        if outcome.kind is OutcomeKind.APPLIED:
            self._reported[subject] = message
            self._reported.move_to_end(subject)
            if len(self._reported) > self._remember:
                self._reported.popitem(last=False)
            return "skipped" if outcome.reason else "reported"
        self._reported.pop(subject, None)
        if outcome.kind is OutcomeKind.CONFLICT:
            log.debug("unschedulable pod is gone", pod=subject, reason=outcome.reason)
            return "gone"
        log.warning(
            "could not report an unschedulable pod", pod=subject, reason=outcome.reason, kind=outcome.kind.value
        )
        return "failed"
