"""Snapshots of decision cells, so that taking a cell over does not re-read its log from offset 0.

A cell's state is a pure function of its input log, which is why a new owner can rebuild it by
folding the log from the start — in time that grows with the log's history. A snapshot is
that state as of an input offset: the new owner restores the latest one and folds only the
inputs after it, in time that grows with the snapshot interval, not with history.

Where they live: the compacted topic :data:`SNAPSHOTS` (one partition per cell, like the inputs),
written by the cell's transactional producer **in the transaction that commits the input offset
the snapshot covers**, so a snapshot is visible (read_committed) exactly when that offset is. A
snapshot is split into chunks below Kafka's default message size; record key
``cell-<n>/<chunk>`` (compaction keeps each chunk's latest version), headers say which snapshot
(its offset), the chunk's place and count, and the fingerprint below.

What they hold: :meth:`berth.cells.Cell.folded` pickled and zlib-compressed. Pickle is for our
own objects written and read by the same code: a snapshot is used only when its **fingerprint**
(a digest of the source of ``berth.core``, ``berth.cells`` and ``berth.schemas`` plus the
Python version) and its configuration hash match the running service's; anything else, or
anything unreadable, is ignored and the cell is rebuilt from its log as before. The broker is
trusted as it is for the commands it carries (a binding is executed from it), so reading a
pickle from it adds no new trust.

Retention: the inputs topic must keep the records after a cell's latest snapshot; a snapshot
every ``snapshot_every`` inputs keeps that a small tail whatever the topic's retention.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import pickle
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from berth.schemas.topics import CONTRACT_NAMES, KafkaNames

from berth.bus.topics_admin import TopicSpec, create_missing_topics
from berth.cells import Cell, CellConfig
from berth.logs import get_logger
from berth.settings import KafkaSettings

log = get_logger(__name__)

SNAPSHOTS = "berth.scheduler.cell-snapshots.v1"
"""The compacted topic of cell snapshots (contract-style name); partition = cell."""
CHUNK_BYTES = 512 * 1024
"""Below the brokers' default ``message.max.bytes`` (1 MiB) with room for headers."""
FORMAT = 1


def code_fingerprint() -> str:
    """A digest of the code that defines a cell's state: a snapshot from other code is not used."""
    import berth.schemas

    import berth.cells
    import berth.core

    digest = hashlib.sha256(f"format {FORMAT}; python {sys.version_info[:2]}".encode())
    for package in (berth.core, berth.cells, berth.schemas):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


def encode_cell(cell: Cell) -> bytes:
    """The cell's folded state as snapshot bytes (with its configuration hash inside)."""
    payload = {"format": FORMAT, "cell": cell.cell, "config_hash": cell.config.hash, "folded": cell.folded()}
    return zlib.compress(pickle.dumps(payload, protocol=5), 1)


def return_free_memory() -> bool:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``); False where
    there is no such call (another C library). Called after each snapshot: encoding one
    allocates buffers of several MiB (the pickle, its compressed form, the chunks), and once
    freed, glibc keeps that memory in the heap, interleaved with the cell's live objects, so the
    process grew a few MiB with every snapshot (the soak in bench/pipeline/README.md: +46.6
    MiB/h, in steps one snapshot interval apart). A cell of 5,000 nodes and 4,000 pods encoded
    twelve times in one process ends at 253.1 MiB RSS without the trim, 226.4 MiB with it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def decode_cell(data: bytes, cell: int, config: CellConfig) -> Cell:
    """The cell ``data`` describes; ValueError when it is another cell's or another configuration's."""
    payload = pickle.loads(zlib.decompress(data))
    if payload.get("format") != FORMAT or payload.get("cell") != cell:
        raise ValueError(f"snapshot is of cell {payload.get('cell')} (format {payload.get('format')})")
    if payload.get("config_hash") != config.hash:
        raise ValueError(f"snapshot was folded with configuration {payload.get('config_hash')}, not {config.hash}")
    folded = payload["folded"]
    return Cell.restored(cell, config, folded, folded["queue"].scheduler_name)


@dataclass(frozen=True)
class Snapshot:
    offset: int
    """The first input offset NOT covered: restore, then fold the inputs from here."""
    data: bytes


async def ensure_snapshot_topic(kafka: KafkaSettings, partitions: int) -> None:
    await create_missing_topics(kafka, [TopicSpec(kafka.names.topic(SNAPSHOTS), partitions, compacted=True)])


async def write_snapshot(
    producer: AIOKafkaProducer,
    cell: int,
    offset: int,
    data: bytes,
    fingerprint: str,
    *,
    names: KafkaNames = CONTRACT_NAMES,
) -> int:
    """Send ``data`` as the cell's snapshot covering inputs below ``offset``, in the producer's
    open transaction, to the snapshot topic of the installation ``names`` describes. Returns the
    number of chunks."""
    chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    for index, chunk in enumerate(chunks):
        headers = [
            ("offset", str(offset).encode()),
            ("chunk", str(index).encode()),
            ("chunks", str(len(chunks)).encode()),
            ("fingerprint", fingerprint.encode()),
        ]
        await producer.send(
            names.topic(SNAPSHOTS), chunk, key=f"cell-{cell}/{index}".encode(), partition=cell, headers=headers
        )
    return len(chunks)


async def latest_snapshot(kafka: KafkaSettings, cell: int, fingerprint: str, *, until: int) -> Snapshot | None:
    """The newest complete snapshot of ``cell`` with ``fingerprint`` that covers no input at or
    after ``until`` (the committed offset); None when there is none."""
    tp = TopicPartition(kafka.names.topic(SNAPSHOTS), cell)
    reader = AIOKafkaConsumer(
        **kafka.client_options(), group_id=None, enable_auto_commit=False, isolation_level="read_committed"
    )
    parts: dict[int, dict[int, bytes]] = {}
    counts: dict[int, int] = {}
    try:
        await reader.start()
        reader.assign([tp])  # the topic exists: the service creates it before taking cells
        await reader.seek_to_beginning(tp)
        end = (await reader.end_offsets([tp]))[tp]
        while await reader.position(tp) < end:
            batch = await reader.getmany(tp, timeout_ms=1000, max_records=500)
            for record in batch.get(tp, []):
                headers = {key: value.decode() for key, value in record.headers}
                if headers.get("fingerprint") != fingerprint:
                    continue
                offset = int(headers["offset"])
                if offset > until:
                    continue
                parts.setdefault(offset, {})[int(headers["chunk"])] = record.value or b""
                counts[offset] = int(headers["chunks"])
    finally:
        await reader.stop()
    for offset in sorted(parts, reverse=True):
        if len(parts[offset]) == counts[offset]:
            return Snapshot(offset, b"".join(parts[offset][i] for i in range(counts[offset])))
    return None
