"""Three brokers, one lost: Berth keeps scheduling through a kill -9 of the busiest Kafka broker
and a rolling restart of all three, and loses nothing (issue 15, item 1; docs/reliability.md).

The stack: a 3-broker KRaft cluster of its own (:class:`~berth_dev.devstack.kafka.KafkaCluster`:
every topic replicated 3 times with ``min.insync.replicas=2``), a fresh database on the session's
Postgres, and the simulated pipeline as processes (:mod:`tests.faults_kit`: audit, inventory,
token-lag, decision, ``binder --backend sim`` and ``cluster-sim`` playing demo pods at a steady
rate). Every producer is ``acks=all``; the decision service writes each cell's outputs in one
Kafka transaction.

The run: once a fifth of the pods arrived, kill -9 the broker leading the most records of the
pipeline's topics, let the stream go on without it for a while, restart it on its own data; once
every partition is back in sync, restart the three brokers one by one (controlled shutdown, start,
wait until in sync). The pods keep arriving throughout. At the end: the invariants of
:mod:`tests.faults_kit`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from berth.services.audit import db
from berth_dev.devstack.kafka import KafkaCluster
from berth_dev.devstack.scratch import empty_kafka_cluster, scratch_database
from berth_dev.supervisor import Supervisor

from berth.bus import ensure_topics
from berth.settings import BerthSettings
from tests.faults_kit import drain_and_check, start_sim_pipeline, summary

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

MAX_PODS = 240
STREAM_S = 130.0
"""The pods arrive over two minutes, long enough to cover both faults."""
DOWN_S = 15.0
"""How long the killed broker stays down (its partitions' leaders move after ~9 s, the session timeout)."""
BUSY_TOPICS = (
    "berth.scheduler.inputs.v1",
    "berth.scheduler.commands.v1",
    "berth.scheduler.decisions.v1",
    "berth.cluster.pods.v1",
    "berth.scheduler.results.v1",
)


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str) -> Iterator[KafkaCluster]:
    """Three brokers of this module's own (``kafka_bootstrap`` proves the jars are there)."""
    with empty_kafka_cluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def module_database(database_url: str) -> Iterator[str]:
    with scratch_database(database_url, "faults_brokers") as url:
        yield url


def test_losing_the_busiest_broker_and_a_rolling_restart_lose_nothing(
    cluster: KafkaCluster, module_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env = {
        "BERTH_KAFKA_BOOTSTRAP": cluster.bootstrap_servers,
        "BERTH_DATABASE_URL": module_database,
        "BERTH_KAFKA__REPLICATION_FACTOR": "3",
        "BERTH_LOG_LEVEL": "info",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = BerthSettings()
    db.upgrade(settings.database)
    asyncio.run(ensure_topics(settings.kafka))
    # The replication the cluster allows: every partition on all three brokers.
    layout = cluster.metadata()["partitions"]
    assert layout and all(len(info["replicas"]) == 3 for info in layout.values()), layout

    started = time.monotonic()
    timeline: list[str] = []

    def note(what: str) -> None:
        timeline.append(f"{time.monotonic() - started:5.1f}s {what}")
        print(timeline[-1], file=sys.stderr, flush=True)

    with Supervisor(tmp_path / "logs", env) as services:
        pipeline = start_sim_pipeline(services, settings, tmp_path, max_pods=MAX_PODS, stream_s=STREAM_S)
        note("pipeline up")
        pipeline.wait_until(lambda s: pipeline.arrived_fraction(s) >= 0.2, "a fifth of the pods arrived", timeout_s=90)
        victim = cluster.busiest_leader(BUSY_TOPICS)
        cluster.kill(victim)
        note(f"kill -9 broker {victim}")
        before = pipeline.status()
        time.sleep(DOWN_S)
        services.check_alive()
        during = pipeline.status()
        assert before is not None and during is not None
        # Kafka kept taking and serving records: pods kept arriving and being decided.
        assert during["pods"]["arrived"] > before["pods"]["arrived"], (before["pods"], during["pods"])
        cluster.restart(victim)
        note(f"broker {victim} restarted")
        cluster.wait_in_sync(timeout=120)
        note("in sync")
        status = pipeline.status()
        assert status is not None and status["pods"]["arrived"] < MAX_PODS, "the rolling restart must land mid-stream"
        cluster.rolling_restart(on_restarted=lambda node: (note(f"rolled broker {node}"), services.check_alive()))
        note("rolling restart done")
        final = pipeline.wait_all_decided(timeout_s=180)
        note(f"all decided ({final['pods']['arrived']} arrived)")
        verdict = drain_and_check(pipeline, min_bound=MAX_PODS // 2)
        note("checked")
    print("\n" + "\n".join(timeline))
    print(summary(verdict, victim=victim))
