"""The scaling policies the benchmark compares, behind one small interface.

A policy sees the pool once per simulated second (:class:`PoolView`, after that second's
requests were served) and answers the replica count it wants, or None to leave the pool alone.
It may also answer a spot interruption notice with a number of surge replicas to start now;
the references answer 0 (they do not watch notices and learn of the loss through the queue).

The references are defined here, Berth's policy is adapted in :mod:`bench.scaling.berth`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

CapacityClass = Literal["any", "on-demand", "spot"]
"""Where a new replica may go: any node (spot first, as the cluster's provisioner prefers), or
only on-demand / only spot nodes."""


@dataclass(frozen=True)
class ProbeSlot:
    """One more replica would go to ``node`` (spot or not) and cost ``usd_per_hour`` there."""

    node: str
    spot: bool
    usd_per_hour: float


Probe = Callable[[int, CapacityClass], list[ProbeSlot]]


@dataclass(frozen=True)
class Scale:
    """A policy's answer with placement: ``replicas`` wanted, and the capacity class of each
    replica it adds (missing entries: ``"any"``)."""

    replicas: int
    capacity: tuple[CapacityClass, ...] = ()


@dataclass(frozen=True)
class PoolConfig:
    """The inference pool every policy scales: the same model, the same load delay."""

    tokens_per_second_per_replica: float = 2000.0
    slots_per_replica: int = 16
    """Sequences a replica serves at once (continuous batching); each runs at tps / slots."""
    ttft_slo_ms: float = 2000.0
    min_replicas: int = 1
    max_replicas: int = 40
    initial_replicas: int = 3
    model_load_seconds: float = 90.0
    gpus_per_replica: int = 1
    prefill_tokens_per_second: float = 24_000.0
    """A request's prompt is prefilled at this rate (a trace's requests only; see README)."""
    reported_tokens_per_second_per_replica: float | None = None
    """The ``tokensPerSecondPerReplica`` Berth's AgentPool states when it is not the decode rate
    (a trace: prompt and output tokens per second a replica serves, profiled; see README)."""


class PoolView:
    """What a policy can observe of the pool at ``now`` (seconds since midnight).

    Instantaneous values, plus running integrals (``*_seconds``: the quantity integrated over
    time since the start) from which a policy computes means over its own interval. One object
    per run, updated in place by the simulator.
    """

    __slots__ = (
        "now",
        "target",
        "ready",
        "loading",
        "pending",
        "waiting_requests",
        "waiting_tokens",
        "running",
        "tokens_processed",
        "busy_slot_seconds",
        "ready_slot_seconds",
        "waiting_request_seconds",
        "spot_replicas",
        "usd_per_hour",
        "probe",
    )

    def __init__(self) -> None:
        self.now = 0.0
        self.target = 0
        self.ready = 0
        self.loading = 0
        self.pending = 0
        self.waiting_requests = 0
        self.waiting_tokens = 0
        self.running = 0
        self.tokens_processed = 0.0
        self.busy_slot_seconds = 0.0
        self.ready_slot_seconds = 0.0
        self.waiting_request_seconds = 0.0
        self.spot_replicas = 0
        """Placed replicas (loading or ready) on spot nodes."""
        self.usd_per_hour = 0.0
        """What the placed replicas cost now."""
        self.probe: Probe = lambda count, capacity: []
        """Where more replicas would go now (the placement engine's hypothetical answer)."""


@dataclass(frozen=True)
class SpotNoticeView:
    """A notice for a node holding ``replicas_on_node`` of the pool's replicas (ready or loading)."""

    now: float
    deadline: float
    node: str
    replicas_on_node: int


class ScalingPolicy(Protocol):
    name: str

    def decide(self, view: PoolView) -> int | Scale | None:
        """The replica count wanted now (the simulator clamps nothing: stay within bounds)."""

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> tuple[CapacityClass, ...]:
        """Surge replicas to start now, one capacity class each; () to ignore the notice.

        The simulator then moves the pool off the node as Berth's cell does: it cordons the
        node; each surge replica, once placed, evicts one of the node's replicas (gracefully:
        its running requests finish) and gives its surge back; replicas still on the node at the
        deadline die with it (their running requests are retried) and give theirs back too."""


class StaticPolicy:
    """Never scales: the control for "a spike causes violations when nothing can scale"."""

    name = "static"

    def decide(self, view: PoolView) -> int | None:
        return None

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> tuple[CapacityClass, ...]:
        return ()


class KedaLike:
    """KEDA's Kafka scaler driving a HorizontalPodAutoscaler, with their defaults.

    Every ``polling_s`` (KEDA's pollingInterval, 30 s) the lag — requests not yet finished,
    waiting or running, as unacknowledged messages are for a Kafka consumer group — gives the
    recommendation ``ceil(lag / lag_threshold)`` within the bounds (an AverageValue target of
    ``lag_threshold`` per replica). As the HPA does: no change while the ratio of lag per
    replica to the threshold is within ``tolerance`` of 1; a scale-up takes the recommendation at
    once but at most ``max(current + 4, 2 × current)`` per step (the HPA's default scale-up
    policies); a scale-down takes the highest recommendation of the last ``cooldown_s`` (the
    HPA's scale-down stabilization window, 300 s by default, which is the cooldown).
    """

    name = "keda"

    def __init__(
        self,
        pool: PoolConfig,
        *,
        lag_threshold: float = 10.0,
        polling_s: float = 30.0,
        cooldown_s: float = 300.0,
        tolerance: float = 0.1,
        warm: bool = False,
    ) -> None:
        """``warm``: the HPA has been running with the pool at its initial count, so its window
        holds that count at second 0 (the trace runs: a run starts mid-day, not at a cold start)."""
        self.pool = pool
        self.warm = warm
        self.lag_threshold = lag_threshold
        self.polling_s = polling_s
        self.cooldown_s = cooldown_s
        self.tolerance = tolerance
        self._next_poll = polling_s
        self._recommendations: deque[tuple[float, int]] = deque()

    def recommend(self, lag: int, current: int) -> int:
        """The HPA's raw recommendation for ``lag`` unfinished requests and ``current`` replicas."""
        if current > 0 and abs(lag / (self.lag_threshold * current) - 1.0) <= self.tolerance:
            return current
        wanted = math.ceil(lag / self.lag_threshold)
        return max(self.pool.min_replicas, min(self.pool.max_replicas, wanted))

    def decide(self, view: PoolView) -> int | None:
        if view.now < self._next_poll:
            return None
        self._next_poll += self.polling_s
        current = view.target
        if self.warm and not self._recommendations:
            self._recommendations.append((0.0, current))
        raw = self.recommend(view.waiting_requests + view.running, current)
        self._recommendations.append((view.now, raw))
        while self._recommendations[0][0] <= view.now - self.cooldown_s:
            self._recommendations.popleft()
        if raw > current:
            return min(raw, max(current + 4, 2 * current))
        stabilized = max(r for _, r in self._recommendations)
        return stabilized if stabilized < current else None

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> tuple[CapacityClass, ...]:
        return ()


class DynamoLike:
    """NVIDIA Dynamo's load-based planner, reduced to one pool of aggregated workers.

    Every ``interval_s`` (180 s) it looks at the means over the interval just ended: the
    KV-cache use (here the busy share of the ready replicas' sequence slots) and the queue
    (requests waiting per ready replica). One replica more when the cache use exceeds
    ``scale_up_utilization`` (0.9) or the queue exceeds ``scale_up_queue_per_replica``; one fewer
    when the cache use is under ``scale_down_utilization`` (0.5) and the queue is empty
    (under ``scale_down_queue_per_replica``); always ±1 per step, within the bounds.
    """

    name = "dynamo"

    def __init__(
        self,
        pool: PoolConfig,
        *,
        interval_s: float = 180.0,
        scale_up_utilization: float = 0.9,
        scale_down_utilization: float = 0.5,
        scale_up_queue_per_replica: float = 1.0,
        scale_down_queue_per_replica: float = 0.1,
    ) -> None:
        self.pool = pool
        self.interval_s = interval_s
        self.scale_up_utilization = scale_up_utilization
        self.scale_down_utilization = scale_down_utilization
        self.scale_up_queue_per_replica = scale_up_queue_per_replica
        self.scale_down_queue_per_replica = scale_down_queue_per_replica
        self._next_step = interval_s
        self._busy_at_start = 0.0
        self._slots_at_start = 0.0
        self._waiting_at_start = 0.0

    def step(self, utilization: float, queue_per_replica: float, current: int) -> int:
        """The replica count after one planner step."""
        if utilization > self.scale_up_utilization or queue_per_replica > self.scale_up_queue_per_replica:
            return min(self.pool.max_replicas, current + 1)
        if utilization < self.scale_down_utilization and queue_per_replica < self.scale_down_queue_per_replica:
            return max(self.pool.min_replicas, current - 1)
        return current

    def decide(self, view: PoolView) -> int | None:
        if view.now < self._next_step:
            return None
        self._next_step += self.interval_s
        busy = view.busy_slot_seconds - self._busy_at_start
        slots = view.ready_slot_seconds - self._slots_at_start
        waiting = view.waiting_request_seconds - self._waiting_at_start
        self._busy_at_start = view.busy_slot_seconds
        self._slots_at_start = view.ready_slot_seconds
        self._waiting_at_start = view.waiting_request_seconds
        utilization = busy / slots if slots > 0 else (1.0 if waiting > 0 else 0.0)
        queue_per_replica = waiting / self.interval_s / max(view.ready, 1)
        wanted = self.step(utilization, queue_per_replica, view.target)
        return wanted if wanted != view.target else None

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> tuple[CapacityClass, ...]:
        return ()
