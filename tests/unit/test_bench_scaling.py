"""bench.scaling: determinism, the references as defined, and what a spike or a spot notice does."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from berth.schemas import PoolLagState

from bench.scaling.berth import BerthPolicy
from bench.scaling.cluster import ClusterShape, Interruption
from bench.scaling.policies import DynamoLike, KedaLike, PoolConfig, PoolView, StaticPolicy
from bench.scaling.runner import result_document, run_policies, scenario
from bench.scaling.sim import RunConfig, minute_violates, simulate
from bench.scaling.workload import Spike, TrafficShape, generate

SHORT_DAY = TrafficShape(duration_s=3 * 3600, spikes=2, spike_hold_max_s=600)
FLAT = TrafficShape(duration_s=3600, mean_requests_per_s=3.0, peak_to_trough=1.0, spikes=0)
SPIKE = Spike(start_s=1200, factor=8.0, hold_s=600)


def view(now: float, *, target: int, waiting: int = 0, running: int = 0, ready: int | None = None) -> PoolView:
    v = PoolView()
    v.now, v.target, v.waiting_requests, v.running = now, target, waiting, running
    v.ready = target if ready is None else ready
    return v


def test_same_seed_gives_the_same_json_and_another_seed_does_not():
    config = RunConfig(cluster=replace(ClusterShape(), interruptions=2))
    first = json.dumps(result_document(run_policies(scenario(7, SHORT_DAY, config))))
    second = json.dumps(result_document(run_policies(scenario(7, SHORT_DAY, config))))
    other = json.dumps(result_document(run_policies(scenario(8, SHORT_DAY, config))))
    assert first == second
    assert first != other
    assert set(json.loads(first)["policies"]) == {"berth", "keda", "dynamo"}
    assert set(json.loads(first)["policies"]["keda"]) == {
        "slo_violation_minutes",
        "gpu_hours",
        "cost_usd",
        "scale_events",
        "interruptions_survived",
    }


def test_keda_polls_every_30s_doubles_at_most_and_waits_out_the_300s_cooldown():
    keda = KedaLike(PoolConfig(max_replicas=40))
    assert keda.decide(view(29, target=3, running=200)) is None  # not a polling time yet
    assert keda.decide(view(30, target=3, running=200)) == 7  # wants 20; HPA: max(3 + 4, 2 × 3)
    assert keda.decide(view(60, target=7, running=200)) == 14  # 2 × 7
    target, downs = 14, {}
    for t in range(61, 400):
        wanted = keda.decide(view(t, target=target, running=10))
        if wanted is not None:
            downs[t], target = wanted, wanted
    # The recommendation of 20 at t = 60 holds the pool up for the whole 300 s window.
    assert downs == {360: 1}


def test_keda_tolerance_keeps_the_count_near_the_target():
    keda = KedaLike(PoolConfig())
    assert keda.decide(view(30, target=10, running=105)) is None  # 10.5 per replica: within 10 %


def test_dynamo_moves_one_replica_per_180s_interval():
    dynamo = DynamoLike(PoolConfig(max_replicas=40))
    target, changes = 4, []
    pool_slots = PoolConfig().slots_per_replica
    v = view(0, target=target)
    for second in range(1, 700):
        v.now, v.target, v.ready = float(second), target, target
        v.busy_slot_seconds += target * pool_slots  # every slot busy
        v.ready_slot_seconds += target * pool_slots
        v.waiting_request_seconds += 50
        wanted = dynamo.decide(v)
        if wanted is not None:
            changes.append((second, target, wanted))
            target = wanted
    assert changes == [(180, 4, 5), (360, 5, 6), (540, 6, 7)]


def test_dynamo_in_the_simulation_only_steps_by_one_on_its_interval():
    scene = scenario(3, SHORT_DAY, RunConfig(cluster=replace(ClusterShape(), interruptions=0)))
    result = simulate(scene.workload, DynamoLike(scene.config.pool), scene.interruptions, scene.config)
    assert result.target_changes, "the spikes must move the planner"
    assert all(abs(new - old) == 1 and at % 180 == 0 for at, old, new in result.target_changes)


def test_a_spike_causes_violations_for_a_pool_that_cannot_scale():
    workload = generate(11, FLAT, spikes=(SPIKE,))
    config = RunConfig(pool=PoolConfig(initial_replicas=3), cluster=replace(ClusterShape(), interruptions=0))
    static = simulate(workload, StaticPolicy(), (), config)
    minutes = [m for m, bad in enumerate(static.minute_violations) if bad]
    assert minutes, "an 8x spike on 3 replicas must break the SLO"
    assert min(minutes) >= SPIKE.start_s // 60  # 3 req/s on 3 replicas is fine before the spike
    assert static.scale_events == 0
    berth = simulate(workload, BerthPolicy(config.pool), (), config)
    assert berth.slo_violation_minutes < static.slo_violation_minutes
    assert berth.scale_events > 0


def test_berth_runs_the_token_lag_fold_and_the_decision_rule():
    workload = generate(11, FLAT, spikes=(SPIKE,))
    config = RunConfig(cluster=replace(ClusterShape(), interruptions=0))
    policy = BerthPolicy(config.pool)
    simulate(workload, policy, (), config)
    assert isinstance(policy.lag, PoolLagState)
    assert policy.lag.observations == FLAT.duration_s // 5  # one gateway report every 5 s
    counts = [replicas for _, replicas, _ in policy.verdicts]
    ups = [at for (at, replicas, _), before in zip(policy.verdicts[1:], counts, strict=False) if replicas > before]
    in_spike = [at for at in ups if SPIKE.start_s <= at <= SPIKE.end_s(FLAT)]
    assert in_spike, "the spike must make the rule scale up"
    assert max(counts) >= 8


@pytest.mark.parametrize(("notice_s", "berth_survives"), [(120.0, True), (30.0, False)])
def test_berth_replaces_spot_replicas_within_a_long_enough_notice(notice_s, berth_survives):
    # Model load 90 s: a 120 s notice leaves time to load a replacement, a 30 s one does not.
    workload = generate(5, FLAT)
    config = RunConfig(pool=PoolConfig(initial_replicas=3), cluster=replace(ClusterShape(), interruptions=1))
    notice = (Interruption(notice_at=1800.0, notice_s=notice_s),)
    berth = simulate(workload, BerthPolicy(config.pool), notice, config)
    keda = simulate(workload, KedaLike(config.pool), notice, config)
    (berth_log,), (keda_log,) = berth.interruption_log, keda.interruption_log
    assert berth_log["surge"] == berth_log["replicas_on_node"] > 0
    assert keda_log["surge"] == 0 and keda_log["hit"]
    assert berth.interruptions_survived == int(berth_survives)
    assert keda.interruptions_survived == 0
    # Berth's old replicas leave as their replacements are bound, before the node goes.
    assert berth_log["requests_cut"] == 0 < keda_log["requests_cut"]
    assert set(berth_log["surge_capacity"]) == {"on-demand"}


def test_three_interruptions_in_an_hour_suspend_spot_for_berth():
    # 30 requests/s (~18,000 tokens/s) keep ~13 replicas, so each notice finds some on a spot node.
    workload = generate(5, replace(FLAT, duration_s=3000, mean_requests_per_s=30.0))
    config = RunConfig(pool=PoolConfig(initial_replicas=12), cluster=replace(ClusterShape(), interruptions=3))
    notices = tuple(Interruption(notice_at=600.0 + 900.0 * i, notice_s=120.0) for i in range(3))
    policy = BerthPolicy(config.pool)
    result = simulate(workload, policy, notices, config)
    assert [e["hit"] for e in result.interruption_log] == [True, True, True]
    assert policy.spot.suspended  # the pool's threshold is {count: 3, window: 1h}
    assert policy.spot.suspended_since == datetime(2025, 1, 1, 0, 40, tzinfo=UTC)


def test_minute_violation_is_the_nearest_rank_p95():
    assert not minute_violates(100, 5, 0.95)  # the 95th of 100 samples is still within the SLO
    assert minute_violates(100, 6, 0.95)
    assert minute_violates(1, 1, 0.95)
    assert not minute_violates(0, 0, 0.95)


def test_workload_spikes_are_5_to_10x_and_do_not_overlap():
    workload = generate(42)
    assert len(workload.spikes) == 8
    assert all(5.0 <= s.factor <= 10.0 for s in workload.spikes)
    ends = [s.end_s(workload.shape) for s in workload.spikes]
    assert all(end <= nxt.start_s for end, nxt in zip(ends, workload.spikes[1:], strict=False))
    assert workload.rate.max() / workload.rate.min() > 5


def test_the_goal_berth_has_fewer_violation_minutes_and_no_more_gpu_hours_than_keda():
    """The benchmark's goal on its default day (seed 42, 24 h): one run of each, ~3 s."""
    results = run_policies(scenario(42), ("berth", "keda"))
    berth, keda = results["berth"], results["keda"]
    assert berth.slo_violation_minutes < keda.slo_violation_minutes
    assert berth.gpu_hours <= keda.gpu_hours
