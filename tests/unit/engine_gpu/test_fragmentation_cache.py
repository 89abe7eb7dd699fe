"""GpuFragmentation's caches are pure speed: emptying them when full changes no decision."""

from __future__ import annotations

import pytest

from bench.engine import gpu_mixed
from berth.core.config import default_config
from berth.core.plugins import gpu_fragmentation
from berth.core.scheduler import Scheduler
from berth.core.state import ClusterState


def _decision_hashes() -> list[str]:
    scheduler = Scheduler(default_config())
    state = ClusterState()
    for node in gpu_mixed.build_nodes(60):
        state.upsert_node(node)
    hashes = []
    for pod in gpu_mixed.build_pods(400, seed=3):
        decision = scheduler.schedule(pod, state)
        if decision.status == "placed":
            state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)  # type: ignore[arg-type]  # a placed decision has its node
        hashes.append(decision.decision_hash)
    return hashes


def test_a_full_cache_is_emptied_without_changing_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _decision_hashes()
    # So small that the caches overflow every few cycles, including cycles that find some node
    # states cached and miss others.
    monkeypatch.setattr(gpu_fragmentation, "_RESULTS_KEPT", 20)
    assert _decision_hashes() == expected
