"""PodTopologySpread: maxSkew, missing keys, minDomains, inclusion policies, selectors and the
ScheduleAnyway score."""

from __future__ import annotations

from berth.core import messages

from .builders import (
    HOST,
    ZONE,
    expr,
    feasible_names,
    filters,
    node,
    node_affinity,
    pod,
    profile,
    rejections,
    scores,
    spread,
    state_of,
    taint,
    term,
)

WEB = {"app": "web"}


def _zones(counts: dict[str, int], *extra_nodes):
    """One node per zone named after it, with ``counts[zone]`` web pods placed there."""
    state = state_of(*(node(z, labels={ZONE: z}) for z in sorted(counts)), *extra_nodes)
    for zone, count in counts.items():
        for i in range(count):
            state.assume(pod(f"{zone}-{i}", labels=WEB), zone)
    return state


def test_max_skew_against_the_global_minimum() -> None:
    state = _zones({"z1": 2, "z2": 1, "z3": 1})
    p = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB),))
    # z1: 2 + 1 - 1 = 2 > 1 → out; z2, z3: 1 + 1 - 1 = 1 → in.
    assert feasible_names(filters("PodTopologySpread"), p, state) == ["z2", "z3"]
    assert rejections(filters("PodTopologySpread"), p, state) == {"z1": (messages.TOPOLOGY_SPREAD_NOT_MATCH,)}


def test_nodes_without_the_key_are_rejected_as_unresolvable() -> None:
    state = _zones({"z1": 0}, node("bare"))
    p = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB),))
    assert rejections(filters("PodTopologySpread"), p, state) == {"bare": (messages.TOPOLOGY_SPREAD_MISSING_LABEL,)}


def test_self_match_only_counts_when_the_pod_matches_the_selector() -> None:
    state = _zones({"z1": 2, "z2": 1})
    p = pod("p", labels={"app": "other"}, topology_spread_constraints=(spread(1, ZONE, WEB),))
    # z1: 2 + 0 - 1 = 1 → allowed.
    assert feasible_names(filters("PodTopologySpread"), p, state) == ["z1", "z2"]


def test_min_domains_treats_the_minimum_as_zero_while_domains_are_missing() -> None:
    state = _zones({"z1": 1, "z2": 1})
    plain = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB),))
    assert feasible_names(filters("PodTopologySpread"), plain, state) == ["z1", "z2"]
    needs_three = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB, min_domains=3),))
    # Two domains < 3: global minimum 0, so 1 + 1 - 0 = 2 > 1 everywhere.
    assert feasible_names(filters("PodTopologySpread"), needs_three, state) == []


def test_node_affinity_policy_honor_ignores_domains_the_pod_cannot_use() -> None:
    state = _zones({"z1": 1, "z2": 0})
    affinity = node_affinity([term(expr(ZONE, "In", "z1"))])
    honor = pod("p", labels=WEB, affinity=affinity, topology_spread_constraints=(spread(1, ZONE, WEB),))
    # Only z1 is a domain (z2 excluded by the pod's node affinity): 1 + 1 - 1 = 1 → fits.
    assert feasible_names(filters("PodTopologySpread"), honor, state) == ["z1", "z2"]
    ignore = pod(
        "p",
        labels=WEB,
        affinity=affinity,
        topology_spread_constraints=(spread(1, ZONE, WEB, node_affinity_policy="Ignore"),),
    )
    assert feasible_names(filters("PodTopologySpread"), ignore, state) == ["z2"]


def test_node_taints_policy_honor_ignores_tainted_domains() -> None:
    state = _zones({"z1": 1}, node("z2", labels={ZONE: "z2"}, taints=(taint("k", "v"),)))
    ignore = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB),))
    assert feasible_names(filters("PodTopologySpread"), ignore, state) == ["z2"]
    honor = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB, node_taints_policy="Honor"),))
    assert feasible_names(filters("PodTopologySpread"), honor, state) == ["z1", "z2"]


def test_counts_only_pods_of_the_same_namespace() -> None:
    state = _zones({"z1": 0, "z2": 0})
    for i in range(3):
        state.assume(pod(f"o{i}", namespace="other", labels=WEB), "z1")
    p = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB),))
    assert feasible_names(filters("PodTopologySpread"), p, state) == ["z1", "z2"]


def test_empty_or_missing_selector_counts_nothing() -> None:
    state = _zones({"z1": 3, "z2": 0})
    for labels in ({}, None):
        p = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, labels),))
        assert feasible_names(filters("PodTopologySpread"), p, state) == ["z1", "z2"]


def test_match_label_keys_spread_each_revision_separately() -> None:
    state = _zones({"z1": 0, "z2": 0})
    for i in range(2):
        state.assume(pod(f"old{i}", labels={"app": "web", "rev": "1"}), "z1")
    p = pod(
        "p",
        labels={"app": "web", "rev": "2"},
        topology_spread_constraints=(spread(1, ZONE, WEB, match_label_keys=("rev",)),),
    )
    # Revision 1 pods do not count for revision 2.
    assert feasible_names(filters("PodTopologySpread"), p, state) == ["z1", "z2"]


def test_constraints_are_checked_in_order_and_every_key_is_needed() -> None:
    state = _zones({"z1": 2, "z2": 0}, node("bare"))
    p = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB), spread(1, HOST, WEB)))
    assert rejections(filters("PodTopologySpread"), p, state) == {
        "z1": (messages.TOPOLOGY_SPREAD_NOT_MATCH,),
        "bare": (messages.TOPOLOGY_SPREAD_MISSING_LABEL,),
    }


def test_schedule_anyway_prefers_emptier_domains() -> None:
    state = _zones({"z1": 2, "z2": 1, "z3": 0}, node("bare"))
    framework = profile({"preScore": ["PodTopologySpread"], "score": [("PodTopologySpread", 2)]})
    p = pod("p", labels=WEB, topology_spread_constraints=(spread(1, ZONE, WEB, hard=False),))
    # raw = count × ln(3 domains + 2) rounded: z1 3, z2 2, z3 0 → 100 × (3 + 0 - s) / 3;
    # the node without the key scores 0; weight 2.
    assert scores(framework, p, state, "PodTopologySpread") == {"bare": 0, "z1": 0, "z2": 66, "z3": 200}
    assert scores(framework, pod("q", labels=WEB), state, "PodTopologySpread") == {}
