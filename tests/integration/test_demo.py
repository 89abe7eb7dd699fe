"""`berth demo` as a user runs it: its own Kafka and Postgres, a JSON last line, nothing left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from berth.devstack.procs import TEMP_PREFIX

pytestmark = pytest.mark.integration


def _stack_processes() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if TEMP_PREFIX in text:
            found.append(text)
    return found


def test_demo_runs_end_to_end_and_stops_what_it_started(kafka_bootstrap, database_url):
    # The fixtures' own services are running; the demo must start and stop its own beside them.
    before = set(_stack_processes())
    berth = Path(sys.executable).with_name("berth")
    result = subprocess.run([str(berth), "demo"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["types_read"] == summary["event_types"] >= 19
    assert summary["dead_lettered"] == summary["malformed_published"] == 2
    assert set(_stack_processes()) <= before
