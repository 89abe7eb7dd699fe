"""Postgres down for 30 s mid-stream: scheduling does not wait for the audit store, and the audit
catches up afterwards, writing every decision exactly once (issue 15, item 2; docs/reliability.md).

The stack: a Postgres server of this module's own (so stopping it disturbs no other test), a
Kafka broker of its own, and the simulated pipeline as processes (:mod:`tests.faults_kit`). Once a
fifth of the pods arrived the test stops Postgres (fast shutdown: connections are cut), keeps it
down for 30 s, and starts it again on the same data and port.

While it is down: the simulator keeps receiving verdicts (decisions flow: Kafka is the log), the
audit service stays up, says so in one warning line, and its ``berth_audit_database_up`` gauge
reads 0. Afterwards: it says it is back, counted its retries, and the invariants of
:mod:`tests.faults_kit` hold — in particular the decisions in Postgres are exactly those on Kafka,
once each, and replay without a mismatch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from berth.services.audit import db
from berth_dev.devstack.postgres import PostgresProcess
from berth_dev.devstack.scratch import empty_kafka
from berth_dev.supervisor import Supervisor

from berth.bus import ensure_topics
from berth.settings import BerthSettings
from tests.faults_kit import drain_and_check, log_lines, metric_value, scrape, start_sim_pipeline, summary

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

MAX_PODS = 200
STREAM_S = 90.0
"""The pods arrive over 90 s; the outage is 30 s of it."""
OUTAGE_S = 30.0
UNREACHABLE = "audit database unreachable"
BACK = "audit database back"


@pytest.fixture(scope="module")
def postgres(database_url: str) -> Iterator[PostgresProcess]:
    """A Postgres of this module's own, to stop and start (``database_url`` settles availability)."""
    with PostgresProcess() as server:
        yield server


@pytest.fixture(scope="module")
def module_kafka(kafka_bootstrap: str) -> Iterator[str]:
    with empty_kafka() as bootstrap:
        yield bootstrap


def test_postgres_down_30_s_decisions_flow_and_the_audit_catches_up_exactly_once(
    postgres: PostgresProcess, module_kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env = {
        "BERTH_KAFKA_BOOTSTRAP": module_kafka,
        "BERTH_DATABASE_URL": postgres.url,
        "BERTH_LOG_LEVEL": "info",
        "BERTH_LOG_FORMAT": "json",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = BerthSettings()
    db.upgrade(settings.database)
    asyncio.run(ensure_topics(settings.kafka))

    with Supervisor(tmp_path / "logs", env) as services:
        pipeline = start_sim_pipeline(services, settings, tmp_path, max_pods=MAX_PODS, stream_s=STREAM_S)
        audit = services.services["audit"]
        assert metric_value(scrape(audit.metrics_port), "berth_audit_database_up") == 1.0
        before = pipeline.wait_until(
            lambda s: pipeline.arrived_fraction(s) >= 0.2 and s["decisions_seen"] > 0,
            "a fifth of the pods arrived and decided",
            timeout_s=90,
        )
        postgres.stop_server()
        assert not postgres.is_answering()
        down_at = time.monotonic()
        # Down: scheduling goes on, the audit waits for Postgres without dying or flooding its log.
        gauge = None
        while time.monotonic() - down_at < OUTAGE_S:
            services.check_alive()
            gauge = metric_value(scrape(audit.metrics_port), "berth_audit_database_up")
            time.sleep(1.0)
        during = pipeline.status()
        assert during is not None
        assert during["decisions_seen"] > before["decisions_seen"], (before["decisions_seen"], during["decisions_seen"])
        assert during["pods"]["bound_total"] > before["pods"]["bound_total"]
        assert gauge == 0.0, "berth_audit_database_up must read 0 while Postgres is down"
        assert len(log_lines(audit.log_path, UNREACHABLE)) == 1, log_lines(audit.log_path, UNREACHABLE)
        assert log_lines(audit.log_path, BACK) == []
        assert during["pods"]["arrived"] < MAX_PODS, "Postgres must come back while pods still arrive"
        postgres.start_server()
        # Back: the audit says so once, and catches up.
        deadline = time.monotonic() + 60
        while not log_lines(audit.log_path, BACK):
            services.check_alive()
            assert time.monotonic() < deadline, "the audit did not reconnect within 60 s"
            time.sleep(0.5)
        metrics = scrape(audit.metrics_port)
        assert metric_value(metrics, "berth_audit_database_up") == 1.0
        retries = metric_value(metrics, "berth_audit_write_retries_total") or 0
        assert retries >= 1
        pipeline.wait_all_decided(timeout_s=120)
        verdict = drain_and_check(pipeline, min_bound=MAX_PODS // 2)
        assert len(log_lines(audit.log_path, UNREACHABLE)) == 1
        assert len(log_lines(audit.log_path, BACK)) == 1
    print(
        "\n"
        + summary(
            verdict,
            outage_s=OUTAGE_S,
            audit_retries=int(retries),
            decisions_during_outage=during["decisions_seen"] - before["decisions_seen"],
        )
    )
