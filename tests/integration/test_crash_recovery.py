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
from pathlib import Path
from typing import Any

import pytest
from berth.services.audit import db
from berth_dev.demo import _kafka_counts, _replay, _status, _wait_for_audit
from berth_dev.devstack.procs import free_ports
from berth_dev.supervisor import ServiceFailed, Supervisor

from berth.bus import ensure_topics
from berth.settings import BerthSettings
from tests.faults_kit import check_invariants, placements

pytestmark = pytest.mark.integration

MAX_PODS = 300
SPEED = "40"
KILL_AT = 1 / 3
RUN_TIMEOUT_S = 150.0


def _run(services: Supervisor, sim_url: str, victim: str) -> dict[str, Any]:
    """Follow the run; kill -9 ``victim`` once a third of the pods arrived, restart it 2 s later;
    return the simulator's status once every pod is decided."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed = False
    while True:
        services.check_alive()
        if time.monotonic() > deadline:
            raise ServiceFailed(
                f"the pipeline did not decide every pod within {RUN_TIMEOUT_S:.0f} s "
                f"(killed {victim}: {killed}); last status {_status(sim_url)}"
            )
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
    victim: str, own_kafka: str, fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
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

    with Supervisor(
        tmp_path / "logs", {**env, "BERTH_LOG_LEVEL": os.environ.get("CRASH_LOG_LEVEL", "info")}
    ) as services:
        services.start("audit")
        services.start("inventory", ["run", "--data-dir", str(tmp_path / "inventory")])
        services.start("token-lag", ["run", "--pools", str(pools)])
        services.start("decision", ["run", "--pools", str(pools)])
        services.start("binder", ["run", "--backend", "sim", "--sim-url", sim_url])
        services.start(
            "cluster-sim",
            [
                "run",
                "--workload",
                str(workload),
                "--max-pods",
                str(MAX_PODS),
                "--speed",
                SPEED,
                "--port",
                str(sim_port),
                "--no-progress",
            ],
        )
        status = _run(services, sim_url, victim)
        # As the demo does: binder first, then the cluster, so the pipeline drains.
        services.services["binder"].stop()
        services.services["cluster-sim"].stop()
        audited = _wait_for_audit(settings, timeout_s=60)
        kafka_inputs, kafka_decisions = asyncio.run(_kafka_counts(settings))
        report = _replay(settings)
        commands, statuses = asyncio.run(placements(settings))
    assert all(not service.is_alive() for service in services.services.values())

    # The invariants every fault test checks (tests/faults_kit.py): no pod placed twice, no GPU
    # over-committed, every pod decided, every decision on Kafka in Postgres once, and the audit
    # replays without a mismatch.
    check_invariants(
        settings,
        status,
        commands,
        statuses,
        min_bound=MAX_PODS // 2,
        audited=audited,
        decisions_on_kafka=kafka_decisions,
        inputs_on_kafka=kafka_inputs,
        report=report,
    )
