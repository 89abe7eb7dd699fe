"""Playing a workload: the cluster first, then pods and timeline events at their simulated times.

The player creates everything through the :class:`~.state.ClusterState` (as a user or controller
would through the API server), so the state stays the one source of truth and every change is
published the same way. Order at the start: nodes, then policies (PriorityClasses, PodGroups ...),
then AgentPools' initial replicas — all published before the first pod arrives.

Then, at their times: pods arrive (pending, or bound if their manifest names a node); a pod with a
run time is deleted that long after it is bound; a spot notice is published and the node removed
at its deadline (its pods deleted with it); nodes are removed; queue-lag reports are published
with the pool's current ready replicas. ``played`` turns true once every scheduled happening of
the workload has happened (deletions of pods bound later are not part of that).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from berth.schemas import QueueLagObserved, SpotInterruptionNotice

from berth.logs import get_logger
from berth_dev.workloads import QueueLagSample, SpotNotice, TimedPod, Workload, policy_observed

from .clock import SimClock
from .outbox import EventSink
from .state import FINISHED, ClusterState, PodRecord

log = get_logger(__name__)
BACKLOG_LIMIT = 5000
"""Queued-but-unsent event batches before the player waits for the outbox (back-pressure)."""


class WorkloadPlayer:
    def __init__(self, workload: Workload, state: ClusterState, sink: EventSink, clock: SimClock) -> None:
        self.workload = workload
        self.state = state
        self.sink = sink
        self.clock = clock
        self.arrived = 0
        self.refused = 0
        """Workload pods the API server refused to create."""
        self.spot_notices_sent = 0
        self._heap: list[tuple[float, int, Callable[[], Sequence[Any]], bool]] = []
        self._sequence = itertools.count()
        self._wake = asyncio.Event()
        self._scheduled = 0
        self._done = 0
        self._stopping = False
        self._run_seconds: dict[str, float] = {}
        """Pod UID → how long it runs once bound (workload pods with a run time only)."""
        state.bound_listeners.append(self._on_bound)

    # -- scheduling -------------------------------------------------------------------------------

    def _at(self, at_s: float, action: Callable[[], Sequence[Any]], *, counted: bool = True) -> None:
        heapq.heappush(self._heap, (at_s, next(self._sequence), action, counted))
        if counted:
            self._scheduled += 1
        self._wake.set()

    @property
    def played(self) -> bool:
        return self._done >= self._scheduled

    @property
    def pending_happenings(self) -> int:
        return len(self._heap)

    async def setup(self) -> None:
        """Publish the starting cluster and schedule the workload; returns once published."""
        now = self.clock.now()
        events: list[Any] = []
        for node in self.workload.nodes:
            events += self.state.add_node(node, now).events
        events += [policy_observed(policy, now) for policy in self.workload.policies]
        for pool in self.workload.pools:
            result = self.state.add_pool(pool, now)
            if not result.ok:
                log.warning("AgentPool not created", pool=pool.key, reason=result.body.get("message"))
            events += result.events
        await self.sink.emit(events)
        for timed in self.workload.pods:
            self._at(timed.at_s, self._arrival(timed))
        for notice in self.workload.spot_notices:
            self._at(notice.at_s, self._spot_notice(notice))
            self._at(notice.at_s + notice.notice_s, self._node_gone(notice.node, "spot reclaim"))
        for removal in self.workload.node_removals:
            self._at(removal.at_s, self._node_gone(removal.node, "removed"))
        for sample in self.workload.queue_lag:
            self._at(sample.at_s, self._queue_lag(sample))
        log.info(
            "workload scheduled",
            workload=self.workload.name,
            nodes=len(self.workload.nodes),
            pods=len(self.workload.pods),
            happenings=self._scheduled,
        )

    # -- actions ----------------------------------------------------------------------------------

    def _arrival(self, timed: TimedPod) -> Callable[[], Sequence[Any]]:
        def arrive() -> Sequence[Any]:
            result = self.state.create_pod(timed.pod, self.clock.now())
            if not result.ok:
                log.warning("pod not created", pod=timed.pod.key, reason=result.body.get("message"))
                self.refused += 1
                return ()
            self.arrived += 1
            if timed.run_s is not None:
                self._run_seconds[timed.pod.uid] = timed.run_s
                record = self.state.pods[timed.pod.key]
                if record.pod.node_name is not None:  # created bound: it runs from now
                    self._on_bound(record)
            return result.events

        return arrive

    def _on_bound(self, record: PodRecord) -> None:
        run_s = self._run_seconds.pop(record.pod.uid, None)
        if run_s is None:
            return
        namespace, name, uid = record.pod.namespace, record.pod.name, record.pod.uid

        def finish() -> Sequence[Any]:
            current = self.state.pods.get(f"{namespace}/{name}")
            if current is None or current.pod.uid != uid:
                return ()  # evicted or gone with its node meanwhile
            return self.state.delete_pod(namespace, name, self.clock.now(), uid=uid, cause=FINISHED).events

        self._at(self.clock.seconds() + run_s, finish, counted=False)

    def _spot_notice(self, notice: SpotNotice) -> Callable[[], Sequence[Any]]:
        def announce() -> Sequence[Any]:
            if notice.node not in self.state.nodes:
                return ()
            now = self.clock.now()
            self.spot_notices_sent += 1
            log.info("spot interruption notice", node=notice.node, notice_s=notice.notice_s)
            return (
                SpotInterruptionNotice(
                    node=notice.node,
                    issued_at=now,
                    deadline=now + timedelta(seconds=notice.notice_s),
                    provider=notice.provider if notice.provider in ("aws", "gcp", "azure") else "other",
                ),
            )

        return announce

    def _node_gone(self, node: str, why: str) -> Callable[[], Sequence[Any]]:
        def remove() -> Sequence[Any]:
            result = self.state.remove_node(node, self.clock.now())
            if result.ok:
                log.info("node removed", node=node, why=why, pods_deleted=len(result.events) - 1)
            return result.events

        return remove

    def _queue_lag(self, sample: QueueLagSample) -> Callable[[], Sequence[Any]]:
        def report() -> Sequence[Any]:
            return (
                QueueLagObserved(
                    pool=sample.pool,
                    namespace=sample.namespace,
                    tokens_in_queue=sample.tokens_in_queue,
                    token_rate=sample.token_rate,
                    active_sessions=sample.active_sessions,
                    mean_context_tokens=sample.mean_context_tokens,
                    ready_replicas=self.state.ready_replicas(sample.namespace, sample.pool),
                    observed_at=self.clock.now(),
                ),
            )

        return report

    # -- the loop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Play until :meth:`stop`. Keeps running after the workload is played: pods bound later
        still end after their run time."""
        while not self._stopping:
            if not self._heap:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=0.5)
                except TimeoutError:
                    pass
                continue
            self._wake.clear()
            if not await self.clock.wait_until(self._heap[0][0], self._wake):
                continue  # woken: something earlier may have been scheduled, or we are stopping
            now_s = self.clock.seconds()
            handled = 0
            while self._heap and self._heap[0][0] <= now_s and not self._stopping:
                _, _, action, counted = heapq.heappop(self._heap)
                events = action()
                if counted:
                    self._done += 1
                if events:
                    await self._emit(events)
                handled += 1
                if handled % 100 == 0:
                    await asyncio.sleep(0)  # let the API and the outbox run between bursts

    async def _emit(self, events: Sequence[Any]) -> None:
        done = self.sink.emit(events)
        done.add_done_callback(_log_failure)
        if getattr(self.sink, "backlog", 0) > BACKLOG_LIMIT:
            await asyncio.shield(done)


def _log_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("events not published", error=str(future.exception()))
