"""Checks that processes Berth starts never outlive the process that started them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from berth_dev.devstack.procs import is_running


def wait_until_gone(pids: list[int], markers: list[str], timeout: float = 15.0) -> list[int]:
    """Poll until none of ``pids`` (each checked against its command-line ``marker``, so that a
    reused pid does not count) runs any more; return those still running at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid, marker in zip(pids, markers, strict=True) if is_running(pid, cmdline_contains=marker)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def assert_children_die_with_their_parent(script: str) -> None:
    """Run ``script`` in a child interpreter — it starts processes, prints one JSON line
    ``{"pids": [...], "markers": [...]}`` and sleeps — then ``kill -9`` that child and assert
    that every process it started is gone within 15 s."""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, f"the child failed before starting its processes: {parent.communicate(timeout=30)[1]}"
        started = json.loads(line)
        assert all(
            is_running(pid, cmdline_contains=m) for pid, m in zip(started["pids"], started["markers"], strict=True)
        )
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_until_gone(started["pids"], started["markers"]) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        for stream in (parent.stdout, parent.stderr):
            if stream is not None:
                stream.close()
