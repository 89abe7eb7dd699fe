"""kube-scheduler's metrics, scraped from a running decision service on a real broker.

The service runs as its own process (``berth decision run --metrics-port``); the test writes a
cell's inputs (two GPU nodes, pods that fit, one that fits nowhere, one that preempts) straight
onto the cell's partition and reads ``/metrics`` until every series is there. Names, label sets
and bucket bounds are checked against the table below, which is kube-scheduler v1.34's
(pkg/scheduler/metrics/metrics.go): its dashboards and alerts must work unchanged.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from berth.schemas import NodeObserved, PodInfo, PodObserved
from berth.schemas.envelope import encode
from berth.schemas.samples import T0, h100_node
from berth.schemas.topics import DECISION_INPUTS
from berth_dev.devstack.procs import free_ports
from prometheus_client.parser import text_string_to_metric_families

from berth.bus import EventProducer, ensure_topics
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration

BERTH = str(Path(sys.executable).with_name("berth"))


def _exponential(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


HISTOGRAMS = {
    # name: (label names, upper bounds without +Inf)
    "scheduler_scheduling_attempt_duration_seconds": ({"result", "profile"}, _exponential(0.001, 2, 15)),
    "scheduler_pod_scheduling_sli_duration_seconds": ({"attempts"}, _exponential(0.01, 2, 20)),
    "scheduler_framework_extension_point_duration_seconds": (
        {"extension_point", "status", "profile"},
        _exponential(0.0001, 2, 12),
    ),
    "scheduler_plugin_execution_duration_seconds": (
        {"plugin", "extension_point", "status"},
        _exponential(0.00001, 1.5, 20),
    ),
    "scheduler_preemption_victims": (set(), _exponential(1, 2, 7)),
}
COUNTERS = {
    "scheduler_schedule_attempts_total": {"result", "profile"},
    "scheduler_preemption_attempts_total": set(),
}
GAUGES = {"scheduler_pending_pods": {"queue"}}


def _pod(name: str, *, gpus: int, priority: int = 0) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        priority=priority,
        requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": gpus},
        creation_time=T0,
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
    )


def _inputs() -> list[object]:
    nodes = [NodeObserved(node=h100_node(f"gpu-{i}"), observed_at=T0) for i in range(2)]
    pods = [
        _pod("fill-0", gpus=8),
        _pod("fill-1", gpus=8),
        _pod("too-big", gpus=16),
        _pod("urgent", gpus=8, priority=1000),
    ]
    return [*nodes, *(PodObserved(pod=p, observed_at=T0) for p in pods)]


async def _publish(bootstrap: str) -> None:
    kafka = KafkaSettings(bootstrap=bootstrap)
    await ensure_topics(kafka)
    async with EventProducer(kafka, source="tests/metrics") as producer:
        for event in _inputs():
            record = encode(event, source="tests/metrics")
            await (
                await producer.raw.send(
                    DECISION_INPUTS.name, record.value, key=record.key, headers=record.headers, partition=0
                )
            )


def _scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


@pytest.fixture
def decision_service(own_kafka: str, tmp_path: Path) -> Iterator[str]:
    [port] = free_ports(1)
    log = (tmp_path / "decision.log").open("w")
    process = subprocess.Popen(
        [BERTH, "decision", "run", "--kafka", own_kafka, "--metrics-port", str(port)],
        env={**os.environ, "BERTH_LOG_FORMAT": "console"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def test_a_running_decision_service_exports_kube_schedulers_metrics(
    own_kafka: str, decision_service: str, tmp_path: Path
) -> None:
    asyncio.run(_publish(own_kafka))
    deadline = time.monotonic() + 120
    families: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            families = _scrape(decision_service)
        except OSError:
            time.sleep(0.5)
            continue
        # prometheus_client strips _total from a counter family's name.
        attempts = families.get("scheduler_schedule_attempts")
        scheduled = (
            sum(
                s.value
                for s in attempts.samples
                if s.name == "scheduler_schedule_attempts_total" and s.labels.get("result") == "scheduled"
            )
            if attempts
            else 0
        )
        preempted = families.get("scheduler_preemption_victims")
        if (
            scheduled >= 3
            and preempted is not None
            and any(s.name.endswith("_count") and s.value >= 1 for s in preempted.samples)
        ):
            break
        time.sleep(0.5)
    else:
        log = (tmp_path / "decision.log").read_text()[-3000:]
        raise AssertionError(f"the service did not schedule 3 pods and preempt within 120 s:\n{log}")

    for name, (labels, bounds) in HISTOGRAMS.items():
        family = families[name]
        assert family.type == "histogram", name
        buckets = [s for s in family.samples if s.name == f"{name}_bucket"]
        assert buckets, f"{name}: no series"
        for sample in buckets:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)
        first = {tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")) for s in buckets}.pop()
        les = [
            float(s.labels["le"])
            for s in buckets
            if tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")) == first
        ]
        assert les[:-1] == pytest.approx(bounds, rel=1e-9) and les[-1] == float("inf"), name
    for name, labels in COUNTERS.items():
        family = families[name.removesuffix("_total")]
        assert family.type == "counter", name
        totals = [s for s in family.samples if s.name == name]
        assert totals and all(set(s.labels) == labels for s in totals), (name, totals)
    for name, labels in GAUGES.items():
        samples = families[name].samples
        assert samples and all(set(s.labels) == labels for s in samples), name
        assert {"active", "backoff", "unschedulable"} <= {s.labels["queue"] for s in samples}

    def values(name: str, sample: str, **labels: str) -> list[float]:
        return [
            s.value
            for s in families[name].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    # Per pod, not per input: 4 pods → 3 placed (urgent by preempting one filler), too-big not.
    assert (
        sum(
            values(
                "scheduler_schedule_attempts", "scheduler_schedule_attempts_total", result="scheduled", profile="berth"
            )
        )
        == 3
    )
    assert (
        sum(
            values(
                "scheduler_schedule_attempts",
                "scheduler_schedule_attempts_total",
                result="unschedulable",
                profile="berth",
            )
        )
        >= 1
    )
    assert sum(values("scheduler_preemption_victims", "scheduler_preemption_victims_count")) == 1
    assert sum(values("scheduler_preemption_victims", "scheduler_preemption_victims_sum")) == 1
    assert sum(values("scheduler_preemption_attempts", "scheduler_preemption_attempts_total")) >= 2
    assert (
        sum(
            values(
                "scheduler_pod_scheduling_sli_duration_seconds", "scheduler_pod_scheduling_sli_duration_seconds_count"
            )
        )
        == 3
    )
    points = {
        s.labels["extension_point"] for s in families["scheduler_framework_extension_point_duration_seconds"].samples
    }
    assert {"PreFilter", "PreScore", "Score", "Reserve", "Permit", "PostFilter"} <= points
    assert values(
        "scheduler_framework_extension_point_duration_seconds",
        "scheduler_framework_extension_point_duration_seconds_count",
        extension_point="PostFilter",
        status="Unschedulable",
        profile="berth",
    )
