"""deploy/grafana/berth.json queries only metrics that Berth's services expose: the decision, token-lag,
binder (sim backend) and inventory services run briefly as processes on a broker of the test's own,
and every metric name in the dashboard's PromQL must be declared (``# TYPE``) on one of their
``/metrics`` (histogram queries name ``<histogram>_bucket``)."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

import pytest
from berth_dev.supervisor import Supervisor

from berth.bus import ensure_topics
from berth.settings import BerthSettings

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "berth.json"
FUNCTIONS = {
    "sum",
    "rate",
    "increase",
    "histogram_quantile",
    "max",
    "min",
    "avg",
    "by",
    "le",
    "without",
    "irate",
    "count",
    "topk",
    "bottomk",
}


def queried_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    names: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r"\{[^}]*\}", "", re.sub(r'"[^"]*"', "", target["expr"]))
            expr = re.sub(r"\[[^\]]*\]", "", expr)
            expr = re.sub(r"by \([^)]*\)", "", expr)
            for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
                if word not in FUNCTIONS:
                    names.add(re.sub(r"_(bucket|sum|count)$", "", word) if word.endswith("_bucket") else word)
    return names


def declared(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            found.add(name)
            if kind == "counter":
                found.add(name + "_total" if not name.endswith("_total") else name)
    return found


def test_every_metric_the_dashboard_queries_is_on_a_running_service(
    own_kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    wanted = queried_metrics()
    assert {
        "scheduler_pending_pods",
        "scheduler_scheduling_attempt_duration_seconds",
        "berth_consumer_lag_records",
        "berth_pool_ready_replicas",
        "berth_pool_desired_replicas",
    } <= wanted, wanted
    monkeypatch.setenv("BERTH_KAFKA_BOOTSTRAP", own_kafka)
    asyncio.run(ensure_topics(BerthSettings().kafka))
    pools = tmp_path / "pools.yaml"
    pools.write_text("pools: {}\n")
    exposed: set[str] = set()
    with Supervisor(tmp_path / "logs", {"BERTH_KAFKA_BOOTSTRAP": own_kafka}) as services:
        started = [
            services.start("decision", ["run", "--pools", str(pools)]),
            services.start("token-lag", ["run", "--pools", str(pools)]),
            services.start("binder", ["run", "--backend", "sim", "--sim-url", "http://127.0.0.1:9"]),
            services.start("inventory", ["run", "--data-dir", str(tmp_path / "inventory")]),
        ]
        for service in started:
            exposed |= declared(service.metrics_port)
    missing = sorted(wanted - exposed)
    assert not missing, f"the dashboard queries metrics no service exposes: {missing}"
