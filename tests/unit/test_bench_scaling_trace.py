"""bench.scaling --trace: reading a trace (errors name the column or the line), --scale and --speed,
the prefill/decode serving model, and the goal on the shipped trace."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.scaling.cluster import ClusterShape
from bench.scaling.sim import RunConfig
from bench.scaling.trace import SHIPPED_TRACE, TraceError, load_trace, scaled_workload
from bench.scaling.trace_run import run_trace_policies, trace_scenario

ROWS = [
    "TIMESTAMP,ContextTokens,GeneratedTokens",
    "2023-11-16 18:15:46.6805900,374,44",
    "2023-11-16 18:15:50.9951690,396,109",
    "2023-11-16 18:16:51.2224670,879,55",
]


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_trace_is_read_from_its_first_minute(tmp_path: Path):
    trace = load_trace(write(tmp_path, ROWS))
    assert trace.requests == 3
    assert np.allclose(trace.arrivals, [46.68059, 50.995169, 111.222467])
    assert trace.prompt_tokens.tolist() == [374, 396, 879] and trace.generated_tokens.tolist() == [44, 109, 55]


def test_a_missing_column_is_named(tmp_path: Path):
    with pytest.raises(TraceError, match="missing column GeneratedTokens"):
        load_trace(write(tmp_path, ["TIMESTAMP,ContextTokens", "2023-11-16 18:15:46,374"]))


@pytest.mark.parametrize(
    "row, message",
    [
        ("2023-11-16 18:15:47,abc,3", "line 3: ContextTokens 'abc' is not a non-negative integer"),
        ("yesterday,1,3", "line 3: TIMESTAMP 'yesterday'"),
        ("2023-11-16 18:15:47,1,-3", "line 3: GeneratedTokens '-3'"),
    ],
)
def test_a_bad_row_is_named_by_its_line(tmp_path: Path, row: str, message: str):
    with pytest.raises(TraceError, match=message):
        load_trace(write(tmp_path, [*ROWS[:2], row]))


def test_scale_multiplies_the_requests_and_speed_compresses_the_clock():
    trace = load_trace(SHIPPED_TRACE, minutes=10)
    once = scaled_workload(trace, 1.0, 42)
    assert once.requests == trace.requests
    assert scaled_workload(trace, 3.0, 42).requests == 3 * trace.requests
    assert abs(scaled_workload(trace, 2.5, 42).requests / trace.requests - 2.5) < 0.02
    fast = scaled_workload(trace, 1.0, 42, speed=4)
    assert fast.shape.duration_s == 180  # 600 s / 4, rounded up to whole minutes
    assert np.allclose(fast.arrivals, once.arrivals / 4)


def test_ttft_is_the_wait_plus_the_prefill():
    config = RunConfig(cluster=replace(ClusterShape(), interruptions=0), keep_ttft_samples=True)
    scene, setup = trace_scenario(load_trace(SHIPPED_TRACE, minutes=10), scale=1, seed=42, config=config)
    static = run_trace_policies(scene, ("static",))["static"]
    # A pool with room: nobody waits, so the median TTFT is the median prompt's prefill (24,000 tokens/s).
    median_prefill = float(np.median(scene.workload.prompt_tokens)) / 24_000
    assert static.requests_over_slo == 0
    assert abs(static.ttft_p50_s - median_prefill) < 0.015
    assert setup.tokens_per_second_per_replica == 2000


@pytest.mark.parametrize("scale", [10, 20])
def test_the_goal_on_the_shipped_trace(scale: int):
    config = RunConfig(cluster=replace(ClusterShape(), interruptions=0))
    scene, _ = trace_scenario(load_trace(SHIPPED_TRACE), scale=scale, seed=42, config=config)
    results = run_trace_policies(scene, ("berth", "keda", "dynamo", "static"))
    fewest = min(r.slo_violation_minutes for r in results.values())
    assert results["berth"].slo_violation_minutes == fewest
    assert results["berth"].gpu_hours <= results["keda"].gpu_hours
