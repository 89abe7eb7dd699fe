"""Fast scheduling: ``percentageOfNodesToScore`` (kube-scheduler v1.34 arithmetic, Berth's
default of every node) and a per-cycle ``max_nodes_to_score``, deterministic."""

from __future__ import annotations

import textwrap

import pytest

from berth.configfiles import load_config
from berth.core.config import ConfigError, default_document, nodes_to_find, parse_config
from berth.core.hashing import name_hash64
from berth.core.scheduler import Framework, Scheduler

from .builders import node, pod, state_of, taint


@pytest.mark.parametrize(
    ("percentage", "nodes", "expected"),
    [
        (None, 5000, 5000),  # Berth's default: every node (kube's would be adaptive: 500)
        (50, 99, 99),  # below minFeasibleNodesToFind: every node
        (10, 150, 100),  # never fewer than 100
        (0, 5000, 500),  # adaptive: 50 - 5000/125 = 10 %
        (0, 1000, 420),  # adaptive: 50 - 8 = 42 %
        (0, 100_000, 5000),  # adaptive floor: 5 %
        (100, 5000, 5000),
        (30, 1000, 300),
        (1, 20_000, 200),
    ],
)
def test_nodes_to_find_is_kube_numFeasibleNodesToFind(percentage: int | None, nodes: int, expected: int) -> None:
    assert nodes_to_find(percentage, nodes) == expected


def _framework(percentage: int | None = None, *, top_level: bool = True) -> Framework:
    document = default_document()
    if percentage is not None:
        if top_level:
            document["percentageOfNodesToScore"] = percentage
        else:
            document["profiles"][0]["percentageOfNodesToScore"] = percentage
    return Framework(parse_config(document), "berth")


def _cluster(count: int = 300, *, tainted: int = 0):
    nodes = [node(f"n{i:04d}", cpu=4000 + 10 * (i % 7)) for i in range(count)]
    nodes += [node(f"t{i:04d}", taints=(taint("dedicated", "x"),)) for i in range(tainted)]
    return state_of(*nodes)


def test_unset_evaluates_every_node_and_100_is_the_same_decision() -> None:
    state = _cluster()
    p = pod("p", cpu=100)
    unset = _framework().schedule(p, state)
    every = _framework(100).schedule(p, state)
    assert unset.feasible_nodes == every.feasible_nodes == 300
    assert (unset.node, unset.top_scores) == (every.node, every.top_scores)


def test_percentage_limits_the_feasible_nodes_and_picks_among_them() -> None:
    state = _cluster(1000)
    p = pod("p", cpu=100)
    decision = _framework(10).schedule(p, state)
    assert decision.status == "placed"
    assert decision.nodes_total == 1000 and decision.feasible_nodes == 100
    # The evaluated nodes are the 100 from the pod's start in name order, wrapping around.
    start = name_hash64(p.uid) % 1000
    window = {f"n{(start + i) % 1000:04d}" for i in range(100)}
    assert decision.node in window
    assert {s.node for s in decision.top_scores} <= window


def test_profile_value_wins_over_the_top_level_one() -> None:
    config = load_config(
        textwrap.dedent("""\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        percentageOfNodesToScore: 10
        profiles:
          - schedulerName: berth
          - schedulerName: wide
            percentageOfNodesToScore: 100
        """)
    )
    scheduler = Scheduler(config)
    state = _cluster(1000)
    assert scheduler.schedule(pod("p"), state, "berth").feasible_nodes == 100
    assert scheduler.schedule(pod("p"), state, "wide").feasible_nodes == 1000


def test_sampling_is_deterministic_and_depends_on_the_pod() -> None:
    state = _cluster(1000)
    first = _framework(10).schedule(pod("p", cpu=100), state)
    again = _framework(10).schedule(pod("p", cpu=100), _cluster(1000))
    assert first.node == again.node and first.top_scores == again.top_scores
    assert first.snapshot_hash == again.snapshot_hash
    starts = {name_hash64(pod(f"p{i}").uid) % 1000 for i in range(20)}
    assert len(starts) > 10  # different pods start at different places


def test_infeasible_nodes_are_skipped_and_unvisited_ones_not_reported() -> None:
    # 200 tainted nodes sort after the 300 free ones; the pod does not tolerate them.
    state = _cluster(300, tainted=200)
    decision = _framework(20).schedule(pod("p", cpu=100), state)  # 500 * 20 % = 100
    assert decision.status == "placed" and decision.feasible_nodes == 100
    rejected = sum(group.count for group in decision.rejections)
    assert rejected <= 200 and all(g.count > 0 for g in decision.rejections)
    # Every rejection reported is a node that was visited before the 100th feasible one.
    assert all(g.plugin == "TaintToleration" for g in decision.rejections)


def test_an_unschedulable_pod_is_judged_on_every_node() -> None:
    state = _cluster(300, tainted=200)
    decision = _framework(10).schedule(pod("p", cpu=100_000), state)
    assert decision.status == "unschedulable"
    assert decision.nodes_total == 500
    assert sum(group.count for group in decision.rejections) == 500
    assert decision.message.startswith("0/500 nodes are available")


def test_max_nodes_to_score_caps_a_cycle_without_the_100_node_floor() -> None:
    state = _cluster(300)
    scheduler = Scheduler(parse_config(default_document()))
    capped = scheduler.schedule(pod("p"), state, max_nodes_to_score=50)
    assert capped.feasible_nodes == 50
    assert scheduler.schedule(pod("p"), state).feasible_nodes == 300
    # On top of the percentage: the smaller wins.
    assert _framework(50).schedule(pod("p"), state, max_nodes_to_score=500).feasible_nodes == 150


def test_engine_passes_max_nodes_to_score_through() -> None:
    from berth.core.engine import Engine

    engine = Engine(default_document())
    for i in range(200):
        engine.upsert_node(node(f"n{i:04d}"))
    p = pod("p")
    outcome = engine.schedule(p, max_nodes_to_score=20)
    start = name_hash64(p.uid) % 200
    assert outcome.placed
    assert outcome.placements[0].node in {f"n{(start + i) % 200:04d}" for i in range(20)}


def test_per_profile_percentage_is_range_checked() -> None:
    document = default_document()
    document["profiles"][0]["percentageOfNodesToScore"] = 101
    with pytest.raises(ConfigError, match=r"profiles\[0\]\.percentageOfNodesToScore"):
        parse_config(document)
    document = default_document()
    document["percentageOfNodesToScore"] = -1
    with pytest.raises(ConfigError, match=r"^invalid.*\n  percentageOfNodesToScore"):
        parse_config(document)


def test_unset_keeps_the_configuration_hash() -> None:
    assert _framework().config_hash == parse_config(default_document()).hash
    assert _framework(50).config_hash != _framework().config_hash
    assert _framework(50).config_hash == _framework(50, top_level=False).config_hash


def test_pool_fast_scheduling_reads_max_nodes_to_score() -> None:
    from types import SimpleNamespace

    from berth.cells.pool_placement import max_nodes_to_score

    def pool(**fast: object) -> SimpleNamespace:
        block = SimpleNamespace(**fast) if fast else None
        return SimpleNamespace(scheduling=SimpleNamespace(fast_scheduling=block))

    assert max_nodes_to_score(None) is None
    assert max_nodes_to_score(pool()) is None
    assert max_nodes_to_score(pool(enabled=True, max_nodes_to_score=50)) == 50
    assert max_nodes_to_score(pool(enabled=False, max_nodes_to_score=50)) is None
    # The AgentPool schema keeps the block: the pool's cycles are capped.
    from berth.cells.pools import PoolPolicy

    assert (
        max_nodes_to_score(
            PoolPolicy.model_validate(
                {
                    "model": "m",
                    "ttftSloMs": 500,
                    "tokensPerSecondPerReplica": 100,
                    "scheduling": {"fastScheduling": {"enabled": True, "maxNodesToScore": 50}},
                }
            )
        )
        == 50
    )
