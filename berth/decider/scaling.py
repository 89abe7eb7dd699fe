"""The scaling policy of an inference pool, as a pure function: facts in, a verdict with its reason out.

:func:`decide_scale` is the whole policy (the decision cell and ``bench/scaling`` call it):

Scale up when the expected time to first token — *led by the model load time* — comes within the
pool's ``sloHeadroomMs`` of its TTFT SLO. The lead: a replica asked for now serves only after
``modelLoadSeconds``, so a growing queue is projected that far ahead (its slope between the
previous and the current lag state, event time; a shrinking queue is not projected). The count
is ``ceil(projected_tokens / (tokensPerSecondPerReplica × (SLO − headroom)))``, within
``[minReplicas, maxReplicas]``.

Then the cluster has its say, in this order:

1. *time shifting* (``carbonAware.timeShifting``): a scale-up that is not SLO-critical (the
   expected TTFT itself is still within the SLO; only the lead or the headroom asked for it) is
   deferred while the grid is dirty — carbon intensity above ``maxCarbonIntensity``, or an event
   time outside ``cleanEnergyHours``;
2. *placement*: the placement engine is asked where the additional replicas would go (a probe,
   nothing committed). Spot nodes take at most ``maxSpotPercent`` of the pool, only when
   ``spotEnabled`` and spot is not suspended for the pool; the rest must fit on on-demand nodes
   (the fallback when spot capacity is short). Never more replicas than can be placed;
3. *cost*: ``maxCostPerHour`` caps the pool's cost (each replica's share of its node's price);
   replicas are dropped from the dearest end of the plan until it fits;
4. whatever is still missing goes to ``fallbackModel``'s pool, if the pool names one.

Scale down one replica at a time, after ``cooldownSeconds`` since the last scale, while the
queue is short (the expected TTFT with one replica fewer stays under half the target) and the
token rate can be served by one replica fewer; above ``maxReplicas`` (a policy change) straight
to it.

Nothing here reads a clock: time is the lag state's ``updated_at``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from berth.schemas import PoolLagState

from .pools import PoolPolicy

CapacityClass = Literal["any", "on-demand", "spot"]


@dataclass(frozen=True)
class ProbedReplica:
    """Where one more replica would go: its node, whether spot, its share of the node's price per
    hour and the node's carbon intensity (None: unknown)."""

    node: str
    spot: bool = False
    cost_per_hour: float | None = None
    carbon_intensity: float | None = None


class CapacityProbe(Protocol):
    """The placement engine's answer: where up to ``count`` more replicas of the pool would be
    placed now on nodes of ``capacity`` class — fewer (or none) when they do not fit. Must not
    change anything (a hypothetical placement) and must be deterministic."""

    def __call__(self, count: int, capacity: CapacityClass) -> Sequence[ProbedReplica]: ...


@dataclass(frozen=True)
class ScalingInput:
    """Everything the policy reads. ``current``: the replica count last asked for (or observed);
    ``spot_replicas``: how many of them run on spot nodes; ``pool_cost_per_hour``: what they cost
    now (None: unknown); ``carbon_intensity``: the grid's intensity where the pool would grow
    (None: unknown); ``probe``: None when no placement check is possible (the count is then
    unchecked, and the reason says so)."""

    policy: PoolPolicy
    lag: PoolLagState
    current: int
    last_scaled_at: datetime | None = None
    previous_lag: PoolLagState | None = None
    spot_suspended: bool = False
    spot_replicas: int = 0
    pool_cost_per_hour: float | None = None
    carbon_intensity: float | None = None
    probe: CapacityProbe | None = None


@dataclass(frozen=True)
class Fallback:
    """Serve ``replicas`` replicas' worth of tokens with ``model`` instead."""

    model: str
    replicas: int
    tokens_per_second: float


@dataclass(frozen=True)
class ScaleVerdict:
    """``outcome`` ``scaled``: ask for ``replicas``; ``held``: a scale-up was wanted but nothing
    can be added now (``replicas`` == current) — deferred, unplaceable or over budget."""

    replicas: int
    reason: str
    outcome: Literal["scaled", "held"] = "scaled"
    wanted: int | None = None
    """What the token rule asked for before placement and cost."""
    placed_on: tuple[ProbedReplica, ...] = ()
    fallback: Fallback | None = None
    slo_critical: bool = False
    notes: tuple[str, ...] = field(default=())


def target_ttft_ms(policy: PoolPolicy) -> float:
    """The TTFT the pool is sized for: its SLO less the headroom."""
    cost = policy.cost
    return policy.ttft_slo_ms - (cost.slo_headroom_ms if cost is not None else 0.0)


def projected_tokens(lag: PoolLagState, previous: PoolLagState | None, lead_seconds: float) -> float:
    """The queue ``lead_seconds`` from now if it keeps growing as it did since ``previous``."""
    tokens = float(lag.tokens_in_queue)
    if previous is None or lead_seconds <= 0:
        return tokens
    dt = (lag.updated_at - previous.updated_at).total_seconds()
    if dt <= 0:
        return tokens
    slope = (lag.tokens_in_queue - previous.tokens_in_queue) / dt
    return tokens + max(slope, 0.0) * lead_seconds


def grid_dirty(policy: PoolPolicy, now: datetime, carbon_intensity: float | None) -> str | None:
    """Why the grid counts as dirty for a time-shifting pool now, or None (clean, or the pool
    does not shift work)."""
    carbon = policy.carbon
    if carbon is None or carbon.time_shifting is None or not carbon.time_shifting.enabled:
        return None
    if (carbon.max_carbon_intensity is not None and carbon_intensity is not None
            and carbon_intensity > carbon.max_carbon_intensity):
        return (f"carbon intensity {carbon_intensity:.0f} gCO2/kWh above the pool's "
                f"{carbon.max_carbon_intensity:.0f}")
    hours = carbon.time_shifting.hours()
    if hours is not None:
        start, end = hours
        clock = now.time().replace(tzinfo=None)
        inside = start <= clock < end if start <= end else (clock >= start or clock < end)
        if not inside:
            return f"{clock:%H:%M} UTC is outside the clean-energy hours {carbon.time_shifting.clean_energy_hours}"
    return None


def decide_scale(inputs: ScalingInput) -> ScaleVerdict | None:
    """The replica count to ask for now (or a held verdict saying why not), or None to leave the
    pool as it is. See the module docstring for the rule."""
    policy, lag, current = inputs.policy, inputs.lag, inputs.current
    if current > policy.max_replicas:
        return ScaleVerdict(policy.max_replicas, f"above maxReplicas {policy.max_replicas}",
                            wanted=policy.max_replicas)
    target_ms = target_ttft_ms(policy)
    expected = lag.expected_ttft_ms
    tokens = projected_tokens(lag, inputs.previous_lag, policy.model_load_seconds)
    projected_ms = expected
    if expected is not None and lag.smoothed_token_rate > 0 and tokens > lag.tokens_in_queue:
        projected_ms = expected + (tokens - lag.tokens_in_queue) / lag.smoothed_token_rate * 1000
    if projected_ms is not None and projected_ms > target_ms:
        wanted = math.ceil(tokens / (policy.tokens_per_second_per_replica * target_ms / 1000))
        wanted = max(policy.min_replicas, min(policy.max_replicas, wanted))
        if wanted <= current:
            return None
        why = (f"expected TTFT {expected:.0f}ms"
               + (f" ({projected_ms:.0f}ms in {policy.model_load_seconds:.0f}s, the model load time)"
                  if projected_ms != expected else "")
               + f" > {target_ms:.0f}ms (SLO {policy.ttft_slo_ms:.0f}ms"
               + (f" less {policy.ttft_slo_ms - target_ms:.0f}ms headroom)" if target_ms != policy.ttft_slo_ms
                  else ")")
               + f" with {lag.tokens_in_queue} tokens queued")
        slo_critical = expected is not None and expected > policy.ttft_slo_ms
        return _grow(inputs, wanted, why, slo_critical)
    if current < policy.min_replicas:
        return _grow(inputs, policy.min_replicas, f"below minReplicas {policy.min_replicas}", slo_critical=True)
    return _shrink(inputs, target_ms)


def _shrink(inputs: ScalingInput, target_ms: float) -> ScaleVerdict | None:
    policy, lag, current = inputs.policy, inputs.lag, inputs.current
    if current <= policy.min_replicas:
        return None
    last = inputs.last_scaled_at
    if last is not None and (lag.updated_at - last).total_seconds() < policy.cooldown_s:
        return None
    capacity_after = policy.tokens_per_second_per_replica * (current - 1)
    ttft_after_ms = lag.tokens_in_queue / capacity_after * 1000 if capacity_after > 0 else math.inf
    if ttft_after_ms < target_ms / 2 and max(lag.smoothed_token_rate, 0.0) <= capacity_after:
        return ScaleVerdict(current - 1, f"queue short: expected TTFT {ttft_after_ms:.0f}ms with "
                                         f"{current - 1} replicas, under half the target "
                                         f"{target_ms:.0f}ms", wanted=current - 1)
    return None


def _grow(inputs: ScalingInput, wanted: int, why: str, slo_critical: bool) -> ScaleVerdict:
    policy, current = inputs.policy, inputs.current
    delta = wanted - current
    dirty = None if slo_critical else grid_dirty(policy, inputs.lag.updated_at, inputs.carbon_intensity)
    if dirty is not None:
        return ScaleVerdict(current, f"{why}; {current} → {wanted} deferred (time shifting): {dirty}; "
                                     "the SLO itself still holds", outcome="held", wanted=wanted)
    notes: list[str] = []
    plan = list(_plan(inputs, delta, notes))
    plan = _within_budget(inputs, plan, notes)
    added = len(plan)
    fallback = None
    cost = policy.cost
    if added < delta and cost is not None and cost.fallback_model:
        short = delta - added
        fallback = Fallback(cost.fallback_model, short, short * policy.tokens_per_second_per_replica)
        notes.append(f"fallback model {cost.fallback_model} asked for {short} replica(s)' worth")
    detail = "; ".join(notes)
    if added == 0:
        return ScaleVerdict(current, f"{why}; wanted {wanted} replicas but none can be added: {detail}",
                            outcome="held", wanted=wanted, fallback=fallback, slo_critical=slo_critical,
                            notes=tuple(notes))
    return ScaleVerdict(current + added, why + (f"; {detail}" if detail else ""), wanted=wanted,
                        placed_on=tuple(plan), fallback=fallback, slo_critical=slo_critical, notes=tuple(notes))


def _plan(inputs: ScalingInput, delta: int, notes: list[str]) -> Sequence[ProbedReplica]:
    """Where ``delta`` more replicas would go: spot first within its allowance (cheaper), the
    rest on on-demand nodes; a pool without a cost policy takes any node."""
    probe, policy = inputs.probe, inputs.policy
    if probe is None:
        notes.append("placement not checked (no replica of the pool known yet)")
        return [ProbedReplica(node="") for _ in range(delta)]
    cost = policy.cost
    if cost is None:
        plan = list(probe(delta, "any"))
    else:
        spot: list[ProbedReplica] = []
        if cost.spot_enabled and inputs.spot_suspended:
            notes.append("spot suspended for the pool (interruptions)")
        elif cost.spot_enabled:
            allowance = math.floor(cost.max_spot_percent / 100 * (inputs.current + delta)) - inputs.spot_replicas
            if allowance > 0:
                spot = list(probe(min(delta, allowance), "spot"))
        on_demand = list(probe(delta - len(spot), "on-demand")) if delta > len(spot) else []
        if cost.spot_enabled and not inputs.spot_suspended and on_demand:
            notes.append(f"{len(on_demand)} on on-demand nodes (spot short or above maxSpotPercent "
                         f"{cost.max_spot_percent:g})")
        plan = spot + on_demand
    if len(plan) < delta:
        notes.append(f"capacity for {len(plan)} of {delta} more replica(s)")
    return plan


def _within_budget(inputs: ScalingInput, plan: list[ProbedReplica], notes: list[str]) -> list[ProbedReplica]:
    cost = inputs.policy.cost
    if cost is None or cost.max_cost_per_hour is None or not plan:
        return plan
    spent = inputs.pool_cost_per_hour or 0.0
    kept: list[ProbedReplica] = []
    # Cheapest first, so that the budget buys as many replicas as it can; ties keep plan order.
    for replica in sorted(plan, key=lambda r: r.cost_per_hour or 0.0):
        price = replica.cost_per_hour or 0.0
        if spent + price > cost.max_cost_per_hour + 1e-9:
            break
        spent += price
        kept.append(replica)
    if len(kept) < len(plan):
        notes.append(f"maxCostPerHour {cost.max_cost_per_hour:g} allows {len(kept)} of {len(plan)} "
                     f"(pool at {inputs.pool_cost_per_hour or 0:.2f}/h)")
    if any(r.cost_per_hour is None for r in kept):
        notes.append("some prices unknown: counted as 0")
    return kept
