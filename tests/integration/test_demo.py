"""`berth demo` as a user runs it: its own Kafka and Postgres, every service, a JSON last line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from berth.schemas import PodInfo
from berth.schemas.samples import T0, h100_node
from berth_dev.cluster_sim.state import FINISHED, ClusterState
from berth_dev.demo import FATES, pod_fates, pod_rows, reason_class
from berth_dev.devstack.procs import TEMP_PREFIX
from berth_dev.workloads import AgentPool

pytestmark = pytest.mark.integration


def _stack_processes() -> set[str]:
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if TEMP_PREFIX in text or " berth " in f" {text} " and " run " in text:
            found.add(text)
    return found


def test_demo_runs_the_pipeline_end_to_end_and_replays_without_mismatch(kafka_bootstrap, tmp_path):
    # The fixtures' own broker is running; the demo must start and stop its own beside it.
    before = _stack_processes()
    berth = Path(sys.executable).with_name("berth")
    result = subprocess.run(
        [str(berth), "demo", "--keep-logs", str(tmp_path)], capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) >= {"pods", "placed", "unschedulable", "decisions_audited", "replay_mismatches", "elapsed_s"}
    assert summary["pods"] >= 1000
    assert summary["placed"] >= 900
    assert summary["unschedulable"] >= 1, "the workload has pods that fit nowhere"
    # every pod in exactly one row: the rows add up to the total, nothing left in flight
    fates = summary["pods_by_fate"]
    assert set(fates) == set(FATES)
    assert sum(fates.values()) == summary["pods"], fates
    assert fates["undecided"] == fates["not_arrived"] == 0, fates
    assert (fates["placed"], fates["unschedulable"]) == (summary["placed"], summary["unschedulable"])
    assert "pods decided" in result.stderr and "unschedulable at the end" in result.stderr
    assert summary["decisions_audited"] >= summary["placed"]
    assert summary["replay_mismatches"] == 0
    assert summary["overcommitted_binds"] == 0, "a node got more than it has: a placement bug"
    assert summary["spot_notices"] == 3 and summary["pool_scale_events"] >= 1
    assert summary["dead_lettered"] >= 1, "the malformed record must reach the dead-letter topic"
    assert _stack_processes() <= before, "the demo left processes behind"


# --- the pod account, without Kafka ----------------------------------------------------------------


def _pending(name: str, gpus: int = 1, scheduler: str = "berth") -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name=scheduler,
        requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": gpus},
        creation_time=T0,
    )


def test_every_pod_is_in_exactly_one_row_of_the_account():
    state = ClusterState()
    state.add_node(h100_node("node-a"), T0)
    state.add_node(h100_node("node-b", spot=True), T0)
    workload = [_pending(f"p{i}") for i in range(7)] + [_pending("other", scheduler="default-scheduler")]
    for pod in workload:
        state.create_pod(pod, T0)
    state.create_pod(_pending("static").model_copy(update={"node_name": "node-a"}), T0)  # spec.nodeName
    state.add_pool(AgentPool("ml", "chat", {"replicas": 3, "gpuRequirements": {"count": 1}}), T0)
    for name, node in (("p0", "node-a"), ("p1", "node-a"), ("p2", "node-b"), ("p3", "node-a"), ("chat-0", "node-a")):
        assert state.bind("ml", name, node, T0).ok
    state.delete_pod("ml", "p0", T0, cause=FINISHED)
    assert state.evict("ml", "p1", T0).ok
    state.remove_node("node-b", T0)  # p2 goes with it
    too_big = (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )
    state.mark_decided("ml/p4", unschedulable=True, reason=too_big)
    state.mark_decided("ml/p5", unschedulable=True, reason=too_big)
    state.mark_decided("ml/chat-1", unschedulable=True, reason=too_big)
    state.scale("ml", "chat", 1, T0)  # the unbound replicas go: chat-1 (had a verdict), chat-2 (had none)

    pods = {"workload": 10, "arrived": 9, "refused": 0, "ledger": state.ledger()}  # one still to come
    fates = pod_fates(pods)
    assert fates.replicas == 3 and fates.total == 13
    assert fates.counts == {
        "placed": 5,
        "running_from_start": 1,
        "unschedulable": 2,
        "deleted_while_pending": 2,
        "refused": 0,
        "undecided": 1,
        "other_scheduler": 1,
        "not_arrived": 1,
    }
    assert sum(fates.counts.values()) == fates.total
    assert dict(fates.details["placed"]) == {
        "still running at the end": 2,
        "finished (their run time was over)": 1,
        "evicted on Berth's command (preemption, spot drain)": 1,
        "deleted with their node (spot reclaim, node removal)": 1,
    }
    assert fates.details["unschedulable"] == [("Insufficient nvidia.com/gpu", 2)]
    assert dict(fates.details["deleted_while_pending"]) == {
        "removed by a pool scale-down after an unschedulable verdict": 1,
        "removed by a pool scale-down before any verdict": 1,
    }
    # the bar: of the 8 pods Berth has to decide (5 placed, 2 unschedulable, 1 waiting), 7 are decided
    assert (fates.decided, fates.decidable) == (7, 8)
    rows = pod_rows(fates)
    assert rows[0][1] == fates.total == sum(n for _, n, depth in rows if depth == 1)
    for i, (_, count, depth) in enumerate(rows):
        if depth == 1 and i + 1 < len(rows) and rows[i + 1][2] == 2:
            subs = [
                n
                for _, n, d in rows[i + 1 :][
                    : next((j for j, r in enumerate(rows[i + 1 :]) if r[2] != 2), len(rows) - i - 1)
                ]
            ]
            assert sum(subs) == count


@pytest.mark.parametrize(
    ("message", "row"),
    [
        (
            "0/120 nodes are available: 8 node(s) had untolerated taint(s), 112 Insufficient nvidia.com/gpu. "
            "preemption: 0/120 nodes are available: 120 No preemption victims found for incoming pod.",
            "Insufficient nvidia.com/gpu",
        ),
        (
            "pod group ml/big did not fit as a whole: only 1 of minMember 3 could be placed",
            "gang did not fit as a whole (fewer than minMember placeable)",
        ),
        (
            "pod group ml/g has 2 pending pods, fewer than minMember 4",
            "gang waiting for members (fewer pending than minMember)",
        ),
        ("", "(no message)"),
    ],
)
def test_reason_rows(message, row):
    assert reason_class(message) == row
