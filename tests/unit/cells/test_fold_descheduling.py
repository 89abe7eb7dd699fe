"""Descheduling in a cell (berth.cells.descheduling), through Cell.handle with the real engine:
ticks plan rounds at the configured interval, evictions are EvictPod decisions, the cooldown and
the no-loop rule hold, budgets are respected, and the same log decides the same, byte for byte."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from berth.schemas import (
    CellTick,
    EvictPod,
    InputPosition,
    LabelSelector,
    NodeObserved,
    PodDeleted,
    PodDisruptionBudgetInfo,
    PodObserved,
    PolicyObserved,
    Taint,
)

from berth.cells import Cell, CellConfig
from berth.cells.descheduling import DeschedulerSettings

from .fold_kit import at, replica, small_node

TAINTS_POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "profiles": [{"name": "taints", "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}],
}
INTERVAL = timedelta(seconds=60)
COOLDOWN = timedelta(seconds=600)
MAINTENANCE = Taint(key="maintenance", value="true", effect="NoSchedule")


def config(policy: dict[str, Any] | None = None) -> CellConfig:
    return CellConfig(descheduler=DeschedulerSettings(policy or TAINTS_POLICY, interval=INTERVAL, cooldown=COOLDOWN))


class Log:
    """A cell fed one input after another at increasing offsets, as its partition would."""

    def __init__(self, cell_config: CellConfig) -> None:
        self.cell = Cell(0, cell_config)
        self.events: list[Any] = []

    def __call__(self, event: Any) -> list[Any]:
        self.events.append(event)
        position = InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=len(self.events))
        return self.cell.handle(event, position)


def nodes_and_a_bound_replica(log: Log, *, other_tainted: bool = False) -> None:
    """``web-0`` of AgentPool ``serving/web`` runs on ``bad``, which is tainted afterwards; ``good``
    (tainted too with ``other_tainted``) has room."""
    log(NodeObserved(node=small_node("bad"), observed_at=at(0)))
    good = small_node("good")
    if other_tainted:
        good = good.model_copy(update={"taints": (MAINTENANCE,)})
    log(NodeObserved(node=good, observed_at=at(0)))
    log(PodObserved(pod=replica("web", 0, node_name="bad"), observed_at=at(1)))
    log(NodeObserved(node=small_node("bad").model_copy(update={"taints": (MAINTENANCE,)}), observed_at=at(2)))


def evictions(decisions: list[Any]) -> list[tuple[str, str, str]]:
    return [(d.record.outcome, c.name, d.record.node) for d in decisions for c in d.commands if isinstance(c, EvictPod)]


def test_a_tick_plans_a_round_that_evicts_the_pod_violating_a_taint():
    log = Log(config())
    nodes_and_a_bound_replica(log)
    [decision] = log(CellTick(issued_at=at(10)))
    assert evictions([decision]) == [("evicting", "web-0", "bad")]
    [command] = decision.commands
    assert command.pod_uid == "uid-web-0" and command.decision_id == decision.record.decision_id
    assert decision.record.message.startswith("descheduler RemovePodsViolatingNodeTaints: ")
    assert decision.record.message.endswith("the engine places it on good")
    assert log.cell.descheduling.evictions == {"RemovePodsViolatingNodeTaints": 1}
    # The cell's own snapshot keeps the pod where the cluster says it is until it is gone.
    assert [p.node_name for p in log.cell.engine.state.pods.on_node("bad")] == ["bad"]


def test_the_eviction_carries_the_policys_volume_rules_for_the_binder_to_check():
    # The cell does not see volumes: evictLocalStoragePods (false by default) and ignorePvcPods
    # travel on the command, and the binder leaves a pod that has them.
    [command] = _first_eviction(TAINTS_POLICY).commands
    assert (command.keep_with_local_storage, command.keep_with_pvc) == (True, False)
    profile = {
        **TAINTS_POLICY["profiles"][0],
        "pluginConfig": [{"name": "DefaultEvictor", "args": {"evictLocalStoragePods": True, "ignorePvcPods": True}}],
    }
    [command] = _first_eviction({**TAINTS_POLICY, "profiles": [profile]}).commands
    assert (command.keep_with_local_storage, command.keep_with_pvc) == (False, True)


def _first_eviction(policy: dict[str, Any]) -> Any:
    log = Log(config(policy))
    nodes_and_a_bound_replica(log)
    [decision] = log(CellTick(issued_at=at(10)))
    return decision


def test_no_round_without_a_policy_or_before_the_interval_and_none_without_a_tick():
    plain = Log(CellConfig())
    nodes_and_a_bound_replica(plain)
    assert plain(CellTick(issued_at=at(10))) == []
    log = Log(config())
    log(NodeObserved(node=small_node("bad"), observed_at=at(0)))
    log(NodeObserved(node=small_node("good"), observed_at=at(0)))
    assert log(CellTick(issued_at=at(5))) == []  # a round, with nothing to do
    log(PodObserved(pod=replica("web", 0, node_name="bad"), observed_at=at(6)))
    assert (
        log(NodeObserved(node=small_node("bad").model_copy(update={"taints": (MAINTENANCE,)}), observed_at=at(7))) == []
    )
    assert log(CellTick(issued_at=at(5 + 59))) == []  # the interval has not passed
    assert evictions(log(CellTick(issued_at=at(5 + 60)))) == [("evicting", "web-0", "bad")]


def test_the_cooldown_leaves_the_recreated_workload_alone_until_it_passes():
    log = Log(config())
    nodes_and_a_bound_replica(log)
    assert len(log(CellTick(issued_at=at(10)))) == 1
    log(PodDeleted(uid="uid-web-0", namespace="serving", name="web-0", observed_at=at(11)))
    # Its controller's new pod lands on the tainted node again (placed by someone else).
    log(PodObserved(pod=replica("web", 1, node_name="bad"), observed_at=at(12)))
    assert log(CellTick(issued_at=at(10 + 60))) == []
    assert log.cell.descheduling.loops_prevented == {"RemovePodsViolatingNodeTaints": 1}
    assert evictions(log(CellTick(issued_at=at(10 + 600)))) == [("evicting", "web-1", "bad")]


def test_no_eviction_when_the_engine_would_place_the_pod_nowhere_better():
    log = Log(config())
    nodes_and_a_bound_replica(log, other_tainted=True)
    assert log(CellTick(issued_at=at(10))) == []
    assert log.cell.descheduling.loops_prevented == {"RemovePodsViolatingNodeTaints": 1}
    assert log.cell.descheduling.evicted_at == {}


def test_a_disruption_budget_with_no_disruption_left_blocks_the_eviction():
    log = Log(config())
    nodes_and_a_bound_replica(log)
    budget = PodDisruptionBudgetInfo(
        namespace="serving", name="web", selector=LabelSelector(match_labels={"app": "web"}), min_available=1
    )
    log(PolicyObserved(kind="PodDisruptionBudget", pod_disruption_budget=budget, observed_at=at(3)))
    labelled = replica("web", 0, node_name="bad").model_copy(update={"labels": {"app": "web"}})
    log(PodObserved(pod=labelled, observed_at=at(4)))
    assert log(CellTick(issued_at=at(10))) == []
    assert log.cell.descheduling.evictions == {}


def test_a_pod_only_assumed_here_is_not_evicted():
    log = Log(config())
    log(NodeObserved(node=small_node("bad"), observed_at=at(0)))
    log(NodeObserved(node=small_node("good", cpu=1000), observed_at=at(0)))
    # Placed by this cell (on bad: more room) and not yet confirmed bound by the cluster.
    placed = log(PodObserved(pod=replica("web", 0), observed_at=at(1)))
    assert [d.record.node for d in placed] == ["bad"]
    log(NodeObserved(node=small_node("bad").model_copy(update={"taints": (MAINTENANCE,)}), observed_at=at(2)))
    assert log(CellTick(issued_at=at(10))) == []


def _replayed(log: Log, cell: Cell) -> list[str]:
    out = []
    for offset, event in enumerate(log.events, start=1):
        position = InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=offset)
        out.extend(d.record.model_dump_json() for d in cell.handle(event, position))
    return out


def test_the_same_log_and_the_announced_configuration_decide_the_same_byte_for_byte():
    log = Log(config())
    nodes_and_a_bound_replica(log)
    live = [d.record.model_dump_json() for d in log(CellTick(issued_at=at(10)))]
    log(PodDeleted(uid="uid-web-0", namespace="serving", name="web-0", observed_at=at(11)))
    live += [d.record.model_dump_json() for d in log(PodObserved(pod=replica("web", 1), observed_at=at(12)))]
    assert len(live) == 2 and json.loads(live[1])["node"] == "good"  # recreated and placed on the good node
    announced = CellConfig.from_document(log.cell.config.document)
    assert announced.hash == log.cell.config.hash and announced.descheduler == log.cell.config.descheduler
    replayed = _replayed(log, Cell(0, announced))
    placements = [r for r in replayed if json.loads(r)["outcome"] in ("evicting", "placed")]
    assert placements[-2:] == live


def test_a_cell_restored_from_its_folded_state_continues_the_cooldown():
    log = Log(config())
    nodes_and_a_bound_replica(log)
    log(CellTick(issued_at=at(10)))
    log(PodDeleted(uid="uid-web-0", namespace="serving", name="web-0", observed_at=at(11)))
    log(PodObserved(pod=replica("web", 1, node_name="bad"), observed_at=at(12)))
    restored = Cell.restored(0, log.cell.config, log.cell.folded())
    position = InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=99)
    assert restored.handle(CellTick(issued_at=at(70)), position) == []
    assert evictions(restored.handle(CellTick(issued_at=at(610)), position)) == [("evicting", "web-1", "bad")]


def test_the_configuration_hash_covers_the_descheduler_and_is_unchanged_without_one():
    assert "descheduler" not in json.loads(CellConfig().document)
    longer = CellConfig(descheduler=DeschedulerSettings(TAINTS_POLICY, interval=INTERVAL * 2, cooldown=COOLDOWN))
    assert len({CellConfig().hash, config().hash, longer.hash}) == 3


@pytest.mark.parametrize(
    ("policy", "interval", "words"),
    [
        ({"apiVersion": "descheduler/v1alpha2", "kind": "Nope"}, INTERVAL, "kind"),
        (TAINTS_POLICY, timedelta(0), "interval must be positive"),
    ],
)
def test_a_policy_or_interval_the_cell_cannot_run_is_refused_at_construction(policy, interval, words):
    with pytest.raises(ValueError, match=words):
        DeschedulerSettings(policy, interval=interval)
