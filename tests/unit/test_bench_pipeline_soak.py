"""The pipeline soak's arithmetic: reading /proc, consumer lag, least-squares flatness verdicts,
and the stand-in cluster's view of a bound pod."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from berth.schemas import PodInfo, PodPlacement

from bench.pipeline.soak import PodFactory, bound_pod
from bench.pipeline.soak_stats import (
    group_lag,
    lag_verdict,
    least_squares_slope,
    parent_pid,
    parse_duration,
    process_tree,
    rss_kib,
    rss_verdict,
    second_half,
    soak_rate,
    tree_rss_mib,
)

STATUS = """Name:\tberth
Umask:\t0022
State:\tS (sleeping)
Pid:\t4242
VmPeak:\t  812344 kB
VmRSS:\t  153600 kB
RssAnon:\t  120000 kB
Threads:\t7
"""


def test_rss_is_read_from_vmrss_in_kib_and_a_zombie_has_none():
    assert rss_kib(STATUS) == 153600
    assert rss_kib("Name:\tdefunct\nState:\tZ (zombie)\n") == 0


def test_parent_pid_counts_fields_after_the_last_parenthesis_of_the_command_name():
    assert parent_pid("4242 (berth) S 17 4242 4242 0 -1") == 17
    assert parent_pid("99 (odd ) name) (x) R 1234 99 99 0 -1") == 1234


def test_a_process_tree_holds_the_root_and_every_descendant_only():
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert process_tree(10, parents) == {10, 11, 12, 13}
    assert process_tree(21, parents) == {21}


def test_tree_rss_adds_up_a_service_and_its_children_from_a_proc_directory(tmp_path):
    for pid, parent, kib in ((100, 1, 10240), (101, 100, 5120), (102, 101, 1024), (200, 1, 2048)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (p) S {parent} {pid} {pid} 0")
        (tmp_path / str(pid) / "status").write_text(f"Name:\tp\nVmRSS:\t{kib} kB\n")
    (tmp_path / "self").mkdir()  # not a pid: ignored
    assert tree_rss_mib({"svc": 100, "other": 200, "gone": 999}, proc=tmp_path) == {
        "svc": 16.0,
        "other": 2.0,
        "gone": 0.0,
    }


def test_group_lag_sums_end_minus_committed_and_never_goes_negative():
    committed = {("inputs", 0): 90, ("inputs", 1): 50, ("commands", 0): 10}
    ends = {("inputs", 0): 100, ("inputs", 1): 50, ("commands", 0): 7}
    assert group_lag(committed, ends) == 10


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("20s", 20), ("1.5h", 5400), ("45", 45)])
def test_durations_read_with_or_without_a_unit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30x", "-5m", "0s", "m"])
def test_malformed_or_empty_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_least_squares_slope_of_a_line_and_of_degenerate_inputs():
    assert least_squares_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert least_squares_slope([0, 1, 2, 3], [5, 4, 5, 4]) == pytest.approx(-0.2)
    assert least_squares_slope([5], [1]) == 0.0
    assert least_squares_slope([2, 2], [1, 9]) == 0.0


def test_the_second_half_is_the_samples_from_the_middle_of_the_time_span_on():
    assert second_half([0, 10, 20, 30, 40], [1, 2, 3, 4, 5]) == ([20, 30, 40], [3, 4, 5])
    assert second_half([], []) == ([], [])


def test_rss_that_rises_in_the_first_half_then_holds_is_flat():
    times = [i * 10.0 for i in range(181)]  # 30 minutes
    rss = [100 + min(t, 600) / 10 for t in times]  # +60 MiB of warm-up, then level
    verdict = rss_verdict("decision-0", times, rss)
    assert verdict.flat and verdict.slope == pytest.approx(0.0)
    assert (verdict.start, verdict.end) == (100, 160)


def test_rss_growing_past_the_threshold_in_the_second_half_is_not_flat():
    times = [i * 10.0 for i in range(181)]
    rss = [200 + t / 3600 * 30 for t in times]  # 30 MiB/h
    verdict = rss_verdict("inventory", times, rss)
    assert verdict.slope == pytest.approx(30.0)
    assert not verdict.flat and verdict.threshold == 20.0


def test_lag_is_judged_against_one_percent_of_the_groups_input_rate():
    times = [i * 10.0 for i in range(61)]
    ends = [t * 500 for t in times]  # 30,000 records/min in: threshold 300/min
    steady = [200 + (i % 3) * 50 for i in range(61)]
    falling_behind = [t / 60 * 600 for t in times]  # 600/min more every minute
    assert lag_verdict("berth-decision", times, steady, ends).flat
    behind = lag_verdict("berth-decision", times, falling_behind, ends)
    assert not behind.flat
    assert behind.threshold == pytest.approx(300.0) and behind.slope == pytest.approx(600.0)


def test_an_idle_groups_lag_is_held_to_the_floor():
    times = [i * 10.0 for i in range(61)]
    verdict = lag_verdict("idle", times, [0] * 30 + [5] * 31, [1000] * 61)
    assert verdict.threshold == 60.0 and verdict.flat


def _pod(**changes):
    pod = PodInfo(
        uid="u-1",
        namespace="bench",
        name="bench-pod-000001",
        scheduler_name="berth",
        requests={"cpu": 1000, "nvidia.com/gpu": 2},
        creation_time=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return pod.model_copy(update=changes)


def test_a_bound_pod_is_on_its_node_running_and_holds_the_placed_devices():
    placement = PodPlacement(pod_uid="u-1", namespace="bench", name="bench-pod-000001", node="n-7", gpu_devices=(3, 1))
    pod = bound_pod(_pod(), placement)
    assert (pod.node_name, pod.phase, pod.gpu_devices) == ("n-7", "Running", (1, 3))
    assert pod.annotations["berth.io/gpu-devices"] == "3,1"
    assert "berth.io/gpu-milli" not in pod.annotations


def test_a_fractional_pod_bound_carries_its_share_of_the_device():
    placement = PodPlacement(
        pod_uid="u-1", namespace="bench", name="bench-pod-000001", node="n-2", gpu_devices=(0,), gpu_milli=500
    )
    assert bound_pod(_pod(gpu_fraction_milli=500), placement).annotations["berth.io/gpu-milli"] == "500"


def test_the_pod_factory_reuses_templates_under_new_unique_uids_and_names():
    factory = PodFactory([_pod(), _pod(uid="u-2", name="bench-pod-000002")], seed=1)
    pods = factory.take(5)
    assert len({p.uid for p in pods}) == 5 and len({p.name for p in pods}) == 5
    assert [p.requests for p in pods] == [_pod().requests] * 5
    assert [p.uid for p in PodFactory(factory.templates, seed=1).take(5)] == [p.uid for p in pods]


def test_the_soak_rate_is_half_the_highest_step_that_kept_up():
    steps = [
        {"achieved_pods_per_s": 99.7, "sustained": True},
        {"achieved_pods_per_s": 197.6, "sustained": True},
        {"achieved_pods_per_s": 283.6, "sustained": False},  # a backlog draining, not a steady rate
    ]
    assert soak_rate(steps) == (98.8, 197.6)
    assert soak_rate([{**s, "sustained": False} for s in steps]) == (141.8, 283.6)
