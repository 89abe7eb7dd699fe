"""Berth's scaling policy in the simulation: a thin adapter, no scaling logic of its own.

The pool reports its queue as a gateway would (``QueueLagObserved`` every ``report_interval_s``);
the token-lag service's pure fold (:func:`berth.services.token_lag.fold.fold_queue_lag`) turns the
reports into ``PoolLagState``; each new state goes to the decision cell's policy
(:func:`berth.cells.scaling.decide_scale`) with what the cell passes it: the replica count Berth
last asked for and when, the scaling memory folded from the lag states
(:func:`berth.cells.scaling.remember`: the smoothed demand and the window of needs), the
pool's spot replicas and cost, whether spot is suspended for the pool
(:class:`berth.cells.spot.SpotHistory`) and a placement probe — here the simulated cluster's
hypothetical placement. The verdict's ``placed_on`` says which capacity class each new replica
gets, as the cell constrains the pool's pending replicas. So the benchmark measures the real
policy on the real state.

Spot notices, as the cell handles them (``berth.cells.spot_drain.on_spot`` /
``_surge`` / ``berth.cells.pool_scaling.capacity_order``): the interruption is counted for the pool (and may suspend
spot), then a surge of k replacements, k = how many of the node's replicas can be placed elsewhere now —
on-demand first, then spot if one more spot replica stays within ``maxSpotPercent`` and spot is
not suspended; the surge restarts the cooldown. The simulator cordons, places, evicts and gives
the surge back (see :mod:`bench.scaling.sim`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from berth.schemas import PoolLagState, QueueLagObserved
from berth.services.token_lag.fold import LagSettings, PoolSettings, fold_queue_lag, pool_key

from berth.cells.pools import PoolPolicy
from berth.cells.scaling import ProbedReplica, ScalingInput, ScalingMemory, decide_scale, remember
from berth.cells.spot import SpotHistory

from .policies import CapacityClass, PoolConfig, PoolView, Scale, SpotNoticeView

MIDNIGHT = datetime(2025, 1, 1, tzinfo=UTC)
"""Simulated second 0; the date only matters for the datetimes the contract requires."""
POOL = "chat"
NAMESPACE = "serving"
COST_OPTIMIZATION: dict[str, Any] = {
    "spotEnabled": True,
    "maxSpotPercent": 80,
    "sloHeadroomMs": 500,
    "interruptionThreshold": {"count": 3, "window": "1h"},
}
"""The pool's ``scheduling.costOptimization``: the seed document's spot pool (80 % spot at most,
three interruptions an hour suspend spot) with a quarter of the SLO as headroom."""


def agent_pool_spec(pool: PoolConfig) -> dict[str, Any]:
    """The AgentPool spec Berth is configured with for the benchmark's pool."""
    return {
        "model": "chat",
        "replicas": pool.initial_replicas,
        "minReplicas": pool.min_replicas,
        "maxReplicas": pool.max_replicas,
        "ttftSloMs": pool.ttft_slo_ms,
        "tokensPerSecondPerReplica": (
            pool.reported_tokens_per_second_per_replica or pool.tokens_per_second_per_replica
        ),
        "modelLoadSeconds": pool.model_load_seconds,
        "cooldownSeconds": 300,
        "gpuRequirements": {"count": pool.gpus_per_replica},
        "scheduling": {"costOptimization": dict(COST_OPTIMIZATION)},
    }


def pool_policy(pool: PoolConfig) -> PoolPolicy:
    return PoolPolicy.model_validate(agent_pool_spec(pool))


class BerthPolicy:
    """Berth: token-lag fold + the decision cell's scaling policy + the cell's spot handling."""

    name = "berth"

    def __init__(
        self,
        pool: PoolConfig,
        *,
        report_interval_s: float = 5.0,
        lead: bool = True,
        policy: PoolPolicy | None = None,
        lag_settings: LagSettings | None = None,
    ) -> None:
        """``lead=False`` tells the policy the model loads at once (``modelLoadSeconds`` 0), so it
        does not lead by the load time; the simulated replicas still load (the ablation
        ``berth-nolead``)."""
        self.policy = policy or pool_policy(pool)
        self.lead = lead
        if not lead:
            self.name = "berth-nolead"
        self.settings = lag_settings or LagSettings(
            pools={pool_key(NAMESPACE, POOL): PoolSettings(model_load_seconds=pool.model_load_seconds)}
        )
        self.report_interval_s = report_interval_s
        self.lag: PoolLagState | None = None
        self.spot = SpotHistory()
        self.verdicts: list[tuple[float, int, str]] = []
        """(second, replicas, reason) of every scale the policy asked for: the decision log."""
        self._next_report = report_interval_s
        self._tokens_at_last_report = 0.0
        self._current: int | None = None
        self._last_scaled_at: datetime | None = None
        self.memory: ScalingMemory | None = None
        # The ablation tells the policy the model loads at once: no lead by the load time.
        self._decided_with = self.policy if lead else self.policy.model_copy(update={"model_load_seconds": 0.0})

    def observe(self, view: PoolView) -> QueueLagObserved:
        """The gateway's report of the pool at ``view.now``."""
        rate = (view.tokens_processed - self._tokens_at_last_report) / self.report_interval_s
        self._tokens_at_last_report = view.tokens_processed
        return QueueLagObserved(
            pool=POOL,
            namespace=NAMESPACE,
            tokens_in_queue=view.waiting_tokens,
            token_rate=max(rate, 0.0),
            active_sessions=view.running,
            ready_replicas=view.ready,
            observed_at=at(view.now),
        )

    def decide(self, view: PoolView) -> Scale | None:
        if view.now < self._next_report:
            return None
        self._next_report += self.report_interval_s
        folded = fold_queue_lag(self.lag, self.observe(view), self.settings)
        if folded is None:
            return None
        self.lag = folded
        self.memory = remember(self.memory, folded, self._decided_with)
        if self._current is None:
            self._current = view.target
        threshold = self.policy.cost.interruption_limit if self.policy.cost is not None else None
        self.spot.quiet_since(folded.updated_at, threshold)

        def probe(count: int, capacity: CapacityClass) -> list[ProbedReplica]:
            return [
                ProbedReplica(node=s.node, spot=s.spot, cost_per_hour=s.usd_per_hour)
                for s in view.probe(count, capacity)
            ]

        verdict = decide_scale(
            ScalingInput(
                policy=self._decided_with,
                lag=folded,
                current=self._current,
                last_scaled_at=self._last_scaled_at,
                memory=self.memory,
                spot_suspended=self.spot.suspended,
                spot_replicas=view.spot_replicas,
                pool_cost_per_hour=view.usd_per_hour,
                priced_replicas=view.ready + view.loading,
                probe=probe,
            )
        )
        if verdict is None or verdict.outcome != "scaled" or verdict.replicas == self._current:
            return None
        self._current = verdict.replicas
        self._last_scaled_at = folded.updated_at
        self.verdicts.append((view.now, verdict.replicas, verdict.reason))
        return Scale(verdict.replicas, tuple(_capacity_class(r, self.policy) for r in verdict.placed_on))

    def on_spot_notice(self, notice: SpotNoticeView, view: PoolView) -> tuple[CapacityClass, ...]:
        if notice.replicas_on_node == 0:
            return ()
        cost = self.policy.cost
        self.spot.record(at(notice.now), cost.interruption_limit if cost is not None else None)
        wanted = notice.replicas_on_node
        classes: list[CapacityClass] = ["on-demand"] * len(view.probe(wanted, "on-demand"))
        placed = view.ready + view.loading
        spot_ok = (
            cost is not None
            and cost.spot_enabled
            and not self.spot.suspended
            and view.spot_replicas + 1 <= math.floor(cost.spot_percent_cap / 100 * (placed + 1))
        )
        if len(classes) < wanted and spot_ok:
            classes += ["spot"] * len(view.probe(wanted - len(classes), "spot"))
        if classes:
            # The cell's surge is a scale: it restarts the cooldown.
            self._last_scaled_at = at(notice.now)
        return tuple(classes)


def at(second: float) -> datetime:
    return MIDNIGHT + timedelta(seconds=second)


def _capacity_class(replica: ProbedReplica, policy: PoolPolicy) -> CapacityClass:
    """How the cell constrains a new replica the verdict placed: to its probed capacity class
    when the pool has a cost policy (spot within its allowance, the rest on-demand)."""
    if policy.cost is None or not replica.node:
        return "any"
    return "spot" if replica.spot else "on-demand"
