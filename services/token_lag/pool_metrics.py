"""Per-pool gauges of the token-lag service (Prometheus), from each new lag state: what the
pool's gateway reports (ready replicas, tokens queued) and what token-lag makes of it (expected
TTFT). The Grafana dashboard (deploy/grafana/berth.json) plots the ready replicas against the
replicas the decision service asks for."""

from __future__ import annotations

from berth.schemas import PoolLagState
from prometheus_client import Gauge

READY_REPLICAS = Gauge(
    "berth_pool_ready_replicas",
    "Ready replicas of an inference pool, as its gateway last reported them.",
    ["namespace", "pool"],
)
TOKENS_IN_QUEUE = Gauge(
    "berth_pool_tokens_in_queue", "Tokens waiting in an inference pool's queue.", ["namespace", "pool"]
)
EXPECTED_TTFT = Gauge(
    "berth_pool_expected_ttft_seconds",
    "Expected time to first token of a request arriving now (the token-lag estimate; NaN while the pool is idle).",
    ["namespace", "pool"],
)


def observe_lag(state: PoolLagState) -> None:
    """Set the pool's gauges from its new lag state."""
    labels = (state.namespace, state.pool)
    if state.ready_replicas is not None:
        READY_REPLICAS.labels(*labels).set(state.ready_replicas)
    TOKENS_IN_QUEUE.labels(*labels).set(state.tokens_in_queue)
    EXPECTED_TTFT.labels(*labels).set(
        float("nan") if state.expected_ttft_ms is None else state.expected_ttft_ms / 1000.0
    )
