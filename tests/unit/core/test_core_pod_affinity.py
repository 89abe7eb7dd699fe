"""InterPodAffinity: required/preferred affinity and anti-affinity, existing pods' anti-affinity,
the self-affinity first pod, namespaces and namespaceSelector, matchLabelKeys."""

from __future__ import annotations

from berth.core import messages

from .builders import (
    HOST,
    ZONE,
    feasible_names,
    filters,
    node,
    pod,
    pod_affinity,
    pod_term,
    profile,
    rejections,
    scores,
    selector,
    state_of,
)


def _zoned_state(*placed):
    # a, b in zone z1; c in z2; d has no zone label.
    state = state_of(
        node("a", labels={ZONE: "z1"}), node("b", labels={ZONE: "z1"}), node("c", labels={ZONE: "z2"}), node("d")
    )
    for p, where in placed:
        state.assume(p, where)
    return state


WEB = {"app": "web"}
DB = {"app": "db"}


def test_required_affinity_needs_a_matching_pod_in_the_domain() -> None:
    state = _zoned_state((pod("db", labels=DB), "b"))
    p = pod("p", affinity=pod_affinity([pod_term(DB, ZONE)]))
    assert feasible_names(filters("InterPodAffinity"), p, state) == ["a", "b"]
    assert rejections(filters("InterPodAffinity"), p, state) == {
        "c": (messages.POD_AFFINITY_NOT_MATCH,),
        "d": (messages.POD_AFFINITY_NOT_MATCH,),
    }


def test_affinity_terms_are_anded_over_the_same_pod() -> None:
    state = _zoned_state((pod("db", labels=DB), "a"), (pod("web", labels=WEB), "c"))
    p = pod("p", affinity=pod_affinity([pod_term(DB, ZONE), pod_term(WEB, ZONE)]))
    # No single pod matches both terms, and p itself matches neither: nothing fits.
    assert feasible_names(filters("InterPodAffinity"), p, state) == []


def test_first_pod_of_a_self_affine_group_may_start_it() -> None:
    framework = filters("InterPodAffinity")
    state = _zoned_state()
    first = pod("w0", labels=WEB, affinity=pod_affinity([pod_term(WEB, ZONE)]))
    # Nothing matches yet and the pod matches its own term: any node with the key will do.
    assert feasible_names(framework, first, state) == ["a", "b", "c"]
    state.assume(first, "c")
    second = pod("w1", labels=WEB, affinity=pod_affinity([pod_term(WEB, ZONE)]))
    assert feasible_names(framework, second, state) == ["c"]
    # A pod that does not match its own term gets no such exception.
    stranger = pod("s", labels=DB, affinity=pod_affinity([pod_term({"app": "none"}, ZONE)]))
    assert feasible_names(framework, stranger, _zoned_state()) == []


def test_required_anti_affinity_keeps_the_pod_out_of_the_domain() -> None:
    state = _zoned_state((pod("web", labels=WEB), "a"))
    p = pod("p", labels=WEB, affinity=pod_affinity(anti_required=[pod_term(WEB, ZONE)]))
    assert rejections(filters("InterPodAffinity"), p, state) == {
        "a": (messages.POD_ANTI_AFFINITY_NOT_MATCH,),
        "b": (messages.POD_ANTI_AFFINITY_NOT_MATCH,),
    }
    # d has no zone label: the term cannot be violated there.
    assert feasible_names(filters("InterPodAffinity"), p, state) == ["c", "d"]


def test_existing_pods_anti_affinity_applies_to_the_incoming_pod() -> None:
    loner = pod("loner", labels=DB, affinity=pod_affinity(anti_required=[pod_term(WEB, HOST)]))
    state = _zoned_state((loner, "b"))
    assert rejections(filters("InterPodAffinity"), pod("w", labels=WEB), state) == {
        "b": (messages.EXISTING_ANTI_AFFINITY_NOT_MATCH,)
    }
    assert rejections(filters("InterPodAffinity"), pod("x", labels=DB), state) == {}


def test_terms_look_in_the_pods_namespace_by_default() -> None:
    state = _zoned_state((pod("db", namespace="other", labels=DB), "a"))
    framework = filters("InterPodAffinity")
    assert feasible_names(framework, pod("p", affinity=pod_affinity([pod_term(DB, ZONE)])), state) == []
    in_other = pod("p", affinity=pod_affinity([pod_term(DB, ZONE, namespaces=["other"])]))
    assert feasible_names(framework, in_other, state) == ["a", "b"]


def test_namespace_selector_uses_namespace_labels() -> None:
    state = _zoned_state((pod("db", namespace="prod", labels=DB), "c"))
    state.upsert_namespace("prod", {"tier": "prod"})
    state.upsert_namespace("dev", {"tier": "dev"})
    framework = filters("InterPodAffinity")
    by_label = pod("p", affinity=pod_affinity([pod_term(DB, ZONE, namespace_selector=selector({"tier": "prod"}))]))
    assert feasible_names(framework, by_label, state) == ["c"]
    wrong = pod("p", affinity=pod_affinity([pod_term(DB, ZONE, namespace_selector=selector({"tier": "dev"}))]))
    assert feasible_names(framework, wrong, state) == []
    everywhere = pod("p", affinity=pod_affinity([pod_term(DB, ZONE, namespace_selector=selector())]))
    assert feasible_names(framework, everywhere, state) == ["c"]


def test_existing_anti_affinity_with_namespace_selector_sees_incoming_namespace_labels() -> None:
    guard = pod(
        "guard",
        namespace="prod",
        affinity=pod_affinity(anti_required=[pod_term(WEB, ZONE, namespace_selector=selector({"team": "a"}))]),
    )
    state = _zoned_state((guard, "a"))
    state.upsert_namespace("team-a", {"team": "a"})
    framework = filters("InterPodAffinity")
    assert sorted(rejections(framework, pod("w", namespace="team-a", labels=WEB), state)) == ["a", "b"]
    assert rejections(framework, pod("w", namespace="team-b", labels=WEB), state) == {}


def test_nil_label_selector_matches_nothing() -> None:
    state = _zoned_state((pod("db", labels=DB), "a"))
    p = pod("p", affinity=pod_affinity(anti_required=[pod_term(None, ZONE)]))
    assert feasible_names(filters("InterPodAffinity"), p, state) == ["a", "b", "c", "d"]


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values() -> None:
    v1 = pod("v1", labels={"app": "web", "rev": "1"})
    state = _zoned_state((v1, "a"))
    p = pod(
        "p",
        labels={"app": "web", "rev": "2"},
        affinity=pod_affinity(anti_required=[pod_term(WEB, ZONE, match_label_keys=["rev"])]),
    )
    # Only pods of the same revision repel: v1 (rev 1) does not.
    assert feasible_names(filters("InterPodAffinity"), p, state) == ["a", "b", "c", "d"]


def test_preferred_terms_and_symmetry_score() -> None:
    framework = profile({"preScore": ["InterPodAffinity"], "score": [("InterPodAffinity", 1)]})
    state = _zoned_state((pod("db", labels=DB), "a"), (pod("web", labels=WEB), "c"))
    p = pod(
        "p", affinity=pod_affinity(preferred=[(50, pod_term(DB, ZONE))], anti_preferred=[(100, pod_term(WEB, ZONE))])
    )
    # Domains: z1 +50, z2 -100, d none (0) → min-max over [50, 50, -100, 0].
    assert scores(framework, p, state, "InterPodAffinity") == {"a": 100, "b": 100, "c": 0, "d": 66}
    # Existing pods' required affinity attracts matching pods (hardPodAffinityWeight 1) and
    # their preferred terms count too.
    fan = pod("fan", labels=DB, affinity=pod_affinity([pod_term(WEB, HOST)]))
    state2 = _zoned_state((fan, "b"))
    assert scores(framework, pod("w", labels=WEB), state2, "InterPodAffinity") == {"a": 0, "b": 100, "c": 0, "d": 0}
    # No terms anywhere: the plugin is skipped.
    assert scores(framework, pod("plain"), _zoned_state(), "InterPodAffinity") == {}


def test_placed_terms_follow_nodes_leaving_and_returning() -> None:
    loner = pod("loner", labels=DB, affinity=pod_affinity(anti_required=[pod_term(WEB, HOST)]))
    state = _zoned_state((loner, "b"))
    framework = filters("InterPodAffinity")
    web = pod("w", labels=WEB)
    assert "b" in rejections(framework, web, state)
    state.remove_node("b")  # its pods hold nothing while the node is unknown
    assert rejections(framework, web, state) == {}
    state.upsert_node(node("b", labels={ZONE: "z1"}))
    assert rejections(framework, web, state) == {"b": (messages.EXISTING_ANTI_AFFINITY_NOT_MATCH,)}
    state.remove_pod(loner.uid)
    assert rejections(framework, web, state) == {}


def test_existing_terms_with_and_without_an_in_requirement_are_all_checked() -> None:
    by_value = pod(
        "v",
        labels=DB,
        affinity=pod_affinity(
            anti_required=[
                pod_term(None, HOST).model_copy(
                    update={"label_selector": selector(None, ("app", "In", ("web", "api")))}
                )
            ]
        ),
    )
    by_key = pod(
        "k",
        labels=DB,
        affinity=pod_affinity(
            anti_required=[
                pod_term(None, HOST).model_copy(update={"label_selector": selector(None, ("tier", "Exists", ()))})
            ]
        ),
    )
    state = _zoned_state((by_value, "a"), (by_key, "c"))
    framework = filters("InterPodAffinity")
    assert sorted(rejections(framework, pod("w", labels=WEB), state)) == ["a"]
    assert sorted(rejections(framework, pod("x", labels={"app": "api", "tier": "1"}), state)) == ["a", "c"]
    assert rejections(framework, pod("y", labels={"app": "other"}), state) == {}
