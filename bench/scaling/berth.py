"""Berth's scaling policy in the simulation: a thin adapter, no scaling logic of its own.

The pool reports its queue as a gateway would (``QueueLagObserved`` every ``report_interval_s``),
the token-lag service's pure fold (:func:`berth.services.token_lag.fold.fold_queue_lag`) turns the
reports into ``PoolLagState``, and each new state goes to the decision cell's rule
(:func:`berth.decider.pools.desired_replicas`) with the replica count Berth last asked for and
when — exactly the arguments the cell (``CellDecider._on_lag``) passes. So the benchmark measures
the real rule on the real state.

Spot notices: the cell cordons the node and starts one surge replacement per pool replica on it,
preferring on-demand nodes, then evicts the old replicas before the deadline and takes the surge
back off the replica count. The simulator does the placing and evicting; this adapter answers how
many replacements to start.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from berth.decider.pools import PoolPolicy, desired_replicas
from berth.schemas import PoolLagState, QueueLagObserved
from berth.services.token_lag.fold import LagSettings, PoolSettings, fold_queue_lag, pool_key

from .policies import PoolConfig, PoolView, SpotNoticeView

MIDNIGHT = datetime(2025, 1, 1, tzinfo=timezone.utc)
"""Simulated second 0; the date only matters for the datetimes the contract requires."""
POOL = "chat"
NAMESPACE = "serving"


def pool_policy(pool: PoolConfig) -> PoolPolicy:
    """The pools-file entry Berth would be configured with for this pool."""
    return PoolPolicy(tokens_per_second_per_replica=pool.tokens_per_second_per_replica,
                      ttft_slo_ms=pool.ttft_slo_ms, min_replicas=pool.min_replicas,
                      max_replicas=pool.max_replicas, initial_replicas=pool.initial_replicas,
                      model_load_seconds=pool.model_load_seconds)


class BerthPolicy:
    """Berth: token-lag fold + the decision cell's scaling rule + the cell's spot replacement."""

    name = "berth"

    def __init__(self, pool: PoolConfig, *, report_interval_s: float = 5.0,
                 policy: PoolPolicy | None = None, lag_settings: LagSettings | None = None) -> None:
        self.policy = policy or pool_policy(pool)
        self.settings = lag_settings or LagSettings(
            pools={pool_key(NAMESPACE, POOL): PoolSettings(model_load_seconds=pool.model_load_seconds)})
        self.report_interval_s = report_interval_s
        self.lag: PoolLagState | None = None
        self.verdicts: list[tuple[float, int, str]] = []
        """(second, replicas, reason) of every scale the rule asked for: the decision log."""
        self._next_report = report_interval_s
        self._tokens_at_last_report = 0.0
        self._current: int | None = None
        self._last_scaled_at: datetime | None = None

    def observe(self, view: PoolView) -> QueueLagObserved:
        """The gateway's report of the pool at ``view.now``."""
        rate = (view.tokens_processed - self._tokens_at_last_report) / self.report_interval_s
        self._tokens_at_last_report = view.tokens_processed
        return QueueLagObserved(pool=POOL, namespace=NAMESPACE, tokens_in_queue=view.waiting_tokens,
                                token_rate=max(rate, 0.0), active_sessions=view.running,
                                ready_replicas=view.ready,
                                observed_at=MIDNIGHT + timedelta(seconds=view.now))

    def decide(self, view: PoolView) -> int | None:
        if view.now < self._next_report:
            return None
        self._next_report += self.report_interval_s
        folded = fold_queue_lag(self.lag, self.observe(view), self.settings)
        if folded is None:
            return None
        self.lag = folded
        if self._current is None:
            self._current = view.target
        verdict = desired_replicas(self.policy, folded, self._current, self._last_scaled_at)
        if verdict is None:
            return None
        self._current = verdict.replicas
        self._last_scaled_at = folded.updated_at
        self.verdicts.append((view.now, verdict.replicas, verdict.reason))
        return verdict.replicas

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> int:
        return notice.replicas_on_node
