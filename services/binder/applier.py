"""Applying one command through a :class:`~.ports.ClusterBackend`: retries, gangs, verdicts.

Contract of :meth:`Binder.apply`: it never raises for anything the cluster answers; it returns a
:class:`Verdict` whose ``result`` is what the binder publishes:

- ``applied``: every operation of the command took effect (or already had: re-applying after a
  crash reports applied again, without changing anything);
- ``conflict``: the cluster disagrees with the decision (pod gone, re-created, bound elsewhere;
  node or pool gone); the reason names each member that conflicted. A gang is checked member by
  member before any is bound, so that a conflict usually binds nothing;
- ``failed``: an operation failed permanently, or kept failing transiently for the whole retry
  budget (exponential backoff with jitter; attempts the cluster did not answer at all — an
  apiserver restarting — are waited out for up to ``RetryPolicy.unanswered_patience_s`` and do
  not count against ``max_attempts``). Such a command also gets ``dead_letter_reason``: it goes
  to the dead-letter topic.

Every API request, retries included, first takes a token from the rate limiter (one per
operation here, or one per request inside a backend that ``meters_requests``).

A preemption (``PlacePods`` with victims) first nominates each preemptor for its node
(``nominate``), then evicts the victims, then binds: a conflict or failure at any step stops
the command there, so victims are never evicted for a pod that is gone.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from berth.schemas import CommandResult, CordonNode, EvictPod, PlacePods, PodPlacement, ScalePool
from berth.schemas.scheduler import CommandStatus
from prometheus_client import Counter
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, wait_exponential_jitter

from berth.logs import get_logger
from berth.metrics import COMMANDS_BY_RESULT, labelled

from .ports import ClusterBackend, KeepIf, Outcome, OutcomeKind, Preemptor
from .ratelimit import TokenBucket

log = get_logger(__name__)
RETRIES = Counter(
    "berth_binder_retries_total",
    "Cluster API requests the binder retried after a transient error, by operation.",
    ["operation"],
)


@dataclass(frozen=True)
class RetryPolicy:
    """How long a transient error is retried: ``max_attempts`` tries per operation, waiting
    ``initial_backoff_s`` doubling up to ``max_backoff_s``, plus up to ``jitter_s`` at random."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    jitter_s: float = 0.1
    unanswered_patience_s: float = 60.0
    """How long (in backoff waits) an operation keeps retrying while the cluster does not answer
    at all (``Outcome.no_answer``: connection refused or cut, as during an apiserver restart).
    Those attempts do not count against ``max_attempts``: a restart of 30 s would otherwise fail
    every bind caught by it, and each pod would be decided again."""
    max_unanswered_attempts: int = 100
    """A bound on those attempts as well (when the backoff is zero)."""


@dataclass(frozen=True)
class Verdict:
    """What came of a command. ``dead_letter_reason`` is set when it must go to the dead-letter
    topic (it can never apply, or the retry budget ran out)."""

    result: CommandResult
    dead_letter_reason: str | None = None


@dataclass(frozen=True)
class _Step:
    """One operation's final outcome and how many times it was tried."""

    target: str
    outcome: Outcome
    attempts: int
    exhausted: bool = False
    """It was still failing transiently when the retry budget ran out."""

    @property
    def refused(self) -> bool:
        """The cluster's policy still refused it when the retry budget ran out (a disruption
        budget): a conflict to report back, not a failure to dead-letter."""
        return self.exhausted and self.outcome.refused

    @property
    def failed(self) -> bool:
        return (self.exhausted and not self.outcome.refused) or self.outcome.kind is OutcomeKind.PERMANENT

    def describe(self) -> str:
        if self.refused:
            return f"{self.target}: still refused after {self.attempts} attempts: {self.outcome.reason}"
        if self.exhausted:
            return f"{self.target}: gave up after {self.attempts} attempts: {self.outcome.reason}"
        return f"{self.target}: {self.outcome.reason}" if self.outcome.reason else self.target


def command_label(command: Any) -> str:
    """``io.berth.scheduler.place-pods.v1`` → ``place-pods`` (the metric's ``type`` label)."""
    return command.type.removeprefix("io.berth.scheduler.").rsplit(".v", 1)[0]


class Binder:
    """Applies commands to a cluster through ``backend``; see the module docstring."""

    def __init__(
        self,
        backend: ClusterBackend,
        *,
        limiter: TokenBucket | None = None,
        retry: RetryPolicy = RetryPolicy(),
        remember: int = 100_000,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.backend = backend
        self.limiter = limiter or TokenBucket(50, 100)
        self.retry = retry
        self._sleep = sleep
        self._clock = clock
        self._remember = remember
        self._backend_meters = bool(getattr(backend, "meters_requests", False))
        self._done: OrderedDict[str, Verdict] = OrderedDict()
        """Recent final verdicts (applied, conflict) by command id: a duplicate record of a
        command gets the same answer without touching the cluster again."""

    async def apply(self, command: Any) -> Verdict:
        known = self._done.get(command.command_id)
        if known is not None:
            self._done.move_to_end(command.command_id)
            log.info(
                "duplicate command; repeating its result",
                command_id=command.command_id,
                decision_id=command.decision_id,
                status=known.result.status,
            )
            return known
        started = time.perf_counter()
        note = ""
        if isinstance(command, PlacePods):
            steps, status, note = await self._place(command)
        elif isinstance(command, EvictPod):
            steps = [
                await self._call(
                    "evict",
                    f"{command.namespace}/{command.name}",
                    lambda: self.backend.evict(
                        command.namespace,
                        command.name,
                        command.pod_uid,
                        keep_if=KeepIf(command.keep_with_local_storage, command.keep_with_pvc),
                    ),
                )
            ]
            status = _status(steps)
        elif isinstance(command, ScalePool):
            steps = [
                await self._call(
                    "scale",
                    f"{command.namespace}/{command.pool}",
                    lambda: self.backend.scale(command.namespace, command.pool, command.replicas),
                )
            ]
            status = _status(steps)
        elif isinstance(command, CordonNode):
            steps = [await self._call("cordon", command.node, lambda: self.backend.cordon(command.node))]
            status = _status(steps)
        else:  # the contract's Command union has exactly the four types above
            raise TypeError(f"not a command: {type(command).__name__}")
        verdict = self._verdict(command, steps, status, note)
        if status != "failed":  # a failed command may succeed when it comes again
            self._done[command.command_id] = verdict
            if len(self._done) > self._remember:
                self._done.popitem(last=False)
        labelled(COMMANDS_BY_RESULT, command_label(command), verdict.result.status).inc()
        self._log(command, verdict, time.perf_counter() - started)
        return verdict

    async def report_unschedulable(self, namespace: str, name: str, message: str) -> Outcome:
        """Report an unschedulable verdict on the pod (see the port), with the same retries and
        rate limit as commands. A transient error still there after the retry budget comes back
        as retryable; nothing is published about it (a pod's status is not a command)."""
        step = await self._call(
            "report_unschedulable",
            f"{namespace}/{name}",
            lambda: self.backend.report_unschedulable(namespace, name, None, message),
        )
        return step.outcome

    def refuse(self, command: Any, reason: str) -> Verdict:
        """A failed verdict without touching the cluster (the command is unusable as it is)."""
        result = CommandResult.of(command, "failed", self._clock(), reason=reason[:2000])
        COMMANDS_BY_RESULT.labels(command_label(command), "failed").inc()
        log.error(
            "command refused",
            command_id=command.command_id,
            decision_id=command.decision_id,
            type=command_label(command),
            reason=reason,
        )
        return Verdict(result, dead_letter_reason=f"{command_label(command)} refused: {reason}")

    # -- commands ---------------------------------------------------------------------------------

    async def _place(self, command: PlacePods) -> tuple[list[_Step], CommandStatus, str]:
        """Steps, status, and a note naming gang members bound although the gang did not apply."""
        steps: list[_Step] = []
        if command.victims:
            # As kube-scheduler does, the preemptor says where it is going before its victims go,
            # so that whoever looks at the pending pod (or another scheduler) sees the claim.
            for placement in command.placements:
                step = await self._call("nominate", _pod(placement), self._nominate(placement))
                steps.append(step)
                if not step.outcome.is_applied:
                    return steps, _status([step]), ""
        # Victims first: the preemptor's room exists only once they are gone. With their UIDs
        # (the UID is the precondition), a same-named newer pod is never evicted by mistake.
        uids = command.victim_uids if len(command.victim_uids) == len(command.victims) else ()
        for index, victim in enumerate(command.victims):
            namespace, _, name = victim.partition("/")
            uid = uids[index] if uids else None
            preemptor = Preemptor(command.placements[0].pod_uid, command.placements[0].node)
            step = await self._call(
                "evict",
                f"victim {victim}",
                lambda: self.backend.evict(namespace, name, uid, preemptor),  # noqa: B023 -- awaited in this iteration
            )
            steps.append(step)
            if step.failed:
                return steps, "failed", ""
        if len(command.placements) > 1:
            checks = await asyncio.gather(
                *(self._call("check_bind", _pod(p), self._check(p)) for p in command.placements)
            )
            refused = [c for c in checks if not c.outcome.is_applied]
            if refused:
                return [*steps, *refused], _status(refused), ""
        binds = list(await asyncio.gather(*(self._call("bind", _pod(p), self._bind(p)) for p in command.placements)))
        status = _status(binds)
        bound = [b.target for b in binds if b.outcome.is_applied]
        # Kubernetes cannot bind several pods atomically: members bound before another one failed
        # stay bound. Say so, so that whoever reads the result knows the gang is partial.
        note = f"bound anyway: {', '.join(bound)}" if status != "applied" and len(binds) > 1 and bound else ""
        return [*steps, *binds], status, note

    def _nominate(self, placement: PodPlacement) -> Callable[[], Awaitable[Outcome]]:
        return lambda: self.backend.nominate(placement)

    def _check(self, placement: PodPlacement) -> Callable[[], Awaitable[Outcome]]:
        return lambda: self.backend.check_bind(placement)

    def _bind(self, placement: PodPlacement) -> Callable[[], Awaitable[Outcome]]:
        return lambda: self.backend.bind(placement)

    # -- retries ----------------------------------------------------------------------------------

    async def _call(self, operation_name: str, target: str, operation: Callable[[], Awaitable[Outcome]]) -> _Step:
        """Run one backend operation under the rate limit, retrying transient errors."""
        attempts = 0
        unanswered = 0

        async def attempt() -> Outcome:
            nonlocal attempts, unanswered
            attempts += 1
            if not self._backend_meters:
                await self.limiter.acquire()
            try:
                outcome = await operation()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("backend raised instead of answering", target=target)
                return Outcome.retryable(f"{type(exc).__name__}: {exc}")
            if outcome.no_answer:
                unanswered += 1
            return outcome

        def stop(state: RetryCallState) -> bool:
            # The attempt budget counts the attempts the cluster answered; while it does not
            # answer at all, wait up to the patience instead (see RetryPolicy).
            outcome = state.outcome.result() if state.outcome else None
            if outcome is not None and outcome.no_answer:
                return state.idle_for >= policy.unanswered_patience_s or unanswered >= policy.max_unanswered_attempts
            return attempts - unanswered >= policy.max_attempts

        def before_sleep(state: RetryCallState) -> None:
            outcome = state.outcome.result() if state.outcome else None
            RETRIES.labels(operation_name).inc()
            log.warning(
                "retrying",
                operation=operation_name,
                target=target,
                attempt=state.attempt_number,
                reason=outcome.reason if outcome else "",
                wait_s=round(state.next_action.sleep, 3) if state.next_action else None,
            )

        policy = self.retry
        retrying = AsyncRetrying(
            stop=stop,
            wait=wait_exponential_jitter(
                multiplier=policy.initial_backoff_s, max=policy.max_backoff_s, jitter=policy.jitter_s
            ),
            retry=retry_if_result(lambda outcome: outcome.kind is OutcomeKind.RETRYABLE),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            before_sleep=before_sleep,
            sleep=self._sleep,
        )
        outcome: Outcome = await retrying(attempt)
        return _Step(target, outcome, attempts, exhausted=outcome.kind is OutcomeKind.RETRYABLE)

    # -- results ----------------------------------------------------------------------------------

    def _verdict(self, command: Any, steps: Sequence[_Step], status: CommandStatus, note: str) -> Verdict:
        if status == "applied":
            # Worth keeping even on success: "already bound", "already gone" (a re-application).
            reason = "; ".join(s.describe() for s in steps if s.outcome.reason)
        else:
            reason = "; ".join(s.describe() for s in steps if not s.outcome.is_applied)
            if note:
                reason += f" ({note})"
        attempts = max((s.attempts for s in steps), default=1)
        result = CommandResult.of(command, status, self._clock(), reason=reason[:2000], attempts=attempts)
        return Verdict(
            result, dead_letter_reason=f"{command_label(command)} failed: {reason}" if status == "failed" else None
        )

    def _log(self, command: Any, verdict: Verdict, seconds: float) -> None:
        fields: dict[str, Any] = {
            "command_id": command.command_id,
            "decision_id": command.decision_id,
            "cell": command.cell,
            "type": command_label(command),
            "status": verdict.result.status,
            "attempts": verdict.result.attempts,
            "duration_ms": round(seconds * 1000, 2),
        }
        if isinstance(command, PlacePods):
            fields["pods"] = [_pod(p) for p in command.placements]
            fields["pod_uids"] = [p.pod_uid for p in command.placements]
            fields["nodes"] = sorted({p.node for p in command.placements})
            if command.pod_group:
                fields["pod_group"] = command.pod_group
        elif isinstance(command, EvictPod):
            fields.update(pod=f"{command.namespace}/{command.name}", pod_uid=command.pod_uid, node=command.node)
        elif isinstance(command, CordonNode):
            fields["node"] = command.node
        elif isinstance(command, ScalePool):
            fields.update(pool=f"{command.namespace}/{command.pool}", replicas=command.replicas)
        if verdict.result.reason:
            fields["reason"] = verdict.result.reason
        if verdict.result.status == "applied":
            log.info("command applied", **fields)
        else:
            log.warning(f"command {verdict.result.status}", **fields)


def _pod(placement: PodPlacement) -> str:
    return f"{placement.namespace}/{placement.name}"


def _status(steps: Sequence[_Step]) -> CommandStatus:
    """failed beats conflict beats applied."""
    if any(step.failed for step in steps):
        return "failed"
    if any(step.outcome.kind is OutcomeKind.CONFLICT or step.refused for step in steps):
        return "conflict"
    return "applied"
