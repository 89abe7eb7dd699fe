"""The local stack is real and leaves nothing behind.

Fixture-based tests use whatever the conftest chain provides; the process tests below exercise
``berth_dev.devstack`` itself and so need java and the Postgres binaries (skipped without them, failed
in CI). Runtime: a Kafka start is ~4-10 s on a 2-core machine, and this file starts four.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from berth_dev.devstack.kafka import KafkaProcess, fetch_cluster_metadata
from berth_dev.devstack.procs import is_running, pids_mentioning

from tests.orphans import assert_children_die_with_their_parent, wait_until_gone

pytestmark = pytest.mark.integration


# --- the fixtures provide working services ------------------------------------------------------


async def test_kafka_answers_metadata(kafka_bootstrap: str) -> None:
    metadata = await fetch_cluster_metadata(kafka_bootstrap, timeout=10)
    assert metadata["brokers"], metadata


async def test_kafka_produce_consume_round_trip(kafka_bootstrap: str, topic_name: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        sent = await producer.send_and_wait(topic_name, b"hello", key=b"k1")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic_name,
        bootstrap_servers=kafka_bootstrap,
        group_id=f"{topic_name}.group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=20_000, max_records=1)
        while not batch:  # the first fetch may race the group join; getmany's timeout bounds each try
            batch = await consumer.getmany(timeout_ms=20_000, max_records=1)
    finally:
        await consumer.stop()
    (records,) = batch.values()
    assert (records[0].key, records[0].value, records[0].offset) == (b"k1", b"hello", sent.offset)


def test_postgres_is_version_15(database_url: str) -> None:
    engine = sqlalchemy.create_engine(database_url)
    try:
        with engine.connect() as connection:
            version = connection.execute(sqlalchemy.text("select version()")).scalar_one()
            user = connection.execute(sqlalchemy.text("select current_user")).scalar_one()
    finally:
        engine.dispose()
    assert version.startswith("PostgreSQL 15"), version
    assert user == "berth"


def test_topic_names_are_unique_and_legal(topic_name: str) -> None:
    assert topic_name.startswith("test.")
    assert len(topic_name) <= 249
    assert all(ch.isalnum() or ch in "._-" for ch in topic_name)


# --- our launchers leave no process behind ----------------------------------------------------


@pytest.mark.usefixtures("local_binaries")
def test_kafka_process_stop_leaves_nothing_behind() -> None:
    with KafkaProcess() as kafka:
        data_dir = str(kafka.data_dir)
        assert kafka.is_answering()
        assert pids_mentioning(data_dir) == [kafka.pid]
    assert pids_mentioning(data_dir) == []
    assert not Path(data_dir).exists()


# A separate interpreter starts both services in-process, then is killed with SIGKILL: no
# finalizer or atexit handler runs, only the kernel's parent-death signal can stop the children.
_KILLED_PARENT_SCRIPT = """
import json, sys, time
from berth_dev.devstack.kafka import KafkaProcess
from berth_dev.devstack.postgres import PostgresProcess
kafka = KafkaProcess().start()
postgres = PostgresProcess().start()
print(json.dumps({"pids": [kafka.pid, postgres.pid],
                  "markers": [str(kafka.data_dir), str(postgres.data_dir)]}), flush=True)
time.sleep(600)
"""


@pytest.mark.usefixtures("local_binaries")
def test_services_die_when_their_parent_is_killed() -> None:
    assert_children_die_with_their_parent(_KILLED_PARENT_SCRIPT)


@pytest.mark.usefixtures("local_binaries")
def test_cli_up_status_down(tmp_path: Path) -> None:
    env = {**os.environ, "BERTH_RUN_DIR": str(tmp_path)}
    cli = [sys.executable, "-m", "berth_dev.devstack"]

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, command], env=env, capture_output=True, text=True, timeout=180)

    try:
        started = run("up")
        assert started.returncode == 0, started.stderr
        printed = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
        assert printed["BERTH_KAFKA_BOOTSTRAP"].startswith("127.0.0.1:")
        assert printed["BERTH_DATABASE_URL"].startswith("postgresql+psycopg://berth:berth@127.0.0.1:")

        state = json.loads((tmp_path / "devstack.json").read_text())
        pids = [state["kafka"]["pid"], state["postgres"]["pid"]]
        markers = [state["kafka"]["data_dir"], state["postgres"]["base_dir"]]
        assert all(is_running(pid, cmdline_contains=m) for pid, m in zip(pids, markers, strict=True))

        shown = run("status")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert shown.stdout.count("answering") == 2 and "not answering" not in shown.stdout

        stopped = run("down")
        assert stopped.returncode == 0, stopped.stderr
        assert wait_until_gone(pids, markers, timeout=5) == []
        assert not (tmp_path / "devstack.json").exists()
        assert not any(Path(m).exists() for m in markers)
        assert run("status").returncode == 1
    finally:
        run("down")  # after a failed assertion, still leave nothing running
