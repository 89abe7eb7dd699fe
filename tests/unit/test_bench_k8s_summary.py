"""bench.k8s's JSON line: the per-scheduler figures, in the order the issue gives them."""

from __future__ import annotations

from bench.k8s.__main__ import RunResult, per_scheduler_figures


def test_figures_side_by_side_and_none_for_a_scheduler_not_run():
    berth = RunResult(
        "berth",
        10,
        bound=9,
        pods_per_s=4.5,
        gpu_allocation=0.9,
        stranded_gpus=0,
        marked_unschedulable=1,
        settled_seconds=2.25,
        cpu_ms_per_pod={"decision": 1.5, "kafka": 0.5},
    )
    line = per_scheduler_figures(10, {"berth": berth})
    assert list(line)[:5] == [
        "pods",
        "berth_bound",
        "kube_scheduler_bound",
        "berth_pods_per_s",
        "kube_scheduler_pods_per_s",
    ]
    assert (line["berth_bound"], line["berth_gpu_allocation"], line["berth_settled_s"]) == (9, 0.9, 2.25)
    assert line["berth_marked_unschedulable"] == 1 and line["berth_stranded_gpus"] == 0
    assert all(line[key] is None for key in line if key.startswith("kube_scheduler_"))
    assert len(line) == 1 + 2 * 9
    assert line["berth_bind_latency_p99_s"] is None
    assert line["berth_cpu_ms_per_pod"] == {"decision": 1.5, "kafka": 0.5}


def test_bind_latencies_are_nearest_rank_over_the_bound_pods():
    from bench.k8s.__main__ import bind_latencies

    created = {f"p{i}": 10.0 + i for i in range(100)}
    bound = {f"p{i}": 10.0 + i + (i + 1) / 100 for i in range(100)}  # delays 0.01 .. 1.00 s
    bound["stray"] = 50.0  # not created by the run: ignored
    assert bind_latencies(created, bound) == (0.5, 0.99)
    assert bind_latencies(created, {}) == (None, None)
    assert bind_latencies({"a": 5.0}, {"a": 4.9}) == (0.0, 0.0)


def test_counter_total_sums_a_counter_over_its_labels_and_nothing_else():
    from bench.k8s.__main__ import counter_total

    text = "\n".join(
        [
            "# HELP berth_pods_handed_over_total Pods handed over.",
            "# TYPE berth_pods_handed_over_total counter",
            'berth_pods_handed_over_total{cell="0"} 12.0',
            'berth_pods_handed_over_total{cell="1"} 3.0',
            'berth_pods_handed_over_created{cell="0"} 1.7e+09',
            "berth_pods_handed_over_total_other 99.0",
        ]
    )
    assert counter_total(text, "berth_pods_handed_over_total") == 15
    assert counter_total("", "berth_pods_handed_over_total") == 0
