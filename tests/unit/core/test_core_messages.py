"""Golden strings: every user-visible reason, word for word as kube-scheduler v1.34 prints it."""

from __future__ import annotations

import pytest

from berth.core import messages


@pytest.mark.parametrize(
    "actual, expected",
    [
        (messages.NODE_UNSCHEDULABLE, "node(s) were unschedulable"),
        (messages.NODE_NAME_NOT_MATCH, "node(s) didn't match the requested node name"),
        (messages.NODE_AFFINITY_NOT_MATCH, "node(s) didn't match Pod's node affinity/selector"),
        (messages.NODE_AFFINITY_ENFORCED_NOT_MATCH, "node(s) didn't match scheduler-enforced node affinity"),
        (messages.AFFINITY_CONFLICT, "pod affinity terms conflict"),
        (messages.UNTOLERATED_TAINT, "node(s) had untolerated taint(s)"),
        (messages.SCHEDULING_GATED, "Scheduling is blocked due to non-empty scheduling gates"),
        (messages.TOO_MANY_PODS, "Too many pods"),
        (messages.insufficient("cpu"), "Insufficient cpu"),
        (messages.insufficient("nvidia.com/gpu"), "Insufficient nvidia.com/gpu"),
        (messages.insufficient("nvidia.com/mig-1g.5gb"), "Insufficient nvidia.com/mig-1g.5gb"),
        (messages.POD_AFFINITY_NOT_MATCH, "node(s) didn't match pod affinity rules"),
        (messages.POD_ANTI_AFFINITY_NOT_MATCH, "node(s) didn't match pod anti-affinity rules"),
        (messages.EXISTING_ANTI_AFFINITY_NOT_MATCH, "node(s) didn't satisfy existing pods anti-affinity rules"),
        (messages.TOPOLOGY_SPREAD_NOT_MATCH, "node(s) didn't match pod topology spread constraints"),
        (
            messages.TOPOLOGY_SPREAD_MISSING_LABEL,
            "node(s) didn't match pod topology spread constraints (missing required label)",
        ),
        (messages.plugins_not_satisfied(["NodeAffinity"]), "node(s) didn't satisfy plugin(s) [NodeAffinity]"),
        (messages.plugins_not_satisfied(["Zeta", "Alpha"]), "node(s) didn't satisfy plugin(s) [Alpha Zeta]"),
        (messages.plugin_not_satisfied("NodeAffinity"), "node(s) didn't satisfy plugin NodeAffinity"),
        (
            messages.plugins_not_satisfied_simultaneously(["B", "A"]),
            "node(s) didn't satisfy plugin(s) [A B] simultaneously",
        ),
        # DynamicResources and DefaultPreemption, the PostFilter plugins of kube's default profile.
        (messages.DRA_NO_CLAIMS_TO_DEALLOCATE, "no new claims to deallocate"),
        (messages.PREEMPTION_NO_VICTIMS, "No preemption victims found for incoming pod"),
        (messages.PREEMPTION_NOT_HELPFUL, "Preemption is not helpful for scheduling"),
        (messages.PREEMPTION_NOT_ELIGIBLE_NEVER, "preemption: not eligible due to preemptionPolicy=Never."),
        (
            messages.preemption_failed("0/3 nodes are available: 3 No preemption victims found for incoming pod."),
            "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
        ),
    ],
)
def test_reason_strings_are_kubes(actual: str, expected: str) -> None:
    assert actual == expected


def test_fit_error_matches_the_design_example() -> None:
    message = messages.fit_error(5, {messages.UNTOLERATED_TAINT: 2, "Insufficient nvidia.com/gpu": 3})
    assert message == "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient nvidia.com/gpu."


def test_fit_error_sorts_entries_as_strings_like_kube() -> None:
    # "10 ..." sorts before "2 ..." because kube sorts the formatted entries, not the counts.
    message = messages.fit_error(12, {"Insufficient cpu": 10, "Insufficient memory": 2})
    assert message == "0/12 nodes are available: 10 Insufficient cpu, 2 Insufficient memory."


def test_fit_error_with_prefilter_message_drops_the_histogram() -> None:
    message = messages.fit_error(3, {"ignored": 3}, prefilter_message="pod affinity terms conflict")
    assert message == "0/3 nodes are available: pod affinity terms conflict."


def test_fit_error_appends_the_postfilter_message_after_a_space_as_it_is() -> None:
    message = messages.fit_error(
        2,
        {"Insufficient cpu": 2},
        postfilter_message="no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never.",
    )
    assert message == (
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
        "preemption: not eligible due to preemptionPolicy=Never."
    )


def test_fit_error_without_nodes() -> None:
    assert messages.fit_error(0, {}) == "0/0 nodes are available:"
    # ... which the scheduler never prints: with no node at all it says what kube-scheduler does.
    assert messages.NO_NODES_TO_SCHEDULE == "no nodes available to schedule pods"


@pytest.mark.parametrize(
    ("reasons", "inner", "expected"),
    [
        # Written by kube-scheduler v1.34.10 (the project's build) as PodScheduled's message, 4 nodes:
        # two tainted, two too small for the pod, no pod running.
        (
            {"Insufficient cpu": 2, messages.UNTOLERATED_TAINT: 2},
            {messages.PREEMPTION_NOT_HELPFUL: 4},
            "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s). no new claims to "
            "deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        ),
        (
            {"node(s) didn't match pod affinity rules": 2, messages.UNTOLERATED_TAINT: 2},
            {messages.PREEMPTION_NOT_HELPFUL: 4},
            "0/4 nodes are available: 2 node(s) didn't match pod affinity rules, 2 node(s) had untolerated taint(s). "
            "no new claims to deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful for "
            "scheduling.",
        ),
    ],
)
def test_full_messages_read_as_kube_scheduler_v1_34_writes_them(reasons, inner, expected) -> None:
    postfilter = ", ".join(
        (messages.DRA_NO_CLAIMS_TO_DEALLOCATE, messages.preemption_failed(messages.fit_error(4, inner)))
    )
    assert messages.fit_error(4, reasons, postfilter_message=postfilter) == expected
    assert ".." not in expected


def test_every_public_string_of_the_module_is_pinned_here() -> None:
    # A new reason must come with its golden test: list the constants this file checks.
    import inspect

    pinned = {
        "NODE_UNSCHEDULABLE",
        "NODE_NAME_NOT_MATCH",
        "NODE_AFFINITY_NOT_MATCH",
        "NODE_AFFINITY_ENFORCED_NOT_MATCH",
        "AFFINITY_CONFLICT",
        "TOO_MANY_PODS",
        "POD_AFFINITY_NOT_MATCH",
        "POD_ANTI_AFFINITY_NOT_MATCH",
        "EXISTING_ANTI_AFFINITY_NOT_MATCH",
        "TOPOLOGY_SPREAD_NOT_MATCH",
        "TOPOLOGY_SPREAD_MISSING_LABEL",
        "PREEMPTION_NO_VICTIMS",
        "PREEMPTION_NOT_HELPFUL",
        "PREEMPTION_NOT_ELIGIBLE_NEVER",
        "NO_NODE_AVAILABLE",
        "NO_NODES_TO_SCHEDULE",
        "UNTOLERATED_TAINT",
        "DRA_NO_CLAIMS_TO_DEALLOCATE",
        "SCHEDULING_GATED",
        "IN_ANOTHER_CELL",
    }
    constants = {
        name
        for name, value in vars(messages).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    }
    assert constants <= pinned, f"reason strings without a golden test: {constants - pinned}"
    berths_own = {
        "gpu_no_share",
        "gpu_no_nvlink_set",
        "gpu_no_socket_set",
        "gang_waiting",
        "gang_not_found",
        "gang_failed",
    }  # Berth's own GPU and gang wording
    readers = {
        "parse_fit_error",
        "over_more_nodes",
        "unresolvable_postfilter",
        "preemption_verdicts",
        "with_more_preemption",
    }  # fit_error's, tested below
    functions = {
        name for name, value in vars(messages).items() if inspect.isfunction(value) and not name.startswith("_")
    }
    assert functions - berths_own - readers <= {
        "fit_error",
        "insufficient",
        "plugins_not_satisfied",
        "plugin_not_satisfied",
        "plugins_not_satisfied_simultaneously",
        "preemption_failed",
        "with_more_nodes",
    }


def test_a_fit_error_restated_over_more_nodes_keeps_its_postfilter_part():
    own = messages.fit_error(
        3,
        {"Insufficient nvidia.com/gpu": 2, "node(s) were unschedulable": 1},
        postfilter_message=messages.preemption_failed("0/3 nodes are available: x."),
    )
    merged = messages.with_more_nodes(
        own,
        3,
        {"Insufficient nvidia.com/gpu": 2, "node(s) were unschedulable": 1},
        7,
        {"Insufficient nvidia.com/gpu": 7},
    )
    assert merged == (
        "0/10 nodes are available: 1 node(s) were unschedulable, 9 Insufficient nvidia.com/gpu. "
        "preemption: 0/3 nodes are available: x."
    )
    # Not that histogram's FitError (a PreFilter's, a gang's): unchanged; "no nodes" takes the others'.
    prefilter = messages.fit_error(3, {}, prefilter_message="node(s) didn't satisfy plugin NodeAffinity")
    assert messages.with_more_nodes(prefilter, 3, {}, 7, {"x": 7}) == prefilter
    assert (
        messages.with_more_nodes(messages.NO_NODES_TO_SCHEDULE, 0, {}, 2, {"x": 2}) == "0/2 nodes are available: 2 x."
    )
    assert messages.with_more_nodes(own, 3, {}, 0, {}) == own


def test_berths_reason_for_a_node_of_another_cell() -> None:
    assert messages.IN_ANOTHER_CELL == "node(s) were in another scheduling cell"


KUBE_4_NODES = (
    "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s). no new claims to "
    "deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)


def test_a_fit_error_reads_back_into_its_parts() -> None:
    parts = messages.parse_fit_error(KUBE_4_NODES)
    assert parts == messages.FitErrorParts(
        4,
        {"Insufficient cpu": 2, messages.UNTOLERATED_TAINT: 2},
        postfilter_message="no new claims to deallocate, preemption: 0/4 nodes are available: 4 Preemption is "
        "not helpful for scheduling.",
    )
    prefilter = messages.fit_error(3, {}, prefilter_message=messages.AFFINITY_CONFLICT, postfilter_message="x")
    assert messages.parse_fit_error(prefilter) == messages.FitErrorParts(3, {}, messages.AFFINITY_CONFLICT, "x")
    assert messages.parse_fit_error("0/2 nodes are available:") == messages.FitErrorParts(2, {})
    for other in (
        messages.NO_NODES_TO_SCHEDULE,
        messages.gang_waiting("ml/g", 1, 2),
        "0/4 nodes are available: 2 b, 2 a.",
    ):  # entries out of kube's order: not fit_error's
        assert messages.parse_fit_error(other) is None


def test_a_fit_error_over_more_unresolvable_nodes_counts_them_in_the_preemption_part_too() -> None:
    more = {messages.NODE_AFFINITY_NOT_MATCH: 5, messages.UNTOLERATED_TAINT: 1}
    assert messages.over_more_nodes(KUBE_4_NODES, 6, more) == (
        "0/10 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s), 5 node(s) didn't match "
        "Pod's node affinity/selector. no new claims to deallocate, preemption: 0/10 nodes are available: "
        "10 Preemption is not helpful for scheduling."
    )
    victims = messages.fit_error(
        2,
        {"Insufficient cpu": 2},
        postfilter_message=messages.preemption_failed(messages.fit_error(2, {messages.PREEMPTION_NO_VICTIMS: 2})),
    )
    assert messages.over_more_nodes(victims, 1, {messages.IN_ANOTHER_CELL: 1}) == (
        "0/3 nodes are available: 1 node(s) were in another scheduling cell, 2 Insufficient cpu. preemption: "
        "0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for "
        "incoming pod."
    )
    never = messages.fit_error(2, {"Insufficient cpu": 2}, postfilter_message=messages.PREEMPTION_NOT_ELIGIBLE_NEVER)
    assert messages.over_more_nodes(never, 1, {"x": 1}) == (
        "0/3 nodes are available: 1 x, 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    )
    prefilter = messages.fit_error(2, {}, prefilter_message=messages.AFFINITY_CONFLICT)
    assert messages.over_more_nodes(prefilter, 3, {"x": 3}) == "0/5 nodes are available: pod affinity terms conflict."
    empty = messages.unresolvable_postfilter(("DynamicResources", "DefaultPreemption"), 2)
    assert messages.over_more_nodes(messages.NO_NODES_TO_SCHEDULE, 2, {"x": 2}, postfilter_if_none=empty) == (
        "0/2 nodes are available: 2 x. no new claims to deallocate, preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling."
    )
    assert messages.over_more_nodes(messages.gang_waiting("ml/g", 1, 2), 2, {"x": 2}) == messages.gang_waiting(
        "ml/g", 1, 2
    )
    assert messages.over_more_nodes(KUBE_4_NODES, 0, {}) == KUBE_4_NODES
