"""`berth demo` as a user runs it: its own Kafka and Postgres, every service, a JSON last line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from berth_dev.devstack.procs import TEMP_PREFIX

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
    result = subprocess.run([str(berth), "demo", "--keep-logs", str(tmp_path)], capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) >= {"pods", "placed", "unschedulable", "decisions_audited", "replay_mismatches",
                            "elapsed_s"}
    assert summary["pods"] >= 1000
    assert summary["placed"] >= 900
    assert summary["unschedulable"] >= 1, "the workload has pods that fit nowhere"
    assert summary["decisions_audited"] >= summary["placed"]
    assert summary["replay_mismatches"] == 0
    assert summary["overcommitted_binds"] == 0, "a node got more than it has: a placement bug"
    assert summary["spot_notices"] == 3 and summary["pool_scale_events"] >= 1
    assert summary["dead_lettered"] >= 1, "the malformed record must reach the dead-letter topic"
    assert _stack_processes() <= before, "the demo left processes behind"
