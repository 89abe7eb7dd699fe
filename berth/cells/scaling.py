"""The scaling policy of an inference pool, as a pure function: facts in, a verdict with its reason out.

:func:`decide_scale` is the whole policy (the decision cell and ``bench/scaling`` call it).

The token rule asks for the larger of two terms (the verdict's reason names the one that decided):

* *steady*: the demand served at :data:`TARGET_UTILISATION` —
  ``ceil(demand / (tokensPerSecondPerReplica × TARGET_UTILISATION))``. The demand is the token
  rate *arriving* (processed + the queue's growth), smoothed in event time
  (:class:`ScalingMemory`, folded from the lag states by :func:`remember`);
* *drain*: the queue served within the target TTFT (the SLO less ``sloHeadroomMs``), *led by the
  model load time* — ``ceil(projected_tokens / (tokensPerSecondPerReplica × target))``. A replica
  asked for now serves only after ``modelLoadSeconds``; until then the queue grows by what the
  smoothed demand exceeds the ready replicas' rate, so that is what is projected (never a slope
  between two reports: one burst of long prompts is not a trend);

and, for a pool with ``queueConfig.autoscaleOnLag``, a third term:

* *lag*: the fewest replicas whose second of work brings the queue's lag (tokens queued less
  ``replicas x tokensPerSecondPerReplica``) to ``maxLagThreshold`` —
  ``ceil((tokens_in_queue - maxLagThreshold) / tokensPerSecondPerReplica)``.

A warm pool (``prewarmPercent``) adds ``ceil(need x prewarmPercent / 100)`` ready replicas to the
largest term. Within ``[minReplicas, maxReplicas]``. A count above the current one is a scale-up; then the
cluster has its say, in this order:

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
4. whatever is still missing goes to ``fallbackModel``'s pool, if the pool names one — all of it
   without a ``fallbackTrigger``; with one, after the seed's decision tree: the replicas the
   budget cut when ``costExceeded``, and the replicas no node had room for when ``sloAtRisk`` and
   the SLO is at risk (expected TTFT above the SLO less ``sloHeadroomMs``).

Before all that, a pool whose replicas cost more than ``maxCostPerHour`` (prices rose, the budget
was lowered) is scaled down at once to what the budget pays for, never below ``minReplicas``;
the rest of its need goes to ``fallbackModel`` (unless its ``fallbackTrigger`` says
``costExceeded: false``).

Scale down, after ``cooldownSeconds`` since the last scale and while the queue is short (the
expected TTFT at the new count stays under half the target), in one step to the *stabilized*
need: the highest steady need of the last ``cooldownSeconds`` (the memory's window, as the
HPA's scale-down stabilization window) or the need now, whichever is higher. Without memory
(a caller that keeps none) one replica at a time. Above ``maxReplicas`` (a policy change)
straight to it.

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

TARGET_UTILISATION = 0.7
"""The share of ``tokensPerSecondPerReplica`` the steady term sizes a pool for."""
DEMAND_HALF_LIFE_S = 15.0
"""Half-life of the smoothed demand (event time)."""


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
    ``spot_replicas``: how many of them run on spot nodes; ``pool_cost_per_hour``: what the
    ``priced_replicas`` placed replicas cost now (None: unknown); ``carbon_intensity``: the
    grid's intensity where the pool would grow (None: unknown); ``probe``: None when no placement check is possible
    (the count is then unchecked, and the reason says so); ``memory``: :func:`remember` folded over the pool's lag
    states up to and including ``lag`` (None: no demand history — the demand is then the
    processed rate, nothing is projected and scale-downs go one replica at a time)."""

    policy: PoolPolicy
    lag: PoolLagState
    current: int
    last_scaled_at: datetime | None = None
    memory: ScalingMemory | None = None
    spot_suspended: bool = False
    spot_replicas: int = 0
    pool_cost_per_hour: float | None = None
    priced_replicas: int = 0
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


@dataclass(frozen=True)
class ScalingMemory:
    """What the policy keeps of a pool between lag states: a pure fold of them in event order
    (:func:`remember`), so whoever holds it (the decision cell) rebuilds it by replaying its inputs.

    ``demand``: the token rate *arriving* at the pool (tokens/s) — the rate processed plus the
    queue's growth between two states — smoothed in event time (half-life
    :data:`DEMAND_HALF_LIFE_S`); unlike the processed rate it keeps rising while a saturated pool
    falls behind. ``needs``: (time, :func:`steady_replicas` of the demand then) over the last
    ``cooldownSeconds``, oldest first — the stabilization window a scale-down looks back over."""

    updated_at: datetime
    tokens_in_queue: int
    demand: float
    needs: tuple[tuple[datetime, int], ...] = ()
    since: datetime | None = None
    """The first lag state folded: the window covers ``cooldownSeconds`` only that long after."""

    def stabilized_need(self) -> int:
        """The highest steady need of the window (0 when empty)."""
        return max((need for _, need in self.needs), default=0)

    def covers(self, seconds: float) -> bool:
        """Whether the memory has seen ``seconds`` of the pool: before that its window is too
        short to say what the pool needed over it (a just-started fold saw no peak yet)."""
        return self.since is not None and (self.updated_at - self.since).total_seconds() >= seconds


def steady_replicas(policy: PoolPolicy, demand: float) -> int:
    """Replicas serving ``demand`` tokens/s at :data:`TARGET_UTILISATION`, within the bounds."""
    wanted = math.ceil(max(demand, 0.0) / (policy.tokens_per_second_per_replica * TARGET_UTILISATION) - 1e-9)
    return max(policy.min_replicas, min(policy.max_replicas, wanted))


def remember(memory: ScalingMemory | None, lag: PoolLagState, policy: PoolPolicy) -> ScalingMemory:
    """The memory after ``lag``. A state not newer than the memory's changes nothing (stale or
    repeated reports); the first one starts the demand at its smoothed processed rate."""
    at = lag.updated_at
    if memory is None:
        demand = lag.smoothed_token_rate
        return ScalingMemory(at, lag.tokens_in_queue, demand, ((at, steady_replicas(policy, demand)),), since=at)
    dt = (at - memory.updated_at).total_seconds()
    if dt <= 0:
        return memory
    arriving = max(0.0, lag.token_rate + (lag.tokens_in_queue - memory.tokens_in_queue) / dt)
    alpha = 1.0 - 2.0 ** (-dt / DEMAND_HALF_LIFE_S)
    demand = memory.demand + alpha * (arriving - memory.demand)
    horizon = at.timestamp() - policy.cooldown_s
    needs = tuple(n for n in memory.needs if n[0].timestamp() > horizon) + ((at, steady_replicas(policy, demand)),)
    return ScalingMemory(at, lag.tokens_in_queue, demand, needs, since=memory.since)


def grid_dirty(policy: PoolPolicy, now: datetime, carbon_intensity: float | None) -> str | None:
    """Why the grid counts as dirty for a time-shifting pool now, or None (clean, or the pool
    does not shift work)."""
    carbon = policy.carbon
    if carbon is None or carbon.time_shifting is None or not carbon.time_shifting.enabled:
        return None
    if (
        carbon.max_carbon_intensity is not None
        and carbon_intensity is not None
        and carbon_intensity > carbon.max_carbon_intensity
    ):
        return f"carbon intensity {carbon_intensity:.0f} gCO2/kWh above the pool's {carbon.max_carbon_intensity:.0f}"
    hours = carbon.time_shifting.hours()
    if hours is not None:
        start, end = hours
        clock = now.time().replace(tzinfo=None)
        inside = start <= clock < end if start <= end else (clock >= start or clock < end)
        if not inside:
            return f"{clock:%H:%M} UTC is outside the clean-energy hours {carbon.time_shifting.clean_energy_hours}"
    return None


@dataclass(frozen=True)
class Need:
    """What the token rule asks for and which term decided: ``steady`` (the demand at the target
    utilisation), ``drain`` (the queue, led by the model load time, served within the target
    TTFT) or ``lag`` (``queueConfig``'s lag threshold); ``warm``: the warm pool on top."""

    replicas: int
    steady: int
    drain: int
    projected_tokens: float
    demand: float
    lag: int = 0
    warm: int = 0

    @property
    def term(self) -> str:
        if self.lag > max(self.drain, self.steady):
            return "lag"
        return "drain" if self.drain >= self.steady else "steady"


def warm_replicas(policy: PoolPolicy, need: int) -> int:
    """Ready replicas kept beyond ``need``: ``ceil(need x prewarmPercent / 100)``."""
    return math.ceil(need * policy.prewarm_percent / 100 - 1e-9) if policy.prewarm_percent else 0


def lag_replicas(policy: PoolPolicy, lag: PoolLagState) -> int:
    """``queueConfig``'s term: the fewest replicas that keep the queue's lag (tokens queued less
    what the replicas take in a second) at or under ``maxLagThreshold``; 0 without it."""
    queue = policy.queue_config
    if queue is None or not queue.autoscale_on_lag or queue.max_lag_threshold is None:
        return 0
    excess = lag.tokens_in_queue - queue.max_lag_threshold
    return max(0, math.ceil(excess / policy.tokens_per_second_per_replica - 1e-9))


def need(inputs: ScalingInput) -> Need:
    """The replicas the pool needs now: the larger of the steady term and the drain term.

    The drain term is ``ceil(projected / (tokensPerSecondPerReplica × target TTFT))``; the queue
    is projected over the model load time (until a replica asked for now serves) at the rate the
    demand exceeds what the ready replicas serve — smoothed demand, not the slope between two
    reports, so one burst of long prompts does not pass for a trend. Without memory the demand
    is the processed rate and nothing is projected."""
    policy, lag, memory = inputs.policy, inputs.lag, inputs.memory
    tps = policy.tokens_per_second_per_replica
    target_s = target_ttft_ms(policy) / 1000
    demand = memory.demand if memory is not None else lag.smoothed_token_rate
    projected = float(lag.tokens_in_queue)
    if memory is not None:
        ready = lag.ready_replicas if lag.ready_replicas is not None else inputs.current
        # What is served until then: the ready replicas' rate, or more if they are seen doing more.
        serving = max(ready * tps, lag.token_rate)
        projected += max(0.0, demand - serving) * policy.model_load_seconds
    drain = math.ceil(projected / (tps * target_s) - 1e-9) if target_s > 0 else policy.max_replicas
    steady = steady_replicas(policy, demand)
    by_lag = lag_replicas(policy, lag)
    base = max(steady, drain, by_lag)
    warm = warm_replicas(policy, base)
    replicas = max(policy.min_replicas, min(policy.max_replicas, base + warm))
    return Need(replicas, steady, drain, projected, demand, by_lag, warm)


def decide_scale(inputs: ScalingInput) -> ScaleVerdict | None:
    """The replica count to ask for now (or a held verdict saying why not), or None to leave the
    pool as it is. See the module docstring for the rule."""
    policy, current = inputs.policy, inputs.current
    if current > policy.max_replicas:
        return ScaleVerdict(policy.max_replicas, f"above maxReplicas {policy.max_replicas}", wanted=policy.max_replicas)
    target_ms = target_ttft_ms(policy)
    wanted = need(inputs)
    over = _over_budget(inputs, wanted)
    if over is not None:
        return over
    if wanted.replicas > current:
        return _grow(inputs, wanted.replicas, _why_up(inputs, wanted, target_ms), _slo_critical(inputs))
    if current < policy.min_replicas:
        return _grow(inputs, policy.min_replicas, f"below minReplicas {policy.min_replicas}", slo_critical=True)
    return _shrink(inputs, wanted, target_ms)


def _over_budget(inputs: ScalingInput, wanted: Need) -> ScaleVerdict | None:
    """Down to what ``maxCostPerHour`` pays for when the replicas asked for cost more, at the
    placed replicas' mean price (the ReplicaSet, not the policy, picks which go); never below
    ``minReplicas``. Whatever the pool needs beyond that goes to ``fallbackModel``. The count
    asked for, not the replicas still placed, is priced, so a pool the cluster has not shrunk
    yet is not shrunk again."""
    policy, current = inputs.policy, inputs.current
    cost = policy.cost
    if cost is None or cost.max_cost_per_hour is None or not inputs.pool_cost_per_hour or inputs.priced_replicas <= 0:
        return None
    price = inputs.pool_cost_per_hour / inputs.priced_replicas
    budget = cost.max_cost_per_hour
    if current * price <= budget + 1e-9:
        return None
    keep = max(policy.min_replicas, math.floor(budget / price + 1e-9))
    if keep >= current:
        return None
    why = (
        f"over budget: {current} replicas at {price:.2f}/h each cost {current * price:.2f}/h, above "
        f"maxCostPerHour {budget:g}; {keep} fit"
        + (f" (minReplicas {policy.min_replicas})" if keep * price > budget + 1e-9 else "")
    )
    fallback = None
    short = wanted.replicas - keep
    if short > 0 and cost.fallback_model and cost.falls_back_on_cost():
        fallback = Fallback(cost.fallback_model, short, short * policy.tokens_per_second_per_replica)
        why += f"; fallback model {cost.fallback_model} asked for {short} replica(s)' worth"
    return ScaleVerdict(keep, why, wanted=wanted.replicas, fallback=fallback)


def slo_at_risk(inputs: ScalingInput) -> bool:
    """The decision tree's first question: is the expected TTFT above the target (the SLO less
    ``sloHeadroomMs``)?"""
    expected = inputs.lag.expected_ttft_ms
    return expected is not None and expected > target_ttft_ms(inputs.policy)


def _slo_critical(inputs: ScalingInput) -> bool:
    """The SLO itself is missed now (not only the headroom or the lead asked for more)."""
    expected = inputs.lag.expected_ttft_ms
    return expected is not None and expected > inputs.policy.ttft_slo_ms


def _why_up(inputs: ScalingInput, wanted: Need, target_ms: float) -> str:
    policy = inputs.policy
    asked = {"steady": wanted.steady, "drain": wanted.drain, "lag": wanted.lag}[wanted.term]
    bound = f" (maxReplicas {policy.max_replicas})" if asked + wanted.warm > policy.max_replicas else ""
    warm = f"; {wanted.replicas} with {wanted.warm} warm (prewarmPercent {policy.prewarm_percent:g})"
    warm = warm if wanted.warm else ""
    return _term_reason(inputs, wanted, target_ms, asked, bound) + warm


def _term_reason(inputs: ScalingInput, wanted: Need, target_ms: float, asked: int, bound: str) -> str:
    policy, lag = inputs.policy, inputs.lag
    if wanted.term == "lag":
        queue = policy.queue_config
        assert queue is not None and queue.max_lag_threshold is not None
        taken = inputs.current * policy.tokens_per_second_per_replica
        return (
            f"queue lag: {lag.tokens_in_queue} tokens queued, {inputs.current} replicas take {taken:.0f} "
            f"tokens/s: lag {max(0, lag.tokens_in_queue - taken):.0f} above maxLagThreshold "
            f"{queue.max_lag_threshold}; need {asked} replicas{bound}"
        )
    if wanted.term == "steady":
        return (
            f"steady: demand {wanted.demand:.0f} tokens/s needs {asked} replicas{bound} at "
            f"{TARGET_UTILISATION:.0%} of {policy.tokens_per_second_per_replica:.0f} tokens/s each"
        )
    slo = f"{target_ms:.0f}ms (SLO {policy.ttft_slo_ms:.0f}ms" + (
        f" less {policy.ttft_slo_ms - target_ms:.0f}ms headroom)" if target_ms != policy.ttft_slo_ms else ")"
    )
    led = wanted.projected_tokens > lag.tokens_in_queue
    return (
        f"drain: {lag.tokens_in_queue} tokens queued"
        + (
            f", {wanted.projected_tokens:.0f} in {policy.model_load_seconds:.0f}s (the model load time) at "
            f"demand {wanted.demand:.0f} tokens/s,"
            if led
            else ""
        )
        + f" need {asked} replicas{bound} to wait at most {slo}"
        + (f"; expected TTFT now {lag.expected_ttft_ms:.0f}ms" if lag.expected_ttft_ms is not None else "")
    )


def _shrink(inputs: ScalingInput, wanted: Need, target_ms: float) -> ScaleVerdict | None:
    """Down to the stabilized need (see the module docstring), or None."""
    policy, lag, current, memory = inputs.policy, inputs.lag, inputs.current, inputs.memory
    if current <= policy.min_replicas:
        return None
    last = inputs.last_scaled_at
    if last is not None and (lag.updated_at - last).total_seconds() < policy.cooldown_s:
        return None
    if memory is not None and not memory.covers(policy.cooldown_s):
        return None
    window = memory.stabilized_need() if memory is not None else 0
    window += warm_replicas(policy, window)
    # Without a window to stabilize over, one step at a time.
    down_to = max(wanted.replicas, window) if memory is not None else max(wanted.replicas, current - 1)
    if down_to >= current:
        return None
    ttft_after_ms = lag.tokens_in_queue / (policy.tokens_per_second_per_replica * down_to) * 1000
    if ttft_after_ms >= target_ms / 2:
        return None
    if memory is None:
        decided = "one step (no demand history)"
    elif window > wanted.replicas:
        decided = f"the highest steady need of the last {policy.cooldown_s:.0f}s"
    else:
        decided = f"the need now ({wanted.term})"
    return ScaleVerdict(
        down_to,
        f"queue short: expected TTFT {ttft_after_ms:.0f}ms with {down_to} replicas, "
        f"under half the target {target_ms:.0f}ms; {down_to} is {decided}, "
        f"demand {wanted.demand:.0f} tokens/s",
        wanted=down_to,
    )


def _grow(inputs: ScalingInput, wanted: int, why: str, slo_critical: bool) -> ScaleVerdict:
    policy, current = inputs.policy, inputs.current
    delta = wanted - current
    dirty = None if slo_critical else grid_dirty(policy, inputs.lag.updated_at, inputs.carbon_intensity)
    if dirty is not None:
        return ScaleVerdict(
            current,
            f"{why}; {current} → {wanted} deferred (time shifting): {dirty}; the SLO itself still holds",
            outcome="held",
            wanted=wanted,
        )
    notes: list[str] = []
    placeable = list(_plan(inputs, delta, notes))
    plan = _within_budget(inputs, placeable, notes)
    added = len(plan)
    cut = len(placeable) - added
    fallback = _fallback(inputs, short_of_room=delta - len(placeable), cut_by_budget=cut, notes=notes)
    detail = "; ".join(notes)
    if added == 0:
        return ScaleVerdict(
            current,
            f"{why}; wanted {wanted} replicas but none can be added: {detail}",
            outcome="held",
            wanted=wanted,
            fallback=fallback,
            slo_critical=slo_critical,
            notes=tuple(notes),
        )
    return ScaleVerdict(
        current + added,
        why + (f"; {detail}" if detail else ""),
        wanted=wanted,
        placed_on=tuple(plan),
        fallback=fallback,
        slo_critical=slo_critical,
        notes=tuple(notes),
    )


def _fallback(inputs: ScalingInput, *, short_of_room: int, cut_by_budget: int, notes: list[str]) -> Fallback | None:
    """The replicas' worth the fallback model takes: what the budget cut (``costExceeded``) and
    what found no room (``sloAtRisk``, while the SLO is at risk); everything without a trigger."""
    policy = inputs.policy
    cost = policy.cost
    if cost is None or not cost.fallback_model or short_of_room + cut_by_budget <= 0:
        return None
    at_risk = slo_at_risk(inputs)
    short = (cut_by_budget if cost.falls_back_on_cost() else 0) + (
        short_of_room if cost.falls_back_on_capacity(at_risk) else 0
    )
    withheld = short_of_room + cut_by_budget - short
    if withheld:
        why = "the SLO is met" if not at_risk else "fallbackTrigger"
        notes.append(f"fallback model {cost.fallback_model} not asked for {withheld} replica(s) ({why})")
    if short <= 0:
        return None
    notes.append(f"fallback model {cost.fallback_model} asked for {short} replica(s)' worth")
    return Fallback(cost.fallback_model, short, short * policy.tokens_per_second_per_replica)


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
            allowance = math.floor(cost.spot_percent_cap / 100 * (inputs.current + delta)) - inputs.spot_replicas
            if allowance > 0:
                spot = list(probe(min(delta, allowance), "spot"))
        on_demand = list(probe(delta - len(spot), "on-demand")) if delta > len(spot) else []
        if cost.spot_enabled and not inputs.spot_suspended and on_demand:
            notes.append(
                f"{len(on_demand)} on on-demand nodes (spot short or above maxSpotPercent {cost.spot_percent_cap:g})"
            )
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
        notes.append(
            f"maxCostPerHour {cost.max_cost_per_hour:g} allows {len(kept)} of {len(plan)} "
            f"(pool at {inputs.pool_cost_per_hour or 0:.2f}/h)"
        )
    if any(r.cost_per_hour is None for r in kept):
        notes.append("some prices unknown: counted as 0")
    return kept
