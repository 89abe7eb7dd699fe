"""Gang all-or-nothing and preemption victim selection, on a toy host (pure logic, no engine)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from berth.schemas.cluster import LabelSelector, PodInfo
from berth.schemas.policy import PodDisruptionBudgetInfo

from berth.core.gangs import place_gang
from berth.core.preemption import Candidate, disruptions_allowed, pick_candidate, select_victims

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pod(
    name: str,
    gpus: int = 1,
    priority: int = 0,
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    age: int = 0,
) -> PodInfo:
    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        priority=priority,
        labels=labels or {},
        requests={"nvidia.com/gpu": gpus},
        node_name=node,
        phase="Running" if node else "Pending",
        creation_time=T0 - timedelta(minutes=age),
    )


@dataclass
class Toy:
    """Nodes with free GPU counts, zones, and a log of what was assumed and undone."""

    free: dict[str, int]
    zone: dict[str, str]
    log: list[str] = field(default_factory=list)

    def place_one(self, p: PodInfo, within: frozenset[str] | None) -> tuple[tuple[str, str, int] | None, str]:
        for name in sorted(self.free):
            if (within is None or name in within) and self.free[name] >= p.whole_gpus:
                self.free[name] -= p.whole_gpus
                self.log.append(f"+{p.name}@{name}")
                return (p.name, name, p.whole_gpus), ""
        return None, f"0/{len(self.free)} nodes are available: {len(self.free)} Insufficient nvidia.com/gpu."

    def unassume(self, placement: tuple[str, str, int]) -> None:
        name, node, gpus = placement
        self.free[node] += gpus
        self.log.append(f"-{name}@{node}")

    def domains(self, pods: Sequence[PodInfo]) -> list[tuple[str, frozenset[str]]]:
        zones = sorted(set(self.zone.values()))
        return [(z, frozenset(n for n, nz in self.zone.items() if nz == z)) for z in zones]


def test_gang_lands_whole_in_one_zone_when_it_can() -> None:
    toy = Toy({"a": 2, "b": 2, "c": 4}, {"a": "z1", "b": "z2", "c": "z2"})
    result = place_gang(toy, [pod(f"w{i}", 2) for i in range(3)], 3, "default/train")
    assert result.placed and result.domain == "z2"
    assert sorted(p[1] for p in result.placements) == ["b", "c", "c"]
    assert toy.free == {"a": 2, "b": 0, "c": 0}


def test_gang_that_does_not_fit_leaves_nothing_behind() -> None:
    toy = Toy({"a": 2, "b": 2}, {"a": "z1", "b": "z2"})
    before = dict(toy.free)
    result = place_gang(toy, [pod(f"w{i}", 2) for i in range(3)], 3, "default/train")
    assert not result.placed and toy.free == before
    assert result.messages["w2"].startswith("0/2 nodes are available")
    assert result.messages["w0"] == (
        "pod group default/train did not fit as a whole: only 2 of minMember 3 members fit at once, so none was placed"
    )
    # every assumption was undone, newest first
    assert toy.log[-2:] == ["-w1@b", "-w0@a"]


def test_gang_with_extra_members_keeps_min_member() -> None:
    toy = Toy({"a": 2, "b": 2}, {"a": "z1", "b": "z1"})
    result = place_gang(toy, [pod(f"w{i}", 2) for i in range(3)], 2, "default/train")
    assert len(result.placements) == 2 and "w2" in result.messages


def test_competing_gangs_are_decided_one_at_a_time() -> None:
    toy = Toy({"a": 4, "b": 2}, {"a": "z1", "b": "z1"})
    first = place_gang(toy, [pod(f"a{i}", 2) for i in range(2)], 2, "default/first")
    second = place_gang(toy, [pod(f"b{i}", 2) for i in range(2)], 2, "default/second")
    assert first.placed and not second.placed
    assert toy.free == {"a": 0, "b": 2}  # the loser holds nothing


def test_gang_short_of_members_waits() -> None:
    toy = Toy({"a": 8}, {"a": "z1"})
    result = place_gang(toy, [pod("w0")], 4, "default/train")
    assert not result.placed and toy.log == []
    assert result.messages["w0"] == "pod group default/train has 1 pending pods, fewer than minMember 4"


def _fits_with(capacity: int, on_node: list[PodInfo], need: int):
    def fits(removed: frozenset[str]) -> bool:
        used = sum(p.whole_gpus for p in on_node if p.uid not in removed)
        return capacity - used >= need

    return fits


def test_victims_are_lower_priority_only_and_minimal() -> None:
    on_node = [
        pod("low-a", 2, 1, node="n", age=5),
        pod("low-b", 2, 1, node="n", age=1),
        pod("same", 2, 10, node="n"),
        pod("high", 2, 100, node="n"),
    ]
    preemptor = pod("urgent", 2, 10)
    found = select_victims(preemptor, "n", on_node, _fits_with(8, on_node, 2))
    assert isinstance(found, Candidate)
    # one victim suffices; the more important low pod (older) is reprieved first
    assert [v.name for v in found.victims] == ["low-b"]


def test_no_victims_when_only_equal_or_higher_priority() -> None:
    on_node = [pod("same", 8, 10, node="n")]
    assert select_victims(pod("urgent", 2, 10), "n", on_node, _fits_with(8, on_node, 2)) is None


def test_pdb_violating_pods_are_reprieved_first() -> None:
    db = {"app": "db"}
    on_node = [pod("db-0", 2, 1, labels=db, node="n"), pod("batch", 2, 1, node="n")]
    pdb = PodDisruptionBudgetInfo(
        namespace="default", name="db", selector=LabelSelector(match_labels=db), min_available=1
    )
    allowed = disruptions_allowed([pdb], on_node)
    assert allowed == {("default", "db"): 0}
    found = select_victims(pod("urgent", 2, 5), "n", on_node, _fits_with(4, on_node, 2), [pdb], allowed)
    assert found is not None and [v.name for v in found.victims] == ["batch"] and found.pdb_violations == 0


def test_candidate_ranking_follows_kube_then_node_name() -> None:
    low, mid = pod("l", 1, 1, node="x"), pod("m", 1, 5, node="x")
    ranked = pick_candidate(
        [
            Candidate("c", (mid,), 0),
            Candidate("b", (low, low), 0),
            Candidate("a", (low,), 1),
            Candidate("d", (low,), 0),
            Candidate("e", (low,), 0),
        ]
    )
    assert ranked is not None and ranked.node == "d"  # no PDB violation, lowest top priority, fewest, name
