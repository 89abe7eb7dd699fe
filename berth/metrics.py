"""Prometheus metrics shared by every Berth service.

kube-scheduler's stable names where the meaning is the same; everything else under ``berth_``.
Base units, ``_total`` on counters, and never a pod or node name as a label (unbounded cardinality).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Prometheus' ExponentialBuckets: ``count`` upper bounds from ``start``, each ``factor``
    times the one before (kube-scheduler's histograms are laid out this way)."""
    return tuple(start * factor**i for i in range(count))


# kube-scheduler v1.34's scheduler metrics: names, labels and bucket layouts as it registers them
# (pkg/scheduler/metrics/metrics.go), so that its dashboards and alerts work unchanged.
SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Scheduling attempts by result: 'scheduled', 'unschedulable' (no node fits), 'error' (Berth could not decide).",
    ["result", "profile"],
)
SCHEDULING_ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Seconds one pod's scheduling attempt took, filtering to the committed placement "
    "(binding is the binder's: the Bind extension point).",
    ["result", "profile"],
    buckets=exponential_buckets(0.001, 2, 15),
)
POD_SCHEDULING_SLI_DURATION = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "Seconds from a pod's first scheduling attempt to its placement, over all its attempts (by how many).",
    ["attempts"],
    buckets=exponential_buckets(0.01, 2, 20),
)
POD_SCHEDULING_ATTEMPTS = Histogram(
    "scheduler_pod_scheduling_attempts",
    "How many attempts it took to place a pod.",
    buckets=exponential_buckets(1, 2, 5),
)
FRAMEWORK_EXTENSION_POINT_DURATION = Histogram(
    "scheduler_framework_extension_point_duration_seconds",
    "Seconds all plugins of one extension point took in one scheduling cycle.",
    ["extension_point", "status", "profile"],
    buckets=exponential_buckets(0.0001, 2, 12),
)
PLUGIN_EXECUTION_DURATION = Histogram(
    "scheduler_plugin_execution_duration_seconds",
    "Seconds one plugin took at one extension point (sampled: one cycle in ten). A Filter or "
    "Score call judges every candidate node at once.",
    ["plugin", "extension_point", "status"],
    buckets=exponential_buckets(0.00001, 1.5, 20),
)
PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total",
    "Times preemption was tried for a pod no node could take.",
)
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Pods evicted by one preemption.",
    buckets=exponential_buckets(1, 2, 7),
)
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Pending pods by queue: 'active' (waiting for an attempt), 'backoff' (Berth has no backoff "
    "queue: always 0), 'unschedulable' (tried, waiting for the cluster to change), 'gated' "
    "(held by spec.schedulingGates; reported by ingest).",
    ["queue"],
)
PODS_HANDED_OVER = Counter(
    "berth_pods_handed_over_total",
    "Pods a decision cell could not place and handed on to the next cell of their round.",
    ["cell"],
)
POOL_DESIRED_REPLICAS = Gauge(
    "berth_pool_desired_replicas",
    "Replicas the decision service last asked for an inference pool (its latest ScalePool).",
    ["namespace", "pool"],
)
DESCHEDULER_EVICTIONS = Counter(
    "berth_descheduler_evictions_total",
    "Evictions the descheduler planned (berth deschedule) or the decision cells issued, by strategy of the "
    "DeschedulerPolicy.",
    ["strategy"],
)
DESCHEDULER_LOOPS_PREVENTED = Counter(
    "berth_descheduler_loops_prevented_total",
    "Pods a strategy would have evicted but did not: the engine would have put them back or on no better "
    "node, or their workload was evicted within the cooldown.",
    ["strategy"],
)
RECORDS_CONSUMED = Counter("berth_records_consumed_total", "Kafka records consumed.", ["consumer", "topic"])
DEAD_LETTERED = Counter(
    "berth_dead_lettered_records_total",
    "Records sent to the dead-letter topic because they could not be accepted.",
    ["consumer", "topic"],
)
CONSUMER_LAG = Gauge(
    "berth_consumer_lag_records", "Records behind the end of the partition.", ["consumer", "topic", "partition"]
)
EVENTS_PUBLISHED = Counter("berth_events_published_total", "Events published.", ["topic", "type"])
COMMANDS_BY_RESULT = Counter(
    "berth_commands_total", "Commands applied by the binder, by command type and result.", ["type", "result"]
)
AUDIT_WRITE_DURATION = Histogram(
    "berth_audit_write_duration_seconds", "Time to write one batch of audit rows to Postgres."
)
REPLAY_MISMATCHES = Counter("berth_replay_mismatches_total", "Decisions whose replay produced a different hash.")
DETERMINISM_ERRORS = Counter(
    "berth_determinism_errors_total",
    "Same input position recorded twice with different decision hashes.",
)


class SchedulingMetrics:
    """The engine's :class:`~berth.core.observe.CycleObserver`, recording kube-scheduler's
    metrics above.

    Per-plugin durations are sampled like kube-scheduler's (one cycle in ``plugin_sample_every``;
    a counter, not a random draw). The SLI duration runs from a pod's first attempt seen by this
    process to its placement, counting the attempts between; a pod handed over from another
    cell's process starts afresh here. At most ``max_tracked`` unplaced pods are remembered
    (oldest forgotten first), so pods deleted while pending cannot grow it without bound.
    """

    def __init__(self, *, plugin_sample_every: int = 10, max_tracked: int = 100_000) -> None:
        self._every = max(1, plugin_sample_every)
        self._cycles = 0
        self._max_tracked = max_tracked
        self._first: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self.clock = time.perf_counter

    def sample_plugins(self) -> bool:
        self._cycles += 1
        return self._cycles % self._every == 1 % self._every  # the 1st cycle, the 11th, ...

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        FRAMEWORK_EXTENSION_POINT_DURATION.labels(point, status, profile).observe(seconds)

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        PLUGIN_EXECUTION_DURATION.labels(plugin, point, status).observe(seconds)

    def attempt(self, pod_uid: str, result: str, profile: str, seconds: float) -> None:
        SCHEDULE_ATTEMPTS.labels(result, profile).inc()
        SCHEDULING_ATTEMPT_DURATION.labels(result, profile).observe(seconds)
        now = self.clock()
        first, attempts = self._first.pop(pod_uid, (now - seconds, 0))
        attempts += 1
        if result == "scheduled":
            POD_SCHEDULING_SLI_DURATION.labels("15+" if attempts >= 15 else str(attempts)).observe(now - first)
            POD_SCHEDULING_ATTEMPTS.observe(attempts)
            return
        self._first[pod_uid] = (first, attempts)
        if len(self._first) > self._max_tracked:
            self._first.popitem(last=False)

    def preemption_attempt(self) -> None:
        PREEMPTION_ATTEMPTS.inc()

    def preemption_victims(self, victims: int) -> None:
        PREEMPTION_VICTIMS.observe(victims)


_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def labelled(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once per label set: prometheus-client's ``labels()``
    takes a lock and builds its key on every call, which per record or per request showed in the
    services' profiles. Only for label sets of bounded cardinality (topics, event types, status
    codes), and not for metrics whose children are ever removed."""
    key = (id(metric), values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def serve_metrics(port: int | None) -> None:
    """Expose /metrics on ``port`` (0 picks a free port; None disables)."""
    if port is not None:
        start_http_server(port, addr="0.0.0.0")
