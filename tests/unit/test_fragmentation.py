"""Unit tests for berth.core.gpu.fragmentation (pure, no data needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.gpu.fragmentation import (
    BERTH_MEASURE,
    FGD_MEASURE,
    INFEASIBLE,
    Measure,
    PodRequest,
    TargetWorkload,
    best_device_choice,
    device_increase_batch,
    exclusive_devices,
    fragmentation_batch,
    model_matches,
    node_fragmentation,
    score_placements,
    weighted_fragmentation_batch,
)

FILL_ONLY = Measure(single=0, fill=1)
ALL_MEASURES = (FGD_MEASURE, FILL_ONLY, BERTH_MEASURE)

# Three pods of "half a GPU + 1 core" for every pod of "one GPU + 2 cores".
HALF = PodRequest(cpu_milli=1000, num_gpu=1, gpu_milli=500)
WHOLE = PodRequest(cpu_milli=2000, num_gpu=1, gpu_milli=1000)
TWO_SHAPES = TargetWorkload.from_requests([HALF, HALF, HALF, WHOLE])


# --- hand-computed cases --------------------------------------------------------------


@pytest.mark.parametrize("measure", ALL_MEASURES)
def test_node_without_idle_gpu_has_no_fragmentation(measure):
    assert node_fragmentation([0, 0, 0, 0], 64_000, "T4", TWO_SHAPES, measure) == 0.0
    assert node_fragmentation([], 64_000, None, TWO_SHAPES, measure) == 0.0


@pytest.mark.parametrize("measure", ALL_MEASURES)
def test_idle_node_is_not_fragmented_when_every_shape_packs_it(measure):
    assert node_fragmentation([1000, 1000], 64_000, "T4", TWO_SHAPES, measure) == 0.0


@pytest.mark.parametrize("measure", ALL_MEASURES)
def test_cpu_only_shapes_see_all_idle_gpu_as_fragment(measure):
    cpu_pod = PodRequest(cpu_milli=4000)
    workload = TargetWorkload.from_requests([HALF, cpu_pod])  # popularity 1/2 each
    assert node_fragmentation([1000, 1000], 64_000, "T4", workload, measure) == pytest.approx(1000.0)


@pytest.mark.parametrize(
    ("free", "cpu", "paper", "fill"),
    [
        # 300 free on one device: too small for both shapes -> 300 for each.
        ([300, 1000], 64_000, 300.0, 300.0),
        # 900 free: the half shape fits (paper: nothing stranded for it) but only once, so
        # the fill measure strands 400 for it; the whole shape strands 900 in both.
        # paper = (3*0 + 1*900)/4, fill = (3*400 + 1*900)/4
        ([900], 64_000, 225.0, 525.0),
        # Eight idle GPUs but 3 cores: each shape fits once (paper: 0), yet the CPU allows
        # three halves (1500 milli) or one whole GPU: fill = (3*6500 + 1*7000)/4.
        ([1000] * 8, 3000, 0.0, 6625.0),
        # No CPU at all: nothing fits, everything idle is fragment.
        ([1000, 1000], 0, 2000.0, 2000.0),
    ],
)
def test_known_small_cases(free, cpu, paper, fill):
    assert node_fragmentation(free, cpu, "T4", TWO_SHAPES, FGD_MEASURE) == pytest.approx(paper)
    assert node_fragmentation(free, cpu, "T4", TWO_SHAPES, FILL_ONLY) == pytest.approx(fill)
    blended = (BERTH_MEASURE.single * paper + BERTH_MEASURE.fill * fill) / BERTH_MEASURE.total
    assert node_fragmentation(free, cpu, "T4", TWO_SHAPES, BERTH_MEASURE) == pytest.approx(blended)


def test_gpu_model_constraints_make_idle_gpus_fragment():
    a100_only = PodRequest(cpu_milli=1000, num_gpu=1, gpu_milli=1000, allowed_models=frozenset({"A100"}))
    workload = TargetWorkload.from_requests([a100_only])
    assert node_fragmentation([1000, 1000], 64_000, "T4", workload, FGD_MEASURE) == 2000.0
    assert node_fragmentation([1000, 1000], 64_000, "A100", workload, FGD_MEASURE) == 0.0
    assert model_matches(["T4", "A100", None], frozenset({"A100"})).tolist() == [False, True, False]
    assert model_matches(["T4", None], frozenset()).tolist() == [True, True]


def test_best_device_minimises_fragmentation_increase():
    # Devices with 300, 600, 1000 free; a half pod.  On device 1 it leaves 100 (the paper
    # measure drops from 1800/4 to 1600/4 weighted milli); on device 2 it would break a whole GPU.
    choice = best_device_choice([300, 600, 1000], 64_000, "T4", HALF, TWO_SHAPES, FGD_MEASURE)
    assert choice is not None
    assert choice.devices == (1,)
    assert choice.increase_weighted == -200
    assert choice.increase_milli == pytest.approx(-50.0)


def test_device_ties_go_to_the_tightest_then_lowest_index():
    quarter = PodRequest(cpu_milli=100, num_gpu=1, gpu_milli=250)
    workload = TargetWorkload.from_requests([quarter])  # any leftover multiple of 250 is fine
    assert best_device_choice([1000, 1000, 1000], 8000, None, quarter, workload).devices == (0,)
    assert best_device_choice([1000, 500, 500], 8000, None, quarter, workload).devices == (1,)


def test_whole_gpu_pods_take_the_lowest_idle_devices():
    two = PodRequest(cpu_milli=1000, num_gpu=2, gpu_milli=1000)
    choice = best_device_choice([500, 1000, 0, 1000, 1000], 8000, None, two, TWO_SHAPES)
    assert choice is not None and choice.devices == (1, 3)
    assert best_device_choice([500, 1000, 0], 8000, None, two, TWO_SHAPES) is None
    assert exclusive_devices([1000, 999, 1000], 3) == ()


def test_pod_that_does_not_fit_is_infeasible():
    big_cpu = PodRequest(cpu_milli=10_000, num_gpu=1, gpu_milli=500)
    assert best_device_choice([1000], 9_999, None, big_cpu, TWO_SHAPES) is None
    restricted = PodRequest(cpu_milli=1, num_gpu=1, gpu_milli=500, allowed_models=frozenset({"A10"}))
    assert best_device_choice([1000], 9_999, "T4", restricted, TWO_SHAPES) is None
    scores = score_placements(np.array([[400, 300]]), [8000], TWO_SHAPES.model_access(["T4"]), HALF, TWO_SHAPES)
    assert not scores.fits[0] and scores.increase[0] == INFEASIBLE and scores.device[0] == -1


# --- workload construction and validation --------------------------------------------------


def test_target_workload_keeps_the_popular_shapes_in_a_stable_order():
    rare = PodRequest(cpu_milli=7, num_gpu=8, gpu_milli=1000)
    pods = [HALF] * 60 + [WHOLE] * 35 + [rare] * 5
    first = TargetWorkload.from_requests(pods, coverage=0.95)
    again = TargetWorkload.from_requests(list(reversed(pods)), coverage=0.95)
    assert first.size == 2 and first.weight.tolist() == [60, 35]
    assert again.gpu_milli.tolist() == first.gpu_milli.tolist() == [500, 1000]
    assert TargetWorkload.from_requests(pods, coverage=1.0).size == 3
    assert first.popularity.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        first.weight[0] = 1  # read-only


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(cpu_milli=-1),
        dict(cpu_milli=1, num_gpu=0, gpu_milli=10),
        dict(cpu_milli=1, num_gpu=1, gpu_milli=0),
        dict(cpu_milli=1, num_gpu=1, gpu_milli=1001),
        dict(cpu_milli=1, num_gpu=2, gpu_milli=500),
    ],
)
def test_invalid_pod_requests_are_rejected(kwargs):
    with pytest.raises(ValueError):
        PodRequest(**kwargs)


def test_measure_weights_must_be_meaningful():
    with pytest.raises(ValueError):
        Measure(0, 0)
    with pytest.raises(ValueError):
        Measure(-1, 2)


# --- the incremental formulas agree with recomputing from scratch --------------------------

free_rows = st.lists(st.integers(0, 1000), min_size=1, max_size=4)
shapes = st.one_of(
    st.builds(PodRequest, st.integers(0, 8000), st.just(1), st.integers(1, 999)),
    st.builds(PodRequest, st.integers(0, 8000), st.sampled_from([1, 2]), st.just(1000)),
    st.builds(PodRequest, st.integers(1, 8000)),
)


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(st.tuples(free_rows, st.integers(0, 20_000)), min_size=1, max_size=5),
    workload_pods=st.lists(shapes, min_size=1, max_size=6),
    pod=shapes,
    measure=st.sampled_from(ALL_MEASURES),
)
def test_placement_scores_match_brute_force(nodes, workload_pods, pod, measure):
    width = max(len(f) for f, _ in nodes)
    free = np.array([f + [0] * (width - len(f)) for f, _ in nodes], dtype=np.int64)
    cpu = np.array([c for _, c in nodes], dtype=np.int64)
    workload = TargetWorkload.from_requests(workload_pods, coverage=1.0)
    access = workload.model_access([None] * len(nodes))
    free_before, cpu_before = free.copy(), cpu.copy()

    before = weighted_fragmentation_batch(free, cpu, access, workload, measure)
    scores = score_placements(free, cpu, access, pod, workload, measure=measure)
    assert np.array_equal(free, free_before) and np.array_equal(cpu, cpu_before)  # inputs untouched

    for n in range(len(nodes)):
        if pod.is_fractional:
            candidates = [(d,) for d in range(width) if free[n, d] >= pod.gpu_milli]
        elif pod.num_gpu:
            taken = exclusive_devices(free[n], pod.num_gpu)
            candidates = [taken] if taken else []
        else:
            candidates = [()]
        if cpu[n] < pod.cpu_milli:
            candidates = []
        assert bool(scores.fits[n]) == bool(candidates)
        if not candidates:
            continue
        increases = {}
        for devices in candidates:
            after = free[n].copy()
            after[list(devices)] -= pod.gpu_milli
            value = weighted_fragmentation_batch(
                after[None, :], [cpu[n] - pod.cpu_milli], access[:1], workload, measure
            )
            increases[devices] = int(value[0] - before[n])
        assert int(scores.increase[n]) == min(increases.values())
        if pod.is_fractional:
            assert increases[(int(scores.device[n]),)] == int(scores.increase[n])
            per_device = device_increase_batch(free, cpu, access, pod, workload, measure=measure)[n]
            for (d,), inc in increases.items():
                assert per_device[d] == inc


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(st.tuples(free_rows, st.integers(0, 20_000)), min_size=1, max_size=6))
def test_fragmentation_is_bounded_by_idle_gpu_and_row_order_free(nodes):
    width = max(len(f) for f, _ in nodes)
    free = np.array([f + [0] * (width - len(f)) for f, _ in nodes], dtype=np.int64)
    cpu = np.array([c for _, c in nodes], dtype=np.int64)
    access = TWO_SHAPES.model_access([None] * len(nodes))
    frag = fragmentation_batch(free, cpu, access, TWO_SHAPES)
    assert (frag >= 0).all() and (frag <= free.sum(axis=1) + 1e-9).all()
    order = np.arange(len(nodes))[::-1]
    assert np.array_equal(fragmentation_batch(free[order], cpu[order], access[order], TWO_SHAPES), frag[order])
