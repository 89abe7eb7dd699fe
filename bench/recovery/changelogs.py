"""What the restart benches of the faust services share (:mod:`bench.recovery.inventory`,
:mod:`bench.recovery.token_lag`): a broker of their own, changelogs written as faust writes them,
the compaction step with the bench's topic settings, record counts, a timed restart of the real
service, and the figures every run reports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(stderr=True)

DAY_MS = 24 * 3600 * 1000


BENCH_SEGMENT_MS = 1000
"""``segment.ms`` the bench sets for its compaction step (production: 10 min)."""


BENCH_DELETE_RETENTION_MS = 1000
"""``delete.retention.ms`` the bench sets for its compaction step (production: an hour): the whole
history is written in minutes, so this stands for tombstones older than the production retention."""


BENCH_DIRTY_RATIO = "0.0001"
"""``min.cleanable.dirty.ratio`` the bench sets for its compaction step (production: 0.2): the
rewrite of the live keys that makes the second clean is small next to a partition's tombstones."""


WORKER_TIMEOUT_S = 900.0


@dataclass
class Changelogs:
    """Where each table's changelog records go, and what the bench expects the tables to hold."""

    topics: dict[str, str]
    """table name → changelog topic on the broker"""
    partitions: dict[str, int]
    tables: dict[str, dict[str, bytes]] = field(default_factory=dict)
    last_record: dict[tuple[str, int], tuple[bytes, bytes | None]] = field(default_factory=dict)
    records: int = 0
    tombstones: int = 0


def partition_of(key: str, partitions: int) -> int:
    """The partition the Java-compatible default partitioner (aiokafka's and faust's) gives ``key``."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def log_bytes(data_dir: Path, topics: dict[str, str]) -> int:
    """Bytes of the changelogs' segment files on the broker's disk."""
    return sum(
        segment.stat().st_size
        for topic in topics.values()
        for directory in data_dir.glob(f"{topic}-*")
        for segment in directory.glob("*.log")
    )


def _cleaned_offsets(data_dir: Path) -> dict[tuple[str, int], int]:
    """The log cleaner's checkpoint: partition → the offset up to which it has cleaned."""
    checkpoint = data_dir / "cleaner-offset-checkpoint"
    offsets: dict[tuple[str, int], int] = {}
    if checkpoint.exists():
        for line in checkpoint.read_text().splitlines()[2:]:
            topic, partition, offset = line.split()
            offsets[(topic, int(partition))] = int(offset)
    return offsets


async def set_topic_configs(kafka: Any, topics: Iterator[str] | list[str], overrides: dict[str, str]) -> None:
    """Set the changelogs' configs to the product's (``COMPACTION``) with ``overrides`` (AlterConfigs
    replaces a topic's whole set, so the product's are sent again)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from berth.bus.topics_admin import COMPACTION

    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        resources = [
            ConfigResource(
                ConfigResourceType.TOPIC, topic, configs={"min.insync.replicas": "1", **COMPACTION, **overrides}
            )
            for topic in topics
        ]
        await admin.alter_configs(resources)
    finally:
        await admin.close()


async def _roll_and_clean(kafka: Any, changelogs: Changelogs, data_dir: Path, rewrite: list[Any]) -> None:
    """Append ``rewrite`` (``(topic, partition, key, value)``: values the tables already hold) and,
    after ``segment.ms``, the last record of each partition again, which rolls its active segment;
    then wait until the log cleaner has cleaned every partition up to that roll."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(**kafka.client_options(), linger_ms=20)
    await producer.start()
    try:
        for topic, partition, key, value in rewrite:
            await producer.send(topic, value, key=key, partition=partition)
        await producer.flush()
        await asyncio.sleep(2 * BENCH_SEGMENT_MS / 1000)
        reader = AIOKafkaConsumer(**kafka.client_options(), enable_auto_commit=False)
        await reader.start()
        try:
            partitions = [TopicPartition(changelogs.topics[table], p) for (table, p) in changelogs.last_record]
            ends = await reader.end_offsets(partitions)
        finally:
            await reader.stop()
        for (table, partition), (key, value) in changelogs.last_record.items():
            await producer.send_and_wait(changelogs.topics[table], value, key=key, partition=partition)
    finally:
        await producer.stop()
    started = time.perf_counter()
    while True:
        cleaned = _cleaned_offsets(data_dir)
        if all(cleaned.get((tp.topic, tp.partition), -1) >= offset for tp, offset in ends.items()):
            return
        if time.perf_counter() - started > WORKER_TIMEOUT_S:
            raise SystemExit(f"error: the log cleaner did not clean the changelogs in {WORKER_TIMEOUT_S:.0f} s")
        await asyncio.sleep(1.0)


async def compact(kafka: Any, changelogs: Changelogs, data_dir: Path) -> tuple[float, tuple[int, int]]:
    """Roll the changelogs' active segments and wait for the cleaner to clean up to the roll, then
    once more so that it drops the tombstones; seconds taken, and the records and tombstones left
    after the first clean.

    The first clean stamps each tombstone with its deletion horizon (now + ``delete.retention.ms``);
    the cleaner drops it in a later clean after that, and cleans again only when enough is dirty.
    In production the tables' updates make the next clean; here the bench writes every live key's
    value again (the tables do not change), with ``min.cleanable.dirty.ratio`` lowered so that this
    is enough."""
    started = time.perf_counter()
    await set_topic_configs(
        kafka,
        list(changelogs.topics.values()),
        {
            "segment.ms": str(BENCH_SEGMENT_MS),
            "delete.retention.ms": str(BENCH_DELETE_RETENTION_MS),
            "min.cleanable.dirty.ratio": BENCH_DIRTY_RATIO,
        },
    )
    await asyncio.sleep(2 * BENCH_SEGMENT_MS / 1000)
    await _roll_and_clean(kafka, changelogs, data_dir, [])
    counts = {changelogs.topics[table]: count for table, count in changelogs.partitions.items()}
    first_clean = await count_records(kafka, counts)
    await asyncio.sleep(2 * BENCH_DELETE_RETENTION_MS / 1000)
    live = [
        (changelogs.topics[table], partition_of(key, changelogs.partitions[table]), json.dumps(key).encode(), value)
        for table, values in changelogs.tables.items()
        for key, value in values.items()
    ]
    await _roll_and_clean(kafka, changelogs, data_dir, live)
    return time.perf_counter() - started, first_clean


async def count_records(kafka: Any, partitions: dict[str, int]) -> tuple[int, int]:
    """Records and tombstones the changelogs (topic → partition count) hold now: what a recovery reads."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    reader = AIOKafkaConsumer(**kafka.client_options(), enable_auto_commit=False, auto_offset_reset="earliest")
    await reader.start()
    try:
        assigned = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
        reader.assign(assigned)
        await reader.seek_to_beginning(*assigned)
        ends = await reader.end_offsets(assigned)
        records = tombstones = 0
        remaining = {tp for tp in assigned if ends[tp] > 0}
        while remaining:
            batches = await reader.getmany(timeout_ms=1000, max_records=10_000)
            for messages in batches.values():
                records += len(messages)
                tombstones += sum(1 for message in messages if message.value is None)
            for tp in list(remaining):
                if await reader.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        return records, tombstones
    finally:
        await reader.stop()


async def _wait_for_probe(reader: Any, name: str, worker: subprocess.Popen[bytes], log: Path) -> float:
    """Wait until ``reader`` sees a record naming ``name``; returns ``time.time()`` then."""
    try:
        while True:
            batches = await reader.getmany(timeout_ms=200)
            for messages in batches.values():
                for message in messages:
                    if name.encode() in (message.key or b"") or name.encode() in (message.value or b""):
                        return time.time()
            if worker.poll() is not None:
                raise SystemExit(f"error: the service exited ({worker.returncode}) before the probe; see {log}")
    finally:
        await reader.stop()


async def restart(
    kafka: Any,
    name: str,
    workdir: Path,
    worker_module: str,
    send_probe: Callable[[Any, str], Awaitable[Any]],
) -> dict[str, Any]:
    """Start the service (``worker_module``, which reports its recovered tables), time its recovery and the
    new input ``name`` (``send_probe`` sends it and returns a reader of where its output comes
    out), stop it; the timings and the recovered tables' digests."""
    report = workdir / f"{name}.json"
    log = workdir / f"{name}.log"
    reader = await send_probe(kafka, name)
    started = time.time()
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", worker_module, str(report), kafka.bootstrap],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
        )
    try:
        probed_at = await _wait_for_probe(reader, name, worker, log)
        deadline = time.time() + 60
        while not report.exists() and time.time() < deadline:
            await asyncio.sleep(0.1)
        if not report.exists():
            raise SystemExit(f"error: the service never reported its tables recovered; see {log}")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    recovered = json.loads(report.read_text())
    return {
        "recovered_s": round(recovered["recovered_at"] - started, 2),
        "first_event_s": round(probed_at - started, 2),
        "tables": recovered["tables"],
    }


@contextlib.contextmanager
def broker() -> Iterator[tuple[str, Path]]:
    """A broker of the bench's own: its bootstrap servers and its data directory (segment files,
    the log cleaner's checkpoint)."""
    from berth_dev.devstack.cache import ensure_kafka_jars, kafka_jars_present
    from berth_dev.devstack.kafka import KafkaProcess

    if not kafka_jars_present():
        ensure_kafka_jars(quiet=True)
    with KafkaProcess() as broker:
        assert broker.data_dir is not None
        yield broker.bootstrap_servers, broker.data_dir / "data"


def restart_figures(before: dict[str, Any], after: dict[str, Any], compact_s: float, write_s: float) -> dict[str, Any]:
    """The timings both benches report, and the topic settings their compaction step used."""
    return {
        "before_recovered_s": before["recovered_s"],
        "before_first_event_s": before["first_event_s"],
        "after_recovered_s": after["recovered_s"],
        "after_first_event_s": after["first_event_s"],
        "compaction_s": round(compact_s, 1),
        "write_s": round(write_s, 1),
        "bench_topic_settings": f"segment.ms {BENCH_SEGMENT_MS}, delete.retention.ms {BENCH_DELETE_RETENTION_MS} and "
        f"min.cleanable.dirty.ratio {BENCH_DIRTY_RATIO} for the compaction step, "
        f"min.compaction.lag.ms {DAY_MS} before it",
        "niceness": os.nice(0),
    }
