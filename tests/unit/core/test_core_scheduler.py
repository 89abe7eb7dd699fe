"""The scheduling cycle: selection, decisions, extension point contracts, errors as values."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from berth.core.decision import Decision
from berth.core.framework import (
    CycleContext,
    FilterPlugin,
    FilterResult,
    PermitPlugin,
    PermitResult,
    PostFilterPlugin,
    PostFilterResult,
    ReservePlugin,
    ReserveResult,
    ScorePlugin,
    Status,
)
from berth.core.hashing import canonical_json
from berth.core.registry import with_plugins
from berth.core.scheduler import Scheduler

from .builders import default_scheduler, node, pod, profile, state_of, taint


def test_places_on_the_best_scored_node_and_does_not_touch_the_state() -> None:
    state = state_of(node("big", cpu=8000), node("small", cpu=2000))
    before = state.snapshot_hash()
    decision = default_scheduler().schedule(pod("p", cpu=1000), state)
    assert decision.status == "placed" and decision.node == "big"
    assert state.snapshot_hash() == before and len(state.pods) == 0
    assert decision.snapshot_hash == before
    assert decision.nodes_total == 2 and decision.feasible_nodes == 2
    assert [s.node for s in decision.top_scores] == ["big", "small"]
    assert decision.top_scores[0].total == sum(dict(decision.top_scores[0].scores).values())


def test_unschedulable_decision_carries_kube_message_and_compressed_verdicts() -> None:
    state = state_of(
        *(node(f"t{i}", taints=(taint("dedicated", "gpu"),)) for i in range(2)), *(node(f"n{i}") for i in range(3))
    )
    decision = default_scheduler().schedule(pod("p", requests={"nvidia.com/gpu": 1}), state)
    assert decision.status == "unschedulable"
    assert decision.message.startswith(
        "0/5 nodes are available: 2 node(s) had untolerated taint(s), "
        "3 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: "
    )
    groups = {g.reasons: (g.plugin, g.code, g.count) for g in decision.rejections}
    assert groups == {
        ("Insufficient nvidia.com/gpu",): ("NodeResourcesFit", "UnschedulableAndUnresolvable", 3),
        ("node(s) had untolerated taint(s)",): ("TaintToleration", "UnschedulableAndUnresolvable", 2),
    }
    per_node = {name: group.plugin for name, group in decision.node_reasons(state.nodes.names())}
    assert per_node == {
        "n0": "NodeResourcesFit",
        "n1": "NodeResourcesFit",
        "n2": "NodeResourcesFit",
        "t0": "TaintToleration",
        "t1": "TaintToleration",
    }
    # n0..n2, t0, t1 in name order; TaintToleration filters first, so its group is 0.
    assert decision.group_indices().tolist() == [1, 1, 1, 0, 0]
    assert dict(decision.reason_counts()) == {"Insufficient nvidia.com/gpu": 3, "node(s) had untolerated taint(s)": 2}


def test_decision_json_is_canonical_and_hashed() -> None:
    state = state_of(node("a"), node("b"))
    decision = default_scheduler().schedule(pod("p"), state)
    data = json.loads(decision.to_json())
    assert data["decision_hash"] == decision.decision_hash and len(decision.decision_hash) == 64
    assert list(data) == sorted(data)
    resealed = Decision(**{k: v for k, v in decision.__dict__.items() if k != "_decision_hash"}).sealed()
    assert resealed.decision_hash == decision.decision_hash
    assert resealed.decision_hash == hashlib.sha256(canonical_json(decision.payload())).hexdigest()
    assert decision.config_hash == default_scheduler().config_hash


def test_ties_break_by_pod_and_node_hash_not_by_name() -> None:
    state = state_of(*(node(f"n{i:02d}") for i in range(20)))
    scheduler = default_scheduler()
    chosen = {scheduler.schedule(pod(f"p{i}"), state).node for i in range(30)}
    # Equal nodes: different pods land on different nodes, deterministically.
    assert len(chosen) > 5
    again = {scheduler.schedule(pod(f"p{i}"), state).node for i in range(30)}
    assert chosen == again


def test_keep_top_scores_bounds_the_decision() -> None:
    state = state_of(*(node(f"n{i:02d}") for i in range(30)))
    framework = profile({"multiPoint": ["NodeResourcesFit"]}, keep_top_scores=3)
    decision = framework.schedule(pod("p"), state)
    assert len(decision.top_scores) == 3 and decision.node == decision.top_scores[0].node
    totals = [s.total for s in decision.top_scores]
    assert totals == sorted(totals, reverse=True)


def test_profile_chosen_by_scheduler_name_and_unknown_profile_is_an_error_value() -> None:
    decision = default_scheduler().schedule(pod("p").model_copy(update={"scheduler_name": "x"}), state_of(node("a")))
    assert decision.status == "error" and "no profile 'x'" in decision.message


def test_empty_cluster_says_what_kube_scheduler_says() -> None:
    decision = default_scheduler().schedule(pod("p"), state_of())
    assert (decision.status, decision.message) == ("unschedulable", "no nodes available to schedule pods")
    assert decision.victims == () and decision.nodes_total == 0
    kube_only = profile({"multiPoint": ["NodeResourcesFit"]})
    assert kube_only.schedule(pod("p"), state_of()).message == "no nodes available to schedule pods"
    # One node, even a useless one, gives the FitError form.
    assert (
        default_scheduler()
        .schedule(pod("p"), state_of(node("a", cpu=0)))
        .message.startswith("0/1 nodes are available:")
    )


# --- extension points with test plugins -----------------------------------------------------------


class OnlyEven(FilterPlugin):
    NAME = "OnlyEven"

    def filter(self, cycle: CycleContext, nodes) -> FilterResult:
        names = cycle.state.nodes.names_of(nodes)
        return FilterResult.from_mask(np.array([int(n[-1]) % 2 == 0 for n in names]), Status.unschedulable("odd node"))


class Broken(FilterPlugin):
    NAME = "Broken"

    def filter(self, cycle: CycleContext, nodes) -> FilterResult:
        return FilterResult.from_mask(np.zeros(nodes.size, dtype=bool), Status.error("boom"))


class PreferLast(ScorePlugin):
    NAME = "PreferLast"

    def score(self, cycle: CycleContext, nodes):
        return np.arange(nodes.size, dtype=np.int64)

    def normalize_score(self, cycle, nodes, scores):
        return scores * 100 // max(1, int(scores.max()))


class Devices(ReservePlugin):
    NAME = "Devices"
    unreserved: list[int] = []

    def reserve(self, cycle: CycleContext, node: int) -> ReserveResult:
        if cycle.pod.labels.get("fail") == "reserve":
            return ReserveResult(Status.unschedulable("no device left"))
        return ReserveResult(gpu_devices=(2, 0), gpu_milli=None)

    def unreserve(self, cycle: CycleContext, node: int) -> None:
        Devices.unreserved.append(node)


class Gang(PermitPlugin):
    NAME = "Gang"

    def permit(self, cycle: CycleContext, node: int) -> PermitResult:
        verdict = cycle.pod.labels.get("permit")
        if verdict == "wait":
            return PermitResult(Status.wait("waiting for the gang"))
        if verdict == "reject":
            return PermitResult(Status.unschedulable("gang rejected"))
        return PermitResult()


class Nominator(PostFilterPlugin):
    NAME = "Nominator"

    def post_filter(self, cycle, diagnosis) -> PostFilterResult:
        rejected = cycle.state.nodes.names_of(diagnosis.rejected(resolvable_only=True))
        return PostFilterResult(
            Status.success(), nominated_node=rejected[0], victims=("v1",), message="preemption: it would fit"
        )


REGISTRY = with_plugins(OnlyEven, Broken, PreferLast, Devices, Gang, Nominator)


def _framework(**points):
    return profile(points, registry=REGISTRY)


def test_filter_order_and_custom_score() -> None:
    state = state_of(*(node(f"n{i}") for i in range(5)))
    framework = _framework(filter=["OnlyEven"], score=[("PreferLast", 2)])
    decision = framework.schedule(pod("p"), state)
    assert decision.node == "n4" and decision.feasible_nodes == 3
    assert decision.top_scores[0].scores == (("PreferLast", 200),)
    assert decision.message == ""


def test_reserve_devices_flow_into_the_decision_and_failures_unreserve() -> None:
    state = state_of(node("n0"))
    framework = _framework(reserve=["Devices"], permit=["Gang"])
    placed = framework.schedule(pod("p"), state)
    assert placed.status == "placed" and placed.gpu_devices == (2, 0)
    Devices.unreserved.clear()
    failed = framework.schedule(pod("q", labels={"fail": "reserve"}), state)
    assert failed.status == "unschedulable"
    assert failed.message == "0/1 nodes are available: 1 no device left."
    assert Devices.unreserved == [state.nodes.slot_of("n0")]
    held = framework.schedule(pod("w", labels={"permit": "wait"}), state)
    assert held.status == "held" and held.node == "n0"
    rejected = framework.schedule(pod("r", labels={"permit": "reject"}), state)
    assert rejected.status == "unschedulable" and "gang rejected" in rejected.message


def test_plugin_error_becomes_an_error_decision() -> None:
    decision = _framework(filter=["Broken"]).schedule(pod("p"), state_of(node("n0")))
    assert decision.status == "error" and decision.message == "Broken: boom"


def test_post_filter_nominates() -> None:
    state = state_of(node("n1"), node("n3"))
    decision = _framework(filter=["OnlyEven"], postFilter=["Nominator"]).schedule(pod("p"), state)
    assert decision.status == "preempting"
    assert decision.nominated_node == "n1" and decision.victims == ("v1",)
    # A PostFilter that nominates a node ends the run without a PostFilter part, as in kube.
    assert decision.message == "0/2 nodes are available: 2 odd node."


def test_find_feasible_on_a_subset_for_what_ifs() -> None:
    state = state_of(node("a", cpu=1000), node("b", cpu=1000))
    hog = pod("hog", cpu=1000)
    state.assume(hog, "a")
    framework = default_scheduler().frameworks["berth"]
    p = pod("p", cpu=500)
    assert state.nodes.names_of(framework.find_feasible(p, state, ["a"]).feasible) == []
    state.remove_pod(hog.uid)  # what if the hog were gone?
    assert state.nodes.names_of(framework.find_feasible(p, state, ["a"]).feasible) == ["a"]
    state.assume(hog, "a")


def test_scheduler_serves_several_profiles() -> None:
    from berth.core.config import parse_config

    config = parse_config(
        {
            "apiVersion": "berth.io/v1alpha1",
            "kind": "BerthSchedulerConfiguration",
            "profiles": [{"schedulerName": "berth"}, {"schedulerName": "other"}],
        }
    )
    scheduler = Scheduler(config)
    p = pod("p").model_copy(update={"scheduler_name": "other"})
    assert scheduler.schedule(p, state_of(node("a"))).profile == "other"


def test_rejection_groups_do_not_depend_on_the_order_taints_were_first_seen() -> None:
    nodes = [
        node("a", taints=(taint("x", "1"),)),
        node("b", taints=(taint("y", "2"),)),
        node("c", taints=(taint("x", "1"),)),
    ]
    forward, backward = state_of(*nodes), state_of(*reversed(nodes))
    scheduler = default_scheduler()
    first, second = scheduler.schedule(pod("p"), forward), scheduler.schedule(pod("p"), backward)
    assert first.to_json() == second.to_json()
    # v1.34 names no taint: every tainted node is in one group, whichever taint it has.
    assert [g.reasons for g in first.rejections] == [("node(s) had untolerated taint(s)",)]
    assert first.group_indices().tolist() == [0, 0, 0]


def test_node_groups_round_trip_with_many_groups() -> None:
    from berth.core.decision import Decision, RejectionGroup, pack_node_groups

    codes = np.array([-1, 0, 299, 5, -1], dtype=np.int32)
    packed, width = pack_node_groups(codes, 300)
    assert width == 2
    groups = tuple(RejectionGroup("P", "Unschedulable", (f"r{i}",), 1) for i in range(300))
    decision = Decision(
        pod_uid="u",
        pod="ns/p",
        profile="berth",
        status="unschedulable",
        nodes_total=5,
        rejections=groups,
        node_groups=packed,
        node_group_width=width,
    )
    assert decision.group_indices().tolist() == [-1, 0, 299, 5, -1]
    assert [g and g.reasons for _, g in decision.node_reasons("abcde")] == [None, ("r0",), ("r299",), ("r5",), None]
    assert pack_node_groups(np.array([-1, -1]), 0) == ("", 1)


class OutOfRange(ScorePlugin):
    NAME = "OutOfRange"

    def score(self, cycle: CycleContext, nodes):
        return np.full(nodes.size, 150, dtype=np.int64)


def test_scores_outside_0_100_fail_the_attempt_like_kube() -> None:
    framework = profile({"score": [("OutOfRange", 1)]}, registry=with_plugins(OutOfRange))
    decision = framework.schedule(pod("p"), state_of(node("a")))
    assert decision.status == "error"
    assert decision.message == (
        "OutOfRange: plugin 'OutOfRange' returns an invalid score 150, "
        "it should in the range of [0, 100] after normalizing"
    )


class MemoOutOfRange(ScorePlugin):
    """Memoised (a signature), normalises node by node; node "b" scores out of range."""

    NAME = "MemoOutOfRange"

    def score_signature(self, cycle: CycleContext):
        return "same"

    def score(self, cycle: CycleContext, nodes):
        names = cycle.state.nodes.names_of(nodes.tolist())
        return np.array([150 if name == "b" else 7 for name in names], dtype=np.int64)


def test_memoised_scores_out_of_range_fail_every_attempt_not_only_the_first() -> None:
    # The weighted-score memo records nothing from a cycle with an out-of-range score, so the
    # next cycle reports it again, with the message of the unmemoised path.
    framework = profile({"score": [("MemoOutOfRange", 1)]}, registry=with_plugins(MemoOutOfRange))
    state = state_of(node("a"), node("b"), node("c"))
    for name in ("p", "q"):
        decision = framework.schedule(pod(name), state)
        assert decision.status == "error"
        assert decision.message == (
            "MemoOutOfRange: plugin 'MemoOutOfRange' returns an invalid "
            "score 150, it should in the range of [0, 100] after normalizing"
        )


def test_top_scores_equal_a_full_sort_by_total_then_tie_break() -> None:
    from berth.core.hashing import tie_break_keys
    from berth.core.ranking import rank
    from berth.core.scoring import Scores

    framework = default_scheduler().frameworks["berth"]
    state = state_of(*(node(f"n{i:02d}") for i in range(40)))
    for seed in range(20):
        total = np.random.RandomState(seed).randint(0, 4, 40).astype(np.int64)
        p = pod(f"p{seed}")
        ranked = rank(p, state, Scores(state.nodes.order(), total, {}), framework.keep_top_scores)
        tie = tie_break_keys(p.uid, state.name_hash[state.nodes.order()]) >> np.uint64(24)
        key = (total << 40) | ((1 << 40) - 1 - tie.astype(np.int64))
        assert ranked.tolist() == np.argsort(-key, kind="stable")[:10].tolist()


class PinA(FilterPlugin):
    NAME = "PinA"

    def pre_filter(self, cycle):
        from berth.core.framework import PreFilterResult

        return Status.success(), PreFilterResult(node_names=frozenset({"n0", "n1"}))

    def filter(self, cycle, nodes):
        return FilterResult.all_pass()


class PinB(FilterPlugin):
    NAME = "PinB"

    def pre_filter(self, cycle):
        from berth.core.framework import PreFilterResult

        return Status.success(), PreFilterResult(node_names=frozenset({"n2"}))

    def filter(self, cycle, nodes):
        return FilterResult.all_pass()


class SoftReject(FilterPlugin):
    NAME = "SoftReject"
    ran_after: list[str] = []

    def pre_filter(self, cycle):
        return Status.unschedulable("not now"), None

    def filter(self, cycle, nodes):
        return FilterResult.all_pass()


class Witness(FilterPlugin):
    NAME = "Witness"

    def pre_filter(self, cycle):
        SoftReject.ran_after.append(cycle.pod.name)
        return Status.success(), None

    def filter(self, cycle, nodes):
        return FilterResult.all_pass()


def _prefilter_framework(*names):
    from berth.core.framework import PreFilterPlugin

    classes = []
    for cls in (PinA, PinB, SoftReject, Witness):
        # Make the test classes PreFilter plugins too, without repeating the boilerplate.
        classes.append(type(cls.__name__, (cls, PreFilterPlugin), {}))
    registry = with_plugins(*classes)
    return profile({"preFilter": list(names), "filter": list(names)}, registry=registry)


def test_prefilter_results_intersect_and_name_the_plugins() -> None:
    state = state_of(node("n0"), node("n1"), node("n2"))
    one = _prefilter_framework("PinA").schedule(pod("p"), state)
    assert one.status == "placed" and one.node in ("n0", "n1")
    assert [g.reasons for g in one.rejections] == [("node(s) didn't satisfy plugin(s) [PinA]",)]
    both = _prefilter_framework("PinB", "PinA").schedule(pod("p"), state)
    assert both.message == ("0/3 nodes are available: node(s) didn't satisfy plugin(s) [PinA PinB] simultaneously.")


def test_unschedulable_prefilter_still_runs_the_others() -> None:
    SoftReject.ran_after.clear()
    state = state_of(node("n0"))
    decision = _prefilter_framework("SoftReject", "Witness").schedule(pod("p"), state)
    assert decision.status == "unschedulable"
    assert decision.message == "0/1 nodes are available: not now."
    assert SoftReject.ran_after == ["p"]  # kube keeps going for preemption's sake


def test_rejection_codes_are_numbered_in_order_of_first_use() -> None:
    from berth.core.filtering import _codes_by_first_use

    rng = np.random.RandomState(4)
    for count in (1, 2, 3, 8, 9, 20):
        for _ in range(50):
            codes = rng.randint(0, count, rng.randint(1, 60))
            expected = list(dict.fromkeys(codes.tolist()))
            assert _codes_by_first_use(codes, count) == expected
