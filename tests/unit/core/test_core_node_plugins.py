"""NodeUnschedulable, NodeName, TaintToleration and NodeAffinity against kube's documented
behaviour (table-driven: one row per rule)."""

from __future__ import annotations

import pytest

from berth.core import messages

from .builders import (
    expr,
    feasible_names,
    filters,
    node,
    node_affinity,
    pod,
    profile,
    rejections,
    scores,
    state_of,
    taint,
    term,
    toleration,
)

# --- NodeUnschedulable -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tolerations, feasible",
    [
        ((), ["b"]),
        ((toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule"),), ["a", "b"]),
        ((toleration("node.kubernetes.io/unschedulable", "Exists"),), ["a", "b"]),
        ((toleration(operator="Exists"),), ["a", "b"]),
        ((toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoExecute"),), ["b"]),
    ],
)
def test_cordoned_nodes_take_pods_only_with_the_toleration(tolerations, feasible) -> None:
    state = state_of(node("a", unschedulable=True), node("b"))
    framework = filters("NodeUnschedulable")
    p = pod("p", tolerations=tolerations)
    assert feasible_names(framework, p, state) == feasible
    if "a" not in feasible:
        assert rejections(framework, p, state) == {"a": (messages.NODE_UNSCHEDULABLE,)}


# --- NodeName ------------------------------------------------------------------------------------


def test_node_name_pins_the_node() -> None:
    state = state_of(node("a"), node("b"))
    framework = filters("NodeName")
    assert feasible_names(framework, pod("p"), state) == ["a", "b"]
    assert feasible_names(framework, pod("p", node_name="b"), state) == ["b"]
    assert rejections(framework, pod("p", node_name="b"), state) == {"a": (messages.NODE_NAME_NOT_MATCH,)}
    assert feasible_names(framework, pod("p", node_name="gone"), state) == []


# --- TaintToleration -----------------------------------------------------------------------------

GPU_TAINT = taint("dedicated", "gpu", "NoSchedule")


@pytest.mark.parametrize(
    "taints, tolerations, passes",
    [
        # Equal needs key, value and (if set) effect to match.
        ((GPU_TAINT,), (toleration("dedicated", "Equal", "gpu", "NoSchedule"),), True),
        ((GPU_TAINT,), (toleration("dedicated", "Equal", "cpu", "NoSchedule"),), False),
        ((GPU_TAINT,), (toleration("dedicated", "Equal", "gpu"),), True),  # empty effect: all
        ((GPU_TAINT,), (toleration("dedicated", "Equal", "gpu", "NoExecute"),), False),
        # Exists ignores the value.
        ((GPU_TAINT,), (toleration("dedicated", "Exists"),), True),
        ((GPU_TAINT,), (toleration("other", "Exists"),), False),
        # Empty key with Exists tolerates everything (of the effect, if given).
        ((GPU_TAINT,), (toleration(operator="Exists"),), True),
        ((GPU_TAINT,), (toleration(operator="Exists", effect="NoExecute"),), False),
        # NoExecute filters too; PreferNoSchedule never filters.
        ((taint("k", "v", "NoExecute"),), (), False),
        ((taint("k", "v", "PreferNoSchedule"),), (), True),
        # Every hard taint must be tolerated.
        ((GPU_TAINT, taint("zone", "x", "NoExecute")), (toleration("dedicated", "Exists"),), False),
    ],
)
def test_taints_and_tolerations(taints, tolerations, passes) -> None:
    state = state_of(node("a", taints=taints))
    result = feasible_names(filters("TaintToleration"), pod("p", tolerations=tolerations), state)
    assert (result == ["a"]) is passes


def test_every_node_with_an_untolerated_hard_taint_fails_with_kubes_one_reason() -> None:
    state = state_of(
        node("a", taints=(taint("first", "1"), taint("second", "2", "NoExecute"))),
        node("b", taints=(taint("second", "2", "NoExecute"), taint("first", "1"))),
        node("c", taints=(taint("soft", "x", "PreferNoSchedule"), taint("first", "1"))),
    )
    p = pod("p", tolerations=(toleration("other", "Exists"),))
    assert rejections(filters("TaintToleration"), p, state) == {
        "a": ("node(s) had untolerated taint(s)",),
        "b": ("node(s) had untolerated taint(s)",),
        "c": ("node(s) had untolerated taint(s)",),
    }
    tolerant = pod("q", tolerations=(toleration("first", "Exists"), toleration("second", "Exists")))
    assert rejections(filters("TaintToleration"), tolerant, state) == {}


def test_prefer_no_schedule_scores_fewer_intolerable_taints_higher() -> None:
    soft = lambda key: taint(key, "", "PreferNoSchedule")  # noqa: E731 -- a one-line builder, read like the taint() beside it
    state = state_of(node("none"), node("one", taints=(soft("a"),)), node("two", taints=(soft("a"), soft("b"))))
    framework = profile({"preScore": ["TaintToleration"], "score": [("TaintToleration", 1)]})
    # kube: DefaultNormalizeScore(100, reverse): 100 - count*100/max.
    assert scores(framework, pod("p"), state, "TaintToleration") == {"none": 100, "one": 50, "two": 0}
    tolerant = pod("p", tolerations=(toleration("a", "Exists", effect="PreferNoSchedule"),))
    assert scores(framework, tolerant, state, "TaintToleration") == {"none": 100, "one": 100, "two": 0}


def test_no_soft_taints_anywhere_scores_everyone_100() -> None:
    state = state_of(node("a"), node("b"))
    framework = profile({"score": [("TaintToleration", 3)]})
    assert scores(framework, pod("p"), state, "TaintToleration") == {"a": 300, "b": 300}


# --- NodeAffinity --------------------------------------------------------------------------------

LABELS = {
    "a": {"gpu": "h100", "zone": "z1", "cores": "64"},
    "b": {"gpu": "a100", "zone": "z2", "cores": "32"},
    "c": {"zone": "z1", "cores": "not-a-number"},
}


def _labelled_state():
    return state_of(*(node(name, labels=labels) for name, labels in LABELS.items()))


@pytest.mark.parametrize(
    "affinity, node_selector, feasible",
    [
        (None, {"gpu": "h100"}, ["a"]),
        (None, {"gpu": "h100", "zone": "z2"}, []),
        (node_affinity([term(expr("gpu", "In", "h100", "a100"))]), {}, ["a", "b"]),
        (node_affinity([term(expr("gpu", "NotIn", "h100"))]), {}, ["b", "c"]),  # absent key passes
        (node_affinity([term(expr("gpu", "Exists"))]), {}, ["a", "b"]),
        (node_affinity([term(expr("gpu", "DoesNotExist"))]), {}, ["c"]),
        (node_affinity([term(expr("cores", "Gt", "32"))]), {}, ["a"]),
        (node_affinity([term(expr("cores", "Lt", "64"))]), {}, ["b"]),  # unparsable never matches
        # Expressions of a term are ANDed, terms are ORed.
        (node_affinity([term(expr("zone", "In", "z1"), expr("gpu", "Exists"))]), {}, ["a"]),
        (node_affinity([term(expr("gpu", "In", "a100")), term(expr("zone", "In", "z1"))]), {}, ["a", "b", "c"]),
        # nodeSelector and affinity must both hold.
        (node_affinity([term(expr("zone", "In", "z1"))]), {"gpu": "h100"}, ["a"]),
        # An empty term matches nothing; so do zero terms.
        (node_affinity([term()]), {}, []),
        (node_affinity([]), {}, []),
        # matchFields on metadata.name.
        (node_affinity([term(fields=[expr("metadata.name", "In", "b")])]), {}, ["b"]),
        (node_affinity([term(fields=[expr("metadata.name", "NotIn", "b")])]), {}, ["a", "c"]),
        (node_affinity([term(expr("zone", "In", "z1"), fields=[expr("metadata.name", "In", "a", "b")])]), {}, ["a"]),
    ],
)
def test_node_selector_and_required_affinity(affinity, node_selector, feasible) -> None:
    p = pod("p", affinity=affinity, node_selector=node_selector)
    assert feasible_names(filters("NodeAffinity"), p, _labelled_state()) == feasible


def test_rejection_reasons_for_node_affinity() -> None:
    p = pod("p", node_selector={"gpu": "h100"})
    assert rejections(filters("NodeAffinity"), p, _labelled_state()) == {
        "b": (messages.NODE_AFFINITY_NOT_MATCH,),
        "c": (messages.NODE_AFFINITY_NOT_MATCH,),
    }


def test_node_name_pins_become_a_prefilter_result() -> None:
    framework = filters("NodeAffinity")
    p = pod("p", affinity=node_affinity([term(fields=[expr("metadata.name", "In", "a", "x")])]))
    assert rejections(framework, p, _labelled_state()) == {
        "b": ("node(s) didn't satisfy plugin(s) [NodeAffinity]",),
        "c": ("node(s) didn't satisfy plugin(s) [NodeAffinity]",),
    }


def test_conflicting_name_pins_reject_the_pod_at_prefilter() -> None:
    framework = filters("NodeAffinity")
    p = pod(
        "p", affinity=node_affinity([term(fields=[expr("metadata.name", "In", "a"), expr("metadata.name", "In", "b")])])
    )
    diagnosis = framework.find_feasible(p, _labelled_state()).diagnosis
    assert diagnosis.prefilter_status is not None
    assert diagnosis.prefilter_status.reasons == (messages.AFFINITY_CONFLICT,)


def test_added_affinity_is_enforced_first() -> None:
    framework = filters(
        "NodeAffinity",
        NodeAffinity={
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
                }
            }
        },
    )
    p = pod("p", node_selector={"gpu": "h100"})
    assert rejections(framework, p, _labelled_state()) == {
        "b": (messages.NODE_AFFINITY_ENFORCED_NOT_MATCH,),
        "c": (messages.NODE_AFFINITY_NOT_MATCH,),
    }


def test_preferred_node_affinity_scores_by_matching_weights() -> None:
    framework = profile({"preScore": ["NodeAffinity"], "score": [("NodeAffinity", 2)]})
    p = pod(
        "p",
        affinity=node_affinity(preferred=[(80, term(expr("gpu", "In", "h100"))), (20, term(expr("zone", "In", "z1")))]),
    )
    # raw: a=100, b=0, c=20 → normalised ×100/max → weight 2.
    assert scores(framework, p, _labelled_state(), "NodeAffinity") == {"a": 200, "b": 0, "c": 40}
    assert scores(framework, pod("plain"), _labelled_state(), "NodeAffinity") == {}
