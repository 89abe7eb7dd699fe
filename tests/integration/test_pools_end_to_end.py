"""Inference pools end to end on the real stack: a producer publishes queue lag with the CLI →
token-lag → the decision cell scales the AgentPool → the binder applies it to the cluster
simulator → the new replica is placed and bound; then a spot notice → the replica on the spot
node is replaced (on-demand) and evicted before the deadline, and the surge is given back.

Services run as processes (:mod:`berth_dev.supervisor`) against a broker of the test's own (topic
names are fixed; the session broker holds other tests' clusters). The Kubernetes backend's scale
of an AgentPool is covered by tests/integration/test_binder_kube_backend.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from berth.schemas import DecisionRecord, EvictPod, ScalePool, SpotInterruptionNotice
from berth.schemas.cells import cell_of_pool
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS
from berth_dev.devstack.procs import free_ports
from berth_dev.supervisor import Supervisor
from berth_dev.workloads import from_documents, write_documents, write_pools_file
from berth_dev.workloads.generate import H100, gpu_node_manifest

from berth.bus import ensure_topics
from berth.settings import BerthSettings

pytestmark = pytest.mark.integration

NS, POOL = "serving", "llama"
BERTH = str(Path(sys.executable).with_name("berth"))


def _documents(cell: int) -> list[dict[str, Any]]:
    # Every node in the pool's cell: a pool is scaled, and its replicas placed, in one cell.
    labels = {"berth.io/cell": str(cell)}
    nodes = [
        gpu_node_manifest(name, H100, zone="us-east-1a", spot=spot, extra_labels=labels)
        for name, spot in (("spot-0", True), ("od-0", False), ("od-1", False))
    ]
    pool = {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "model": "llama-70b",
            "replicas": 0,
            "minReplicas": 0,
            "maxReplicas": 4,
            "tokensPerSecondPerReplica": 10_000,
            "ttftSloMs": 2000,
            "modelLoadSeconds": 0,
            "cooldownSeconds": 3600,
            "gpuRequirements": {"count": 8},
            "scheduling": {"costOptimization": {"spotEnabled": True, "maxSpotPercent": 100}},
        },
    }
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *nodes, pool]


def _replicas(sim_url: str) -> dict[str, str | None]:
    """Replica name → its node (None: pending), for the names the simulator may have used."""
    found: dict[str, str | None] = {}
    for index in range(12):
        name = f"{POOL}-{index}"
        try:
            with urllib.request.urlopen(f"{sim_url}/api/v1/namespaces/{NS}/pods/{name}", timeout=5) as response:
                found[name] = json.loads(response.read())["spec"].get("nodeName")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
    return found


def _status(sim_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{sim_url}/status", timeout=5) as response:
        return json.loads(response.read())


def _wait(services: Supervisor, predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        services.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)


def _publish(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [BERTH, "publish", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _read(settings: BerthSettings) -> tuple[list[Any], list[DecisionRecord], list[SpotInterruptionNotice]]:
    from berth.bus import EventConsumer

    commands: list[Any] = []
    decisions: list[DecisionRecord] = []
    notices: list[SpotInterruptionNotice] = []
    async with EventConsumer(
        settings.kafka, [COMMANDS, DECISIONS, DECISION_INPUTS], group_id=None, name="pools-test"
    ) as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            if isinstance(item.event, (ScalePool, EvictPod)):
                commands.append(item.event)
            elif isinstance(item.event, DecisionRecord):
                decisions.append(item.event)
            elif isinstance(item.event, SpotInterruptionNotice):
                notices.append(item.event)
    return commands, decisions, notices


def test_queue_lag_scales_the_pool_and_a_spot_notice_moves_its_replica_before_the_deadline(
    own_kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env = {"BERTH_KAFKA_BOOTSTRAP": own_kafka}
    monkeypatch.setenv("BERTH_KAFKA_BOOTSTRAP", own_kafka)
    settings = BerthSettings()
    asyncio.run(ensure_topics(settings.kafka))
    documents = _documents(cell_of_pool(NS, POOL, DECISION_INPUTS.partitions))
    workload, pools = tmp_path / "workload.yaml", tmp_path / "pools.yaml"
    write_documents(documents, workload)
    write_pools_file(from_documents(documents, name="pools"), pools)
    [sim_port] = free_ports(1)
    sim_url = f"http://127.0.0.1:{sim_port}"

    with Supervisor(tmp_path / "logs", {**env, "BERTH_LOG_LEVEL": "info"}) as services:
        services.start("inventory", ["run", "--data-dir", str(tmp_path / "inventory")])
        services.start("token-lag", ["run", "--pools", str(pools)])
        services.start("decision", ["run", "--pools", str(pools)])
        services.start("binder", ["run", "--backend", "sim", "--sim-url", sim_url])
        services.start(
            "cluster-sim",
            ["run", "--workload", str(workload), "--speed", "1", "--port", str(sim_port), "--no-progress"],
        )

        routed = tmp_path / "logs" / "inventory.log"
        _wait(
            services,
            lambda: routed.exists() and routed.read_text().count('"node routed"') >= 3,
            "the nodes routed to the decision cells",
        )

        # A gateway reports 30,000 tokens queued at 1,000 tokens/s: 30 s to first token against a
        # 2 s SLO → ceil(30000 / (10000 × 2)) = 2 replicas: spot is allowed and cheapest, so one
        # goes to the spot node and the other, the spot node being full, on demand — od-0 or od-1,
        # identical nodes: the tie-break hashes the pod, and which replica the cell sees first
        # depends on when the simulator's pods arrive.
        _publish(
            env,
            "queue-lag",
            "--pool",
            POOL,
            "--namespace",
            NS,
            "--tokens",
            "30000",
            "--rate",
            "1000",
            "--sessions",
            "50",
        )
        _wait(
            services,
            lambda: (
                sorted(node or "" for node in _replicas(sim_url).values()) in (["od-0", "spot-0"], ["od-1", "spot-0"])
            ),
            "the pool scaled to 2 replicas, on spot-0 and an on-demand node",
        )
        on_spot = next(name for name, node in _replicas(sim_url).items() if node == "spot-0")

        notice = _publish(env, "spot-notice", "--node", "spot-0", "--in", "120s", "--provider", "aws")
        published = time.monotonic()

        def moved() -> bool:
            replicas = _replicas(sim_url)
            bound = [node for node in replicas.values() if node]
            return on_spot not in replicas and len(replicas) == 2 and len(bound) == 2 and "spot-0" not in bound

        _wait(services, moved, "the replica moved off spot-0 and the pool back at 2 replicas", timeout=110)
        moved_after = time.monotonic() - published
        status = _status(sim_url)
        commands, decisions, notices = asyncio.run(_read(settings))

    deadline = datetime.fromisoformat(notice["deadline"])
    assert moved_after < 120, moved_after
    assert status["api"]["evictions"] >= 1 and status["api"]["cordons"] == 1
    assert status["overcommitted_binds"] == 0
    scales = [(c.previous_replicas, c.replicas) for c in commands if isinstance(c, ScalePool)]
    assert scales[:3] == [(0, 2), (2, 3), (3, 2)], scales
    [evict] = [c for c in commands if isinstance(c, EvictPod)]
    assert evict.name == on_spot and evict.node == "spot-0"
    assert evict.issued_at < deadline
    outcomes = [(d.outcome, d.subject) for d in decisions if d.outcome in ("cordoned", "scaled", "evicting")]
    assert ("cordoned", "spot-0") in outcomes and ("evicting", f"{NS}/{on_spot}") in outcomes
    assert [n.node for n in notices] == ["spot-0"]
