"""bench.engine --kube-perf: reading kube-scheduler_perf's output and the summary line (no Go build)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.engine.kube_perf import (
    GOAL_RATIO,
    WORKLOADS,
    below_threshold,
    failure_reason,
    matches,
    parse_bench_lines,
    parse_data_items,
    render_table,
    summarize,
    throughput_from,
)

BASIC, AFFINITY = WORKLOADS

# As scheduler_perf v1.34 writes it to -data-items-dir (trimmed to one latency item).
DATA_ITEMS = {
    "version": "v1",
    "dataItems": [
        {
            "data": {
                "Average": 111.96613555264521,
                "Perc50": 104.26,
                "Perc90": 212.4,
                "Perc95": 233.1,
                "Perc99": 349.7,
            },
            "unit": "pods/s",
            "labels": {
                "Metric": "SchedulingThroughput",
                "Name": "BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods/namespace-2",
                "extension_point": "not applicable",
                "plugin": "not applicable",
                "result": "not applicable",
            },
        },
        {
            "data": {"Average": 0.0344, "Perc50": 0.0507},
            "unit": "ms",
            "labels": {
                "Metric": "scheduler_framework_extension_point_duration_seconds",
                "Name": "BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods/namespace-2",
                "extension_point": "PreFilter",
                "plugin": "not applicable",
                "result": "not applicable",
            },
        },
    ],
}

BENCH_OUTPUT = """\
goos: linux
goarch: amd64
pkg: k8s.io/kubernetes/test/integration/scheduler_perf/affinity
{"level":"warn","ts":"2026-11-26T10:46:49.786546Z","logger":"etcd-client","msg":"retrying of unary invoker failed"}
BenchmarkPerfScheduling/SchedulingNodeAffinity/5000Nodes_10000Pods-2  \t       1\t         0 ns/op\t       \
140.5 SchedulingThroughput/Average\t       131.0 SchedulingThroughput/Perc50\t   2.718 runtime_seconds
PASS
"""

FAILED_OUTPUT = """\
    scheduler_perf.go:2157: scheduling succeed
    scheduler_perf.go:1480: ERROR: op 2: BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods/namespace-2: \
expected SchedulingThroughput Average to be higher: got 111.966136, want 270.000000
--- FAIL: BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods
{"level":"warn","msg":"retrying of unary invoker failed","error":"rpc error: code = Canceled"}
FAIL
"""


def test_data_items_keep_only_the_scheduling_throughput():
    items = parse_data_items(json.dumps(DATA_ITEMS))
    assert list(items) == ["BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods/namespace-2"]
    assert items[next(iter(items))]["Average"] == 111.96613555264521


def test_names_match_their_workload_only():
    name = "BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods/namespace-2"
    assert matches(BASIC, name) and not matches(AFFINITY, name)
    assert matches(BASIC, "BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods")
    assert not matches(BASIC, "BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods_QueueingHintsEnabled")


def test_bench_line_gives_every_metric_and_drops_the_gomaxprocs_suffix():
    results = parse_bench_lines(BENCH_OUTPUT)
    assert list(results) == ["BenchmarkPerfScheduling/SchedulingNodeAffinity/5000Nodes_10000Pods"]
    metrics = results["BenchmarkPerfScheduling/SchedulingNodeAffinity/5000Nodes_10000Pods"]
    assert metrics["SchedulingThroughput/Average"] == 140.5 and metrics["ns/op"] == 0.0
    assert metrics["runtime_seconds"] == 2.718


def test_throughput_prefers_the_data_items_file_then_the_bench_line(tmp_path: Path):
    path = tmp_path / "BenchmarkPerfScheduling_benchmark_misc_2026-11-26T10:48:42Z.json"
    path.write_text(json.dumps(DATA_ITEMS, indent=2))
    assert throughput_from(BASIC, BENCH_OUTPUT, [path])["Average"] == 111.96613555264521
    # the affinity workload is not in the misc file: the benchmark line answers
    assert throughput_from(AFFINITY, BENCH_OUTPUT, [path]) == {"Average": 140.5, "Perc50": 131.0}
    assert throughput_from(BASIC, FAILED_OUTPUT, []) is None
    broken = tmp_path / "BenchmarkPerfScheduling_benchmark_affinity_x.json"
    broken.write_text("{not json")
    assert throughput_from(AFFINITY, BENCH_OUTPUT, [broken])["Average"] == 140.5


def test_upstream_threshold_verdict_and_failure_lines():
    assert below_threshold(FAILED_OUTPUT) == (
        "expected SchedulingThroughput Average to be higher: got 111.966136, want 270.000000"
    )
    assert below_threshold(BENCH_OUTPUT) is None
    reason = failure_reason(FAILED_OUTPUT)
    assert "want 270.000000" in reason and "--- FAIL" in reason
    assert "retrying of unary invoker" not in reason  # etcd client warnings are noise


def _run(pods_per_s: float | None, load: float) -> dict[str, object]:
    return {"pods_per_s": pods_per_s, "loadavg_before": [load, load, load]}


def test_summary_takes_medians_and_the_ratio_per_workload():
    kube = {BASIC.name: [_run(110.0, 18.1), _run(130.0, 9.0), _run(120.0, 12.0)], AFFINITY.name: [_run(None, 20.0)]}
    berth = {
        BASIC.name: [_run(1500.0, 18.0), _run(1800.0, 9.0), _run(1200.0, 12.0)],
        AFFINITY.name: [_run(900.0, 20.0)],
    }
    summary = summarize(kube, berth)
    assert summary["kube_scheduler_perf"][BASIC.name]["pods_per_s"] == 120.0
    assert summary["berth_engine"][BASIC.name]["pods_per_s"] == 1500.0
    assert summary["ratio"][BASIC.name] == 12.5
    assert summary["berth_engine"][BASIC.name]["case"] == "scheduling-basic"
    assert summary["kube_scheduler_perf"][AFFINITY.name]["pods_per_s"] is None
    assert summary["ratio"][AFFINITY.name] is None
    assert summary["goal_ratio"] == GOAL_RATIO
    json.dumps(summary)  # the last line must serialize
    assert render_table(summary).row_count == 2


def test_workloads_mirror_the_upstream_shapes():
    assert (BASIC.topic, BASIC.case, BASIC.workload, BASIC.berth_case) == (
        "misc",
        "SchedulingBasic",
        "5000Nodes_10000Pods",
        "scheduling-basic",
    )
    assert (BASIC.nodes, BASIC.init_pods, BASIC.pods) == (5_000, 1_000, 10_000)
    assert (AFFINITY.case, AFFINITY.berth_case, AFFINITY.init_pods) == (
        "SchedulingNodeAffinity",
        "node-affinity",
        5_000,
    )
    assert BASIC.bench_regex == "^BenchmarkPerfScheduling$/^SchedulingBasic$/^5000Nodes_10000Pods$"


def test_cycle_extension_points_sum_without_bind(tmp_path: Path):
    from bench.engine.kube_perf import core_cycle_ms

    document = json.loads(json.dumps(DATA_ITEMS))
    name = "BenchmarkPerfScheduling/SchedulingBasic/5000Nodes_10000Pods/namespace-2"
    for point, average in (("Filter", 3.75), ("Score", 4.267), ("Bind", 236.2)):
        document["dataItems"].append(
            {
                "data": {"Average": average},
                "unit": "ms",
                "labels": {
                    "Metric": "scheduler_framework_extension_point_duration_seconds",
                    "Name": name,
                    "extension_point": point,
                    "plugin": "not applicable",
                    "result": "not applicable",
                },
            }
        )
    path = tmp_path / "BenchmarkPerfScheduling_benchmark_misc_x.json"
    path.write_text(json.dumps(document))
    points = core_cycle_ms(BASIC, [path])
    assert points == {"PreFilter": 0.034, "Filter": 3.75, "Score": 4.267, "total": 8.051}
    assert core_cycle_ms(AFFINITY, [path]) is None
