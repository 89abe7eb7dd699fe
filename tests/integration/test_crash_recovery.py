"""Crash safety of the pipeline: ``kill -9`` one service mid-stream, restart it, and check that no
pod is placed twice, no decision is lost and the audit store still replays without mismatch.

Each test runs the demo's pipeline (:mod:`berth_dev.demo`: audit, inventory, token-lag, decision,
binder, cluster-sim) on a smaller workload (the first 300 pods of the demo workload, played at
40x) against its own, empty Kafka broker (topic names are fixed, so the session broker would mix
runs) and a fresh Postgres database on the session's server.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from berth.bus import ensure_topics
from berth.services.audit import db
from berth.services.audit.models import DecisionRow
from berth.settings import BerthSettings
from berth_dev.demo import _kafka_counts, _replay, _status, _wait_for_audit
from berth_dev.devstack.procs import free_ports
from berth_dev.supervisor import ServiceFailed, Supervisor

pytestmark = pytest.mark.integration

MAX_PODS = 300
SPEED = "40"
KILL_AT = 1 / 3
RUN_TIMEOUT_S = 150.0


async def _placements(settings: BerthSettings) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """(pod UIDs of each PlacePods command, statuses reported for each command id) from Kafka."""
    from berth.bus import EventConsumer
    from berth.schemas.scheduler import CommandResult, PlacePods
    from berth.schemas.topics import COMMANDS, RESULTS

    commands: dict[str, list[str]] = {}
    statuses: dict[str, set[str]] = defaultdict(set)
    async with EventConsumer(settings.kafka, [COMMANDS, RESULTS], group_id=None, name="crash-test") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            event = item.event
            if isinstance(event, PlacePods):
                commands[event.command_id] = [p.pod_uid for p in event.placements]
            elif isinstance(event, CommandResult):
                statuses[event.command_id].add(event.status)
    return commands, statuses


def _run(services: Supervisor, sim_url: str, victim: str) -> dict[str, Any]:
    """Follow the run; kill -9 ``victim`` once a third of the pods arrived, restart it 2 s later;
    return the simulator's status once every pod is decided."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed = False
    while True:
        services.check_alive()
        if time.monotonic() > deadline:
            raise ServiceFailed(f"the pipeline did not decide every pod within {RUN_TIMEOUT_S:.0f} s "
                                f"(killed {victim}: {killed}); last status {_status(sim_url)}")
        status = _status(sim_url)
        if status is None:
            time.sleep(0.3)
            continue
        pods = status["pods"]
        if not killed and pods["arrived"] >= KILL_AT * pods["workload"]:
            assert not status["all_decided"], "the kill must land mid-stream"
            services.services[victim].kill()
            assert not services.services[victim].is_alive()
            killed = True
            time.sleep(2)
            services.restart(victim)
            continue
        if killed and status["all_decided"]:
            return status
        time.sleep(0.3)


@pytest.mark.parametrize("victim", ["binder", "inventory", "decision"])
def test_kill_9_mid_stream_then_restart_loses_nothing_and_places_nothing_twice(
        victim: str, own_kafka: str, fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import yaml

    from berth_dev.workloads import from_documents, generated_documents, pool_policies, write_documents

    env = {"BERTH_KAFKA_BOOTSTRAP": own_kafka, "BERTH_DATABASE_URL": fresh_database}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = BerthSettings()
    db.upgrade(settings.database)
    asyncio.run(ensure_topics(settings.kafka))

    documents = generated_documents("demo:1")
    workload, pools = tmp_path / "workload.yaml", tmp_path / "pools.yaml"
    write_documents(documents, workload)
    pools.write_text(yaml.safe_dump(pool_policies(from_documents(documents, name="demo")), sort_keys=False))
    [sim_port] = free_ports(1)
    sim_url = f"http://127.0.0.1:{sim_port}"

    with Supervisor(tmp_path / "logs", {**env, "BERTH_LOG_LEVEL": os.environ.get("CRASH_LOG_LEVEL", "info")}) as services:
        services.start("audit")
        services.start("inventory", ["run", "--data-dir", str(tmp_path / "inventory")])
        services.start("token-lag", ["run", "--pools", str(pools)])
        services.start("decision", ["run", "--pools", str(pools)])
        services.start("binder", ["run", "--backend", "sim", "--sim-url", sim_url])
        services.start("cluster-sim", ["run", "--workload", str(workload), "--max-pods", str(MAX_PODS),
                                       "--speed", SPEED, "--port", str(sim_port), "--no-progress"])
        status = _run(services, sim_url, victim)
        # As the demo does: binder first, then the cluster, so the pipeline drains.
        services.services["binder"].stop()
        services.services["cluster-sim"].stop()
        audited = _wait_for_audit(settings, timeout_s=60)
        _, kafka_decisions = asyncio.run(_kafka_counts(settings))
        report = _replay(settings)
        commands, statuses = asyncio.run(_placements(settings))
    assert all(not service.is_alive() for service in services.services.values())

    # (1) No pod placed twice: the simulator saw no overcommitted bind, no pod UID was bound by
    # two different applied PlacePods commands, and the simulator's bind count equals the number
    # of distinct pods those applied commands bound (each bind counted once).
    pods = status["pods"]
    assert status["overcommitted_binds"] == 0
    applied_by_pod: dict[str, set[str]] = defaultdict(set)
    for command_id, uids in commands.items():
        if "applied" in statuses.get(command_id, ()):
            for uid in uids:
                applied_by_pod[uid].add(command_id)
    placed_twice = {uid: ids for uid, ids in applied_by_pod.items() if len(ids) > 1}
    assert not placed_twice, f"pods bound by more than one applied command: {placed_twice}"
    assert pods["bound_total"] == len(applied_by_pod), (pods, len(applied_by_pod))
    assert pods["bound_total"] >= MAX_PODS // 2, pods
    assert pods["undecided"] == 0

    # (2) No decision lost: every decision record on Kafka is in Postgres.
    engine = db.make_engine(settings.database)
    try:
        with engine.connect() as connection:
            in_postgres = connection.scalar(sa.select(sa.func.count()).select_from(DecisionRow)) or 0
            distinct = connection.scalar(sa.select(sa.func.count(sa.distinct(DecisionRow.decision_id)))) or 0
    finally:
        engine.dispose()
    assert kafka_decisions > 0
    assert audited == in_postgres == kafka_decisions == distinct, (audited, in_postgres, kafka_decisions, distinct)

    # (3) The audit is consistent: replaying every decision from Postgres alone reproduces it.
    assert report.compared == in_postgres, (report.compared, in_postgres)
    assert report.mismatches == [], report.mismatches[:5]
