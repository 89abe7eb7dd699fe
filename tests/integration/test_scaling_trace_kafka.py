"""bench.scaling --through-kafka on a slice of the Azure LLM trace: the gateway (the bench) publishes
queue-lag reports at the trace's compressed pace; token-lag, decision, binder (sim backend) and
cluster-sim run as processes on a broker of the test's own (topic names are fixed). The replicas
Berth asks for through Kafka must follow the pure simulation's within the batching delay.

Tolerance: a count through Kafka may differ from the pure run's only where the pure run had
that count within ±(one report interval, 5 s + the slowest command's latency + 1 s); the same
scale events; the same SLO-violation minutes. The slice: trace minutes 0-8 at --speed 4
(120 s of replay), x10, a 20 s model load: the pool scales up several times as the hour's
traffic ramps up.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.scaling.cluster import ClusterShape
from bench.scaling.kafka_mode import run_through_kafka
from bench.scaling.policies import PoolConfig
from bench.scaling.sim import RunConfig
from bench.scaling.trace import SHIPPED_TRACE, load_trace
from bench.scaling.trace_run import run_trace_policies, trace_scenario

pytestmark = pytest.mark.integration

TRACE = SHIPPED_TRACE


def test_the_replica_timeline_through_kafka_matches_the_pure_simulation(
    own_kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    if not TRACE.exists():
        pytest.fail(f"the shipped trace is missing: {TRACE}")
    monkeypatch.setenv("BERTH_KAFKA_BOOTSTRAP", own_kafka)
    config = RunConfig(
        pool=replace(PoolConfig(), model_load_seconds=20),
        cluster=replace(ClusterShape(), interruptions=0),
        keep_ttft_samples=True,
    )
    scene, setup = trace_scenario(load_trace(TRACE, minutes=8), scale=10, seed=42, config=config, speed=4)
    pure = run_trace_policies(scene, ("berth",))["berth"]
    assert len(pure.target_changes) >= 3, pure.target_changes  # the slice makes Berth scale

    comparison = run_through_kafka(scene, setup, pure, err=None, workdir=tmp_path)

    assert comparison["scale_pool_read_back"] >= len(pure.target_changes)
    assert comparison["latency_s_max"] < 5.0, comparison
    assert comparison["matches"], comparison
    assert [v for _, v in comparison["kafka_changes"]] == [v for _, v in comparison["pure_changes"]], comparison
    assert comparison["kafka"]["slo_violation_minutes"] == comparison["pure"]["slo_violation_minutes"]
