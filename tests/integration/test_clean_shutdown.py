"""Services start and stop on a real broker without leaving a Kafka client (or a socket) unclosed,
and everything they write on stderr is one JSON log record per line: Berth's own records and
aiokafka's, faust's and mode's alike.

Each service runs as `berth <service> run` does, in a subprocess with ``-W error::ResourceWarning``:
an unclosed AIOKafkaProducer/Consumer or transport would print ``Exception ignored in ...
ResourceWarning`` (or asyncio's ``Unclosed ...`` record) on stderr. One broker of its own for the
module: the services' groups and topics have fixed names.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from berth_dev.devstack.procs import free_ports

from berth.bus import ensure_topics
from berth.settings import KafkaSettings

pytestmark = pytest.mark.integration

READY_TIMEOUT_S = 180.0
UNCLEAN = ("Unclosed", "ResourceWarning", "Exception ignored", "Traceback")


@pytest.fixture(scope="module")
def broker(kafka_bootstrap: str) -> Iterator[str]:
    """An empty broker for this module (``kafka_bootstrap`` proves the jars are there)."""
    from berth_dev.devstack.scratch import empty_kafka

    with empty_kafka() as bootstrap:
        asyncio.run(ensure_topics(KafkaSettings(bootstrap=bootstrap)))
        yield bootstrap


def readyz(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, TimeoutError):
        return None


def lifecycle(service: str, args: list[str], bootstrap: str, tmp_path: Path, *, log_level: str) -> list[dict[str, Any]]:
    """Run ``berth <service> run ARGS`` until /readyz says 200, SIGTERM it, and return its stderr
    as log records, having checked that it stopped with 0 and nothing unclean was written."""
    health_port, metrics_port = free_ports(2)
    stderr_path = tmp_path / f"{service}.stderr"
    env = {
        **os.environ,
        "BERTH_KAFKA_BOOTSTRAP": bootstrap,
        "BERTH_LOG_LEVEL": log_level,
        "BERTH_LOG_FORMAT": "json",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "PYTHONWARNINGS": "",
    }
    berth = str(Path(sys.executable).with_name("berth"))  # the entry point, under warnings as errors
    argv = [
        sys.executable,
        "-W",
        "error::ResourceWarning",
        berth,
        service,
        "run",
        *args,
        "--health-port",
        str(health_port),
        "--metrics-port",
        str(metrics_port),
    ]
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while readyz(health_port) != 200:
                assert process.poll() is None, f"{service} exited:\n{stderr_path.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"{service} not ready:\n{stderr_path.read_text()[-3000:]}"
                time.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    text = stderr_path.read_text()
    assert returncode == 0, text[-3000:]
    for marker in UNCLEAN:
        assert marker not in text, f"{marker!r} on {service}'s stderr:\n{text[-3000:]}"
    records = []
    for line in text.splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError:
                raise AssertionError(f"not a JSON log record on {service}'s stderr: {line!r}") from None
            assert {"event", "level", "logger", "timestamp"} <= set(record), record
            assert record["service"] == service, record
            records.append(record)
    return records


def test_decision_starts_and_stops_cleanly(broker: str, tmp_path: Path) -> None:
    records = lifecycle("decision", [], broker, tmp_path, log_level="info")
    events = [record["event"] for record in records]
    assert "cell taken over" in events
    assert any(record["logger"].startswith("berth.") for record in records)


def test_a_faust_service_starts_and_stops_cleanly_with_faust_logs_as_json(broker: str, tmp_path: Path) -> None:
    # debug: the libraries' records are there to be seen (at info they keep to warnings).
    records = lifecycle("token-lag", ["--data-dir", str(tmp_path / "token-lag")], broker, tmp_path, log_level="debug")
    loggers = {record["logger"].split(".")[0] for record in records}
    assert {"faust", "mode", "aiokafka", "berth"} <= loggers, loggers
    events = [record["event"] for record in records]
    assert "ready" in events and "stopped" in events
