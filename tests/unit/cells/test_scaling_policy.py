"""The pure scaling policy (berth.cells.scaling.decide_scale): table-driven cases and properties."""

from __future__ import annotations

from datetime import timedelta

import pytest
from berth.schemas import PoolLagState
from berth.schemas.samples import T0
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.cells.pools import PoolPolicy
from berth.cells.scaling import (
    ProbedReplica,
    ScalingInput,
    ScalingMemory,
    decide_scale,
    grid_dirty,
    remember,
)


def lag(tokens: int, rate: float = 1000, seconds: float = 0, ready: int | None = None) -> PoolLagState:
    return PoolLagState(
        pool="p",
        namespace="ns",
        tokens_in_queue=tokens,
        token_rate=rate,
        smoothed_token_rate=rate,
        # Capped as token-lag caps it (a tiny rate would give an infinite wait).
        expected_ttft_ms=min(tokens / rate * 1000, 3_600_000.0) if rate else None,
        ready_replicas=ready,
        updated_at=T0 + timedelta(seconds=seconds),
    )


def policy(**extra) -> PoolPolicy:
    return PoolPolicy.model_validate(
        {
            "tokensPerSecondPerReplica": 1000,
            "ttftSloMs": 2000,
            "minReplicas": 1,
            "maxReplicas": 20,
            "cooldownSeconds": 300,
            "modelLoadSeconds": 0,
            **extra,
        }
    )


class Room:
    """A probe over fixed room per capacity class; records what it was asked."""

    def __init__(self, spot: int = 100, on_demand: int = 100, price: float | None = 10.0) -> None:
        self.left = {"spot": spot, "on-demand": on_demand}
        self.price = price
        self.asked: list[tuple[int, str]] = []

    def __call__(self, count, capacity):
        self.asked.append((count, capacity))
        classes = ["spot", "on-demand"] if capacity == "any" else [capacity]
        out = []
        for cls in classes:
            take = min(count - len(out), self.left[cls])
            self.left[cls] -= take
            out += [ProbedReplica(node=f"{cls}-{i}", spot=cls == "spot", cost_per_hour=self.price) for i in range(take)]
        return out


@pytest.mark.parametrize(
    ("name", "extra", "state", "current", "probe", "expected"),
    [
        ("SLO exceeded: the token rule", {}, lag(30_000), 2, None, 15),
        ("within SLO: nothing", {}, lag(1_500), 2, None, None),
        ("bounded by maxReplicas", {"maxReplicas": 8}, lag(30_000), 2, None, 8),
        (
            "headroom triggers earlier and sizes for SLO − headroom",
            {"scheduling": {"costOptimization": {"sloHeadroomMs": 1000}}},
            lag(3_000),
            1,
            Room(),
            3,
        ),
        ("only what fits", {}, lag(30_000), 2, Room(spot=0, on_demand=3), 5),
        ("nothing fits: held", {}, lag(30_000), 2, Room(spot=0, on_demand=0), "held"),
        (
            "spot disabled: on-demand only",
            {"scheduling": {"costOptimization": {"spotEnabled": False}}},
            lag(30_000),
            2,
            Room(spot=50, on_demand=4),
            6,
        ),
        (
            "spot within maxSpotPercent, the rest on-demand",
            {"scheduling": {"costOptimization": {"spotEnabled": True, "maxSpotPercent": 50}}},
            lag(8_000),
            2,
            Room(spot=50, on_demand=50),
            4,
        ),
        (
            "cost ceiling: 20/h spent + 2 × 10/h <= 45/h",
            {"scheduling": {"costOptimization": {"maxCostPerHour": 45}}},
            lag(30_000),
            2,
            Room(price=10.0),
            4,
        ),
        ("below minReplicas", {"minReplicas": 3}, lag(0, rate=0), 1, None, 3),
        ("above maxReplicas after a policy change", {"maxReplicas": 4}, lag(0, rate=0), 6, None, 4),
    ],
)
def test_decide_scale_table(name, extra, state, current, probe, expected):
    verdict = decide_scale(
        ScalingInput(
            policy=policy(**extra),
            lag=state,
            current=current,
            probe=probe,
            pool_cost_per_hour=20.0 if "maxCostPerHour" in str(extra) else None,
        )
    )
    if expected is None:
        assert verdict is None, name
    elif expected == "held":
        assert verdict is not None and verdict.outcome == "held" and verdict.replicas == current, name
        assert "none can be added" in verdict.reason
    else:
        assert verdict is not None and verdict.outcome == "scaled" and verdict.replicas == expected, (name, verdict)


def test_spot_share_is_capped_and_on_demand_is_the_fallback():
    room = Room(spot=50, on_demand=50)
    verdict = decide_scale(
        ScalingInput(
            policy=policy(scheduling={"costOptimization": {"spotEnabled": True, "maxSpotPercent": 50}}),
            lag=lag(8_000),
            current=2,
            spot_replicas=1,
            probe=room,
        )
    )
    # 4 wanted → 2 more; half of 4 may be spot and one already is: 1 spot, 1 on-demand.
    assert verdict is not None and verdict.replicas == 4
    assert room.asked == [(1, "spot"), (1, "on-demand")]
    assert sum(r.spot for r in verdict.placed_on) == 1


def test_suspended_spot_goes_on_demand():
    room = Room()
    decide_scale(
        ScalingInput(
            policy=policy(scheduling={"costOptimization": {"spotEnabled": True}}),
            lag=lag(8_000),
            current=2,
            spot_suspended=True,
            probe=room,
        )
    )
    assert room.asked == [(2, "on-demand")]


def memory(demand: float, *, seconds: float = 0, tokens: int = 0, needs=(), since: float = -3600) -> ScalingMemory:
    at = T0 + timedelta(seconds=seconds)
    return ScalingMemory(
        at, tokens, demand, tuple((T0 + timedelta(seconds=t), n) for t, n in needs), since=T0 + timedelta(seconds=since)
    )


def fold(p: PoolPolicy, states) -> ScalingMemory | None:
    kept = None
    for state in states:
        kept = remember(kept, state, p)
    return kept


def test_remember_folds_the_arriving_rate_and_keeps_the_window_of_needs():
    p = policy()  # 1,000 tokens/s per replica, cooldown 300 s
    first = remember(None, lag(0, rate=700), p)
    assert first.demand == 700 and first.stabilized_need() == 1 and first.since == T0
    # 700 processed while the queue grew by 3,000 in 5 s: 1,300 tokens/s arrived.
    second = remember(first, lag(3_000, rate=700, seconds=5), p)
    assert 700 < second.demand < 1_300
    # A stale or repeated state changes nothing (reports interleave; Kafka redelivers).
    assert remember(second, lag(9_000, rate=700, seconds=5), p) is second
    assert remember(second, lag(9_000, rate=700, seconds=1), p) is second
    # A state long after: the demand has converged (5,000 processed, the queue of 3,000 gone over
    # 395 s), and needs older than 300 s left the window.
    later = remember(second, lag(0, rate=5_000, seconds=400), p)
    assert abs(later.demand - (5_000 - 3_000 / 395)) < 1 and later.needs == ((T0 + timedelta(seconds=400), 8),)
    assert later.covers(300) and not second.covers(300)


def test_steady_term_sizes_for_the_demand_at_the_target_utilisation():
    # 7,000 tokens/s arriving, no queue: 7,000 / (1,000 × 0.7) = 10 replicas.
    verdict = decide_scale(
        ScalingInput(policy=policy(), lag=lag(0, rate=7_000, ready=4), current=4, memory=memory(7_000))
    )
    assert verdict is not None and verdict.replicas == 10 and verdict.reason.startswith("steady: demand 7000")
    assert not verdict.slo_critical


def test_scale_up_leads_by_the_model_load_time_at_the_smoothed_demand():
    # 3,000 tokens/s arrive, one ready replica serves 1,000: in 60 s the queue of 3,000 is 123,000.
    led = decide_scale(
        ScalingInput(policy=policy(modelLoadSeconds=60), lag=lag(3_000, ready=1), current=1, memory=memory(3_000))
    )
    assert led is not None and led.replicas == 20  # ceil(123,000 / 2,000) = 62, within maxReplicas 20
    assert led.reason.startswith("drain: 3000 tokens queued, 123000 in 60s (the model load time)")
    assert "need 62 replicas (maxReplicas 20)" in led.reason
    unled = decide_scale(
        ScalingInput(policy=policy(modelLoadSeconds=0), lag=lag(3_000, ready=1), current=1, memory=memory(3_000))
    )
    assert unled is not None and unled.replicas == 5 and unled.reason.startswith("steady")
    # Without memory the processed rate is the demand and nothing is projected.
    bare = decide_scale(ScalingInput(policy=policy(modelLoadSeconds=60), lag=lag(3_000, ready=1), current=1))
    assert bare is not None and bare.replicas == 2


def test_a_burst_of_long_prompts_is_not_a_trend():
    """The old rule's worst case (bench.scaling, seed 42, 00:08): one replica at ~70 % load, a queue
    of 1,021 then 5,387 tokens 5 s later; the slope between the two, projected 90 s ahead, asked
    for 7 replicas, then 28."""
    p = PoolPolicy.model_validate(
        {
            "tokensPerSecondPerReplica": 2000,
            "ttftSloMs": 2000,
            "maxReplicas": 40,
            "modelLoadSeconds": 90,
            "cooldownSeconds": 300,
            "scheduling": {"costOptimization": {"sloHeadroomMs": 500}},
        }
    )
    steady = [lag(0, rate=1_400, seconds=t, ready=1) for t in range(0, 300, 5)]
    burst = [lag(1_021, rate=1_400, seconds=300, ready=1), lag(5_387, rate=1_400, seconds=305, ready=1)]
    kept = fold(p, steady + burst)
    verdict = decide_scale(ScalingInput(policy=p, lag=burst[-1], current=1, memory=kept))
    assert verdict is not None and verdict.replicas == 2, verdict
    assert verdict.reason.startswith("drain: 5387 tokens queued need 2 replicas")


def test_scale_down_in_one_step_to_the_highest_need_of_the_cooldown_window():
    p = policy()
    window = [(150, 6), (250, 4)]
    # Cooling down: nothing, whatever the window says.
    assert (
        decide_scale(
            ScalingInput(
                policy=p,
                lag=lag(0, rate=1_000, seconds=400),
                current=20,
                last_scaled_at=T0 + timedelta(seconds=200),
                memory=memory(1_000, seconds=400, needs=window),
            )
        )
        is None
    )
    down = decide_scale(
        ScalingInput(
            policy=p,
            lag=lag(0, rate=1_000, seconds=400),
            current=20,
            last_scaled_at=T0,
            memory=memory(1_000, seconds=400, needs=window),
        )
    )
    assert down is not None and down.replicas == 6
    assert "6 is the highest steady need of the last 300s" in down.reason
    # A queue that 6 replicas would not serve within half the target: not yet.
    assert (
        decide_scale(
            ScalingInput(
                policy=p,
                lag=lag(7_000, rate=1_000, seconds=400),
                current=20,
                last_scaled_at=T0,
                memory=memory(1_000, seconds=400, needs=window),
            )
        )
        is None
    )
    # A memory younger than the window has not seen what the pool needed over it.
    assert (
        decide_scale(
            ScalingInput(
                policy=p,
                lag=lag(0, rate=1_000, seconds=400),
                current=20,
                last_scaled_at=T0,
                memory=memory(1_000, seconds=400, needs=window, since=200),
            )
        )
        is None
    )


def test_scale_down_one_step_after_the_cooldown_only_without_memory():
    p = policy()
    assert (
        decide_scale(ScalingInput(policy=p, lag=lag(100, rate=500, seconds=100), current=5, last_scaled_at=T0)) is None
    )
    verdict = decide_scale(ScalingInput(policy=p, lag=lag(100, rate=500, seconds=301), current=5, last_scaled_at=T0))
    assert verdict is not None and verdict.replicas == 4 and "queue short" in verdict.reason


def test_time_shifting_defers_only_what_is_not_slo_critical():
    green = policy(
        modelLoadSeconds=60, scheduling={"carbonAware": {"maxCarbonIntensity": 100, "timeShifting": {"enabled": True}}}
    )
    # The lead only (the expected TTFT of 1,800 ms still holds): deferred while the grid is dirty.
    growing = dict(policy=green, lag=lag(1_800, ready=1), current=1, memory=memory(1_500))
    deferred = decide_scale(ScalingInput(**growing, carbon_intensity=300))
    assert deferred is not None and deferred.outcome == "held" and "time shifting" in deferred.reason
    clean = decide_scale(ScalingInput(**growing, carbon_intensity=50))
    assert clean is not None and clean.outcome == "scaled"
    critical = decide_scale(ScalingInput(policy=green, lag=lag(30_000), current=1, carbon_intensity=300))
    assert critical is not None and critical.outcome == "scaled"


def test_clean_energy_hours_are_utc_event_time():
    hours = policy(scheduling={"carbonAware": {"timeShifting": {"enabled": True, "cleanEnergyHours": "09:00-17:00"}}})
    assert grid_dirty(hours, T0.replace(hour=10), None) is None
    assert "outside the clean-energy hours" in grid_dirty(hours, T0.replace(hour=20), None)


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.integers(0, 2_000_000),
    rate=st.floats(0, 50_000),
    current=st.integers(0, 40),
    room=st.integers(0, 40),
    max_replicas=st.integers(1, 30),
    budget=st.one_of(st.none(), st.floats(1, 500)),
    demand=st.one_of(st.none(), st.floats(0, 100_000)),
    ready=st.one_of(st.none(), st.integers(0, 40)),
)
def test_never_beyond_max_room_or_budget_and_deterministic(
    tokens, rate, current, room, max_replicas, budget, demand, ready
):
    cost = {"costOptimization": {"maxCostPerHour": budget}} if budget is not None else {}
    p = policy(maxReplicas=max_replicas, minReplicas=min(1, max_replicas), scheduling=cost, modelLoadSeconds=90)
    inputs = dict(
        policy=p,
        lag=lag(tokens, rate=rate, ready=ready),
        current=current,
        pool_cost_per_hour=0.0,
        memory=memory(demand, needs=[(-100, max_replicas)]) if demand is not None else None,
    )
    verdict = decide_scale(ScalingInput(**inputs, probe=Room(spot=0, on_demand=room, price=7.0)))
    again = decide_scale(ScalingInput(**inputs, probe=Room(spot=0, on_demand=room, price=7.0)))
    assert verdict == again
    if verdict is None or verdict.replicas <= current:
        return
    added = verdict.replicas - current
    assert verdict.replicas <= max_replicas
    assert added <= room
    if budget is not None:
        assert added * 7.0 <= budget + 1e-6


def test_a_pool_over_its_budget_is_scaled_down_to_what_the_budget_pays_for():
    budget = policy(scheduling={"costOptimization": {"maxCostPerHour": 45}})
    quiet = lag(0, rate=500, ready=6)
    # Six placed replicas at 10/h = 60/h > 45/h: down to 4 at once (no cooldown), with the reason.
    verdict = decide_scale(
        ScalingInput(
            policy=budget,
            lag=quiet,
            current=6,
            pool_cost_per_hour=60.0,
            priced_replicas=6,
            last_scaled_at=quiet.updated_at,
        )
    )
    assert verdict is not None and verdict.outcome == "scaled" and verdict.replicas == 4
    assert verdict.reason.startswith("over budget: 6 replicas at 10.00/h each cost 60.00/h, above maxCostPerHour 45")
    # Asked down to 4 while the cluster still runs 6: priced by the count asked for, no further shrink.
    assert (
        decide_scale(
            ScalingInput(
                policy=budget,
                lag=quiet,
                current=4,
                pool_cost_per_hour=60.0,
                priced_replicas=6,
                last_scaled_at=quiet.updated_at,
            )
        )
        is None
    )
    # Within budget: the ordinary rule.
    assert (
        decide_scale(
            ScalingInput(
                policy=budget,
                lag=quiet,
                current=4,
                pool_cost_per_hour=40.0,
                priced_replicas=4,
                last_scaled_at=quiet.updated_at,
            )
        )
        is None
    )


def test_over_budget_keeps_min_replicas_and_sends_the_need_to_the_fallback_model():
    p = policy(minReplicas=2, scheduling={"costOptimization": {"maxCostPerHour": 15, "fallbackModel": "small"}})
    busy = lag(30_000, rate=4_000, ready=5)  # the token rule wants 15 replicas
    verdict = decide_scale(ScalingInput(policy=p, lag=busy, current=5, pool_cost_per_hour=50.0, priced_replicas=5))
    assert verdict is not None and verdict.replicas == 2
    assert "(minReplicas 2)" in verdict.reason and "fallback model small" in verdict.reason
    assert verdict.fallback is not None and verdict.fallback.model == "small" and verdict.fallback.replicas == 13
