"""NodeResourcesFit (filter and the three scoring strategies, plus Berth's GPU strategy) and
NodeResourcesBalancedAllocation, with expected values worked out from kube's formulas."""

from __future__ import annotations

import pytest

from berth.core.framework import Code

from .builders import GI, MI, feasible_names, filters, node, pod, profile, rejections, scores, state_of


def _fit_state(*nodes, placed=()):
    return state_of(*nodes, placed=placed)


# --- Filter ---------------------------------------------------------------------------------------


def test_fits_exactly_and_one_more_does_not() -> None:
    state = _fit_state(node("a", cpu=1000, memory=2 * GI))
    framework = filters("NodeResourcesFit")
    assert feasible_names(framework, pod("p", cpu=1000, memory=2 * GI), state) == ["a"]
    state.assume(pod("q", cpu=1000), "a")
    assert rejections(framework, pod("p", cpu=1, memory=0), state) == {"a": ("Insufficient cpu",)}


def test_every_failing_resource_is_reported_in_kube_order() -> None:
    state = _fit_state(node("a", cpu=1000, memory=GI, pods=1, **{"nvidia.com__gpu": 1, "example.com__foo": 1}))
    state.assume(pod("x", cpu=0), "a")  # uses the only pod slot
    p = pod("p", cpu=2000, memory=2 * GI, requests={"ephemeral-storage": 1, "nvidia.com/gpu": 2, "example.com/foo": 2})
    assert rejections(filters("NodeResourcesFit"), p, state) == {
        "a": (
            "Too many pods",
            "Insufficient cpu",
            "Insufficient memory",
            "Insufficient ephemeral-storage",
            "Insufficient example.com/foo",
            "Insufficient nvidia.com/gpu",
        )
    }


def test_pod_without_requests_only_needs_a_pod_slot() -> None:
    state = _fit_state(node("a", cpu=0, memory=0, pods=1), node("b", pods=0))
    assert rejections(filters("NodeResourcesFit"), pod("p", cpu=0), state) == {"b": ("Too many pods",)}


def test_missing_pods_allocatable_means_no_pod_fits() -> None:
    from berth.schemas.cluster import NodeInfo

    state = state_of(NodeInfo(name="bare", allocatable={"cpu": 1000}))
    assert rejections(filters("NodeResourcesFit"), pod("p"), state) == {"bare": ("Too many pods",)}


def test_status_is_unresolvable_when_the_whole_node_is_too_small() -> None:
    state = _fit_state(node("small", cpu=1000), node("busy", cpu=4000))
    state.assume(pod("hog", cpu=4000), "busy")
    diagnosis = filters("NodeResourcesFit").find_feasible(pod("p", cpu=2000), state).diagnosis
    by_node = {
        state.nodes.name_of(s): diagnosis.statuses[c]
        for s, c in zip(diagnosis.nodes.tolist(), diagnosis.node_codes.tolist(), strict=True)
    }
    assert by_node["small"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE  # preemption can't help
    assert by_node["busy"].code is Code.UNSCHEDULABLE  # evicting "hog" would


def test_extended_resource_no_node_has() -> None:
    state = _fit_state(node("a"))
    assert rejections(filters("NodeResourcesFit"), pod("p", requests={"vendor.io/fpga": 1}), state) == {
        "a": ("Insufficient vendor.io/fpga",)
    }


@pytest.mark.parametrize(
    "args",
    [
        {"ignoredResources": ["vendor.io/fpga"]},
        {"ignoredResourceGroups": ["vendor.io"]},
    ],
)
def test_ignored_extended_resources(args) -> None:
    state = _fit_state(node("a"))
    framework = filters("NodeResourcesFit", NodeResourcesFit=args)
    assert feasible_names(framework, pod("p", requests={"vendor.io/fpga": 1}), state) == ["a"]


def test_mig_and_gpu_counts_are_plain_extended_resources() -> None:
    state = _fit_state(node("a", **{"nvidia.com__mig-1g.5gb": 2}), node("b", gpu=8))
    framework = filters("NodeResourcesFit")
    assert feasible_names(framework, pod("p", requests={"nvidia.com/mig-1g.5gb": 2}), state) == ["a"]
    assert rejections(framework, pod("p", requests={"nvidia.com/gpu": 9}), state) == {
        "a": ("Insufficient nvidia.com/gpu",),
        "b": ("Insufficient nvidia.com/gpu",),
    }


# --- Scoring --------------------------------------------------------------------------------------


def _score_state():
    return _fit_state(
        node("half", cpu=4000, memory=32 * GI),
        node("empty", cpu=4000, memory=32 * GI),
        placed=[(pod("x", cpu=1000, memory=8 * GI), "half")],
    )


def _fit_scores(strategy, p, state, **extra):
    framework = profile(
        {"score": [("NodeResourcesFit", 1)]}, {"NodeResourcesFit": {"scoringStrategy": strategy, **extra}}
    )
    return scores(framework, p, state, "NodeResourcesFit")


def test_least_allocated() -> None:
    p = pod("p", cpu=1000, memory=8 * GI)
    assert _fit_scores({"type": "LeastAllocated"}, p, _score_state()) == {"half": 50, "empty": 75}


def test_most_allocated() -> None:
    p = pod("p", cpu=1000, memory=8 * GI)
    assert _fit_scores({"type": "MostAllocated"}, p, _score_state()) == {"half": 50, "empty": 25}


def test_requested_to_capacity_ratio_shape() -> None:
    strategy = {
        "type": "RequestedToCapacityRatio",
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]},
    }
    p = pod("p", cpu=1000, memory=8 * GI)
    # Utilisation 50 % / 25 % on the interpolated line 100 → 0.
    assert _fit_scores(strategy, p, _score_state()) == {"half": 50, "empty": 75}


def test_weights_and_non_zero_defaults() -> None:
    strategy = {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}
    state = _fit_state(node("a", cpu=1000, memory=1000 * MI))
    # A pod without requests is scored as 100m / 200 MiB (kube's non-zero defaults):
    # cpu (1000-100)*100/1000 = 90, memory (1000-200)*100/1000 = 80 → (90*3 + 80) / 4 = 87.
    assert _fit_scores(strategy, pod("p", cpu=0), state) == {"a": 87}


def test_gpu_pods_are_bin_packed_by_the_default_profile() -> None:
    state = _fit_state(
        node("used", gpu=8), node("fresh", gpu=8), placed=[(pod("x", requests={"nvidia.com/gpu": 4}), "used")]
    )
    from .builders import default_scheduler

    framework = default_scheduler().frameworks["berth"]
    gpu_pod = pod("g", requests={"nvidia.com/gpu": 1})
    # MostAllocated on nvidia.com/gpu: 5*100/8 = 62 vs 1*100/8 = 12.
    assert scores(framework, gpu_pod, state, "NodeResourcesFit") == {"used": 62, "fresh": 12}
    assert framework.schedule(gpu_pod, state).node == "used"
    # CPU pods keep kube's LeastAllocated spreading on cpu and memory.
    cpu_pod = pod("c", cpu=1000, memory=GI)
    assert scores(framework, cpu_pod, state, "NodeResourcesFit") == _fit_scores(
        {"type": "LeastAllocated"}, cpu_pod, state
    )


def test_balanced_allocation() -> None:
    state = _fit_state(
        node("a", cpu=4000, memory=4 * GI), node("b", cpu=4000, memory=4 * GI), placed=[(pod("x", cpu=1000), "a")]
    )
    framework = profile(
        {"preScore": ["NodeResourcesBalancedAllocation"], "score": [("NodeResourcesBalancedAllocation", 1)]}
    )
    p = pod("p", cpu=1000, memory=GI)
    # a: cpu 2000/4000 = .5, memory 1/4 = .25 → std .125 → 87; b: .25/.25 → 100.
    assert scores(framework, p, state, "NodeResourcesBalancedAllocation") == {"a": 87, "b": 100}
    # Best-effort pods (no cpu or memory request) are not balanced at all.
    assert scores(framework, pod("be", cpu=0), state, "NodeResourcesBalancedAllocation") == {}


def test_balanced_allocation_with_three_resources() -> None:
    state = _fit_state(node("a", cpu=1000, memory=1000, gpu=4))
    framework = profile(
        {"preScore": ["NodeResourcesBalancedAllocation"], "score": [("NodeResourcesBalancedAllocation", 1)]},
        {
            "NodeResourcesBalancedAllocation": {
                "resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu"}]
            }
        },
    )
    p = pod("p", cpu=500, memory=250, requests={"nvidia.com/gpu": 1})
    # fractions .5, .25, .25: mean 1/3, variance ((1/6)^2 + 2*(1/12)^2)/3 → std ≈ .1179 → 88.
    assert scores(framework, p, state, "NodeResourcesBalancedAllocation") == {"a": 88}
