"""The soak's memory tracer: snapshots from inside the named service only, and a readable diff."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import bench.pipeline.memtrace

TRACER_DIR = Path(bench.pipeline.memtrace.__file__).parent
# Grows by 2 MB between its first and its second snapshot, then waits for the second (a
# process that is not the traced service gives up after a few seconds).
GROW = """
import glob, os, sys, time
def snapshots():  # written whole: the log line comes after the snapshot file
    logs = glob.glob(os.path.join(os.environ["BERTH_MEMTRACE_DIR"], "*.log"))
    return len(open(logs[0]).readlines()) if logs else 0
def wait_for(count):
    deadline = time.monotonic() + (30 if sys.argv[1] == "decision" else 2)
    while snapshots() < count and time.monotonic() < deadline:
        time.sleep(0.05)
wait_for(1)
kept = [bytearray(100_000) for _ in range(20)]
wait_for(2)
"""


def _run(tmp_path: Path, service: str) -> None:
    env = os.environ | {
        "PYTHONPATH": str(TRACER_DIR),
        "BERTH_MEMTRACE_DIR": str(tmp_path),
        "BERTH_MEMTRACE_EVERY_S": "0.2",
    }
    # ``python - <service>``: argv[1] is the service name, as for ``berth <service> run``.
    subprocess.run([sys.executable, "-", service], input=GROW, text=True, env=env, check=True, timeout=60)


def test_the_named_service_writes_snapshots_that_show_what_grew(tmp_path: Path) -> None:
    _run(tmp_path, "decision")
    snapshots = sorted(tmp_path.glob("*.snap"))
    assert len(snapshots) >= 2
    assert "traced=" in next(tmp_path.glob("*.log")).read_text()
    shown = subprocess.run(
        [sys.executable, "-m", "bench.pipeline.memtrace", str(snapshots[0]), str(snapshots[-1]), "--top", "3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    growth, where = shown.splitlines()[:2]
    assert where.strip() == 'File "<stdin>", line 11'  # the bytearrays kept: the top row
    assert float(growth.split()[0]) > 1.5  # MiB (20 × 100 kB)


def test_other_processes_are_not_traced(tmp_path: Path) -> None:
    _run(tmp_path, "inventory")
    assert not list(tmp_path.iterdir())
