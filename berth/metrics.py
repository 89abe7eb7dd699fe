"""Prometheus metrics shared by every Berth service.

kube-scheduler's stable names where the meaning is the same; everything else under ``berth_``.
Base units, ``_total`` on counters, and never a pod or node name as a label (unbounded cardinality).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Number of attempts to schedule pods, by the result (scheduled, unschedulable, error).",
    ["result", "profile"],
)
SCHEDULING_ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding decision).",
    ["result", "profile"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type (active, backoff, unschedulable, gated).",
    ["queue"],
)
PODS_HANDED_OVER = Counter(
    "berth_pods_handed_over_total",
    "Pods a decision cell could not place and handed on to the next cell of their round.",
    ["cell"],
)
RECORDS_CONSUMED = Counter(
    "berth_records_consumed_total", "Kafka records consumed.", ["consumer", "topic"]
)
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
REPLAY_MISMATCHES = Counter(
    "berth_replay_mismatches_total", "Decisions whose replay produced a different hash."
)
DETERMINISM_ERRORS = Counter(
    "berth_determinism_errors_total",
    "Same input position recorded twice with different decision hashes.",
)


def serve_metrics(port: int | None) -> None:
    """Expose /metrics on ``port`` (0 picks a free port; None disables)."""
    if port is not None:
        start_http_server(port, addr="0.0.0.0")
