"""The decision service: one writer per cell, exactly one set of commands per decision.

Each partition of ``berth.scheduler.inputs.v1`` is a cell. Workers form the consumer group
``berth-decision``; whoever holds a partition is the cell's only writer. For each batch of a cell's
inputs, the commands (to the binder; hand-overs of pods to ``berth.scheduler.handovers.v1`` for the
inventory), the decision records and the input offset are committed in ONE Kafka
transaction (a transactional producer per cell, id ``berth-decision-cell-<n>``, which also fences
a zombie predecessor). A crash aborts the open transaction: nothing of it is visible
(consumers read committed), and the batch is decided again by whoever takes the cell over.

Taking a cell over means rebuilding its state: the new owner restores the cell's latest snapshot
(:mod:`.snapshots`, written every ``snapshot_every`` inputs in the transaction that commits the
offset it covers) and folds the cell's log from there — from the start without one — up to the
committed offset through the same pure :class:`~berth.cells.Cell`, discarding the outputs (they
were committed before). Because the cell is deterministic, the rebuilt state, including the
assumed placements of commands still in flight, is the one the previous owner had.
"""

from __future__ import annotations

import asyncio
import pickle
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from berth.schemas import HandOverPod, InputPosition, ScalePool, SchedulerConfigAnnounced
from berth.schemas.envelope import EnvelopeError, decode, encode
from berth.schemas.topics import DECISION_INPUTS, DECISIONS, topic_for_event

from berth.bus import EventConsumer, ensure_topics
from berth.bus.streams import partition_counts
from berth.cells import Cell, CellConfig, CellDecision
from berth.logs import get_logger
from berth.metrics import (
    DESCHEDULER_EVICTIONS,
    DESCHEDULER_LOOPS_PREVENTED,
    PENDING_PODS,
    PODS_HANDED_OVER,
    POOL_DESIRED_REPLICAS,
    SchedulingMetrics,
)
from berth.settings import BerthSettings, KafkaSettings

from .snapshots import (
    code_fingerprint,
    decode_cell,
    encode_cell,
    ensure_snapshot_topic,
    latest_snapshot,
    return_free_memory,
    write_snapshot,
)

log = get_logger(__name__)
GROUP = "berth-decision"
SOURCE = "berth/decision"
CHUNK = 200
"""Records decided between yields to the event loop. Deciding is CPU work on the loop's thread;
aiokafka's heartbeats need the loop too, and a member that misses them for a session timeout
is thrown out of the group (its cells move, its open transaction is fenced)."""


@dataclass
class CellWorker:
    """The writer of one cell: its folds and its transactional producer."""

    partition: int
    cell: Cell
    producer: AIOKafkaProducer
    announced: bool = False
    decided: int = field(default=0)
    since_snapshot: int = 0
    """Inputs folded since the cell's last snapshot (or since the start of its log)."""
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a transaction is open: revocation waits for it instead of closing the producer
    under a batch in flight."""
    evictions_counted: Counter[str] = field(default_factory=Counter)
    loops_counted: Counter[str] = field(default_factory=Counter)
    """The cell's descheduling totals already in the metrics (those folded before this worker
    took the cell over are not counted again)."""

    def count_descheduling(self) -> None:
        """Add what the cell's descheduling rounds did since the last call to the metrics."""
        state = self.cell.descheduling
        for strategy, total in sorted(state.evictions.items()):
            DESCHEDULER_EVICTIONS.labels(strategy).inc(total - self.evictions_counted[strategy])
        for strategy, total in sorted(state.loops_prevented.items()):
            DESCHEDULER_LOOPS_PREVENTED.labels(strategy).inc(total - self.loops_counted[strategy])
        self.evictions_counted, self.loops_counted = Counter(state.evictions), Counter(state.loops_prevented)

    async def stop(self) -> None:
        async with self.busy:
            await self.producer.stop()


async def rebuild(kafka: KafkaSettings, cell: Cell, partition: int, until: int, start: int = 0) -> int:
    """Fold the cell's committed inputs ``[start, until)`` into ``cell`` (which has folded those
    before ``start``: a fresh cell for 0, a restored snapshot otherwise); returns how many."""
    if until <= start:
        return 0

    tp = TopicPartition(kafka.names.topic(DECISION_INPUTS), partition)
    reader = AIOKafkaConsumer(
        **kafka.client_options(), group_id=None, enable_auto_commit=False, isolation_level="read_committed"
    )
    folded = 0
    try:
        await reader.start()
        reader.assign([tp])
        if start:
            reader.seek(tp, start)
        else:
            await reader.seek_to_beginning(tp)
        position = await reader.position(tp)
        while position < until:
            batch = await reader.getmany(tp, timeout_ms=1000, max_records=2000)
            for record in batch.get(tp, []):
                if record.offset >= until:
                    break
                try:
                    event = decode(DECISION_INPUTS, record.key, record.value, record.headers).event
                except EnvelopeError:
                    continue  # dead-lettered when it was first consumed
                cell.handle(event, InputPosition(topic=tp.topic, partition=partition, offset=record.offset))
                folded += 1
                if folded % CHUNK == 0:
                    await asyncio.sleep(0)
            position = await reader.position(tp)
    finally:
        await reader.stop()
    return folded


class DecisionService:
    """Runs the cells assigned to this worker until stopped."""

    def __init__(self, settings: BerthSettings, config: CellConfig) -> None:
        self.settings = settings
        self.config = config
        self.workers: dict[int, CellWorker] = {}
        self._queues_reported_at = 0.0
        self.fingerprint = code_fingerprint() if settings.snapshot_every else ""
        self.scheduling_metrics = SchedulingMetrics()
        """kube-scheduler's metrics, timed by each cell's engine once the cell is rebuilt (a
        rebuild re-decides inputs already decided: those are not attempts)."""
        self.consumer = EventConsumer(
            settings.kafka,
            [DECISION_INPUTS],
            group_id=GROUP,
            name="decision",
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            max_poll_records=CHUNK,
            session_timeout_ms=30_000,
            heartbeat_interval_ms=3_000,
        )

    async def _on_assign(self, assigned: set[TopicPartition]) -> None:
        # aiokafka may already fetch from a partition while this callback is still rebuilding it
        # (it initialises positions before calling the listener). Pause the new cells so that no
        # batch reaches run() before its worker exists; each is resumed at exactly the offset
        # its rebuild stopped at.
        new = sorted((tp for tp in assigned if tp.partition not in self.workers), key=lambda t: t.partition)
        self.consumer.raw.pause(*new)
        for tp in new:
            committed = await self.consumer.raw.committed(tp) or 0
            started = time.monotonic()
            cell, restored_at = await self._restore(tp.partition, committed)
            folded = await rebuild(self.settings.kafka, cell, tp.partition, committed, start=restored_at)
            cell.engine.observe(self.scheduling_metrics)
            producer = AIOKafkaProducer(
                **self.settings.kafka.client_options(),
                enable_idempotence=True,
                transactional_id=self.settings.kafka.names.group(f"berth-decision-cell-{tp.partition}"),
                linger_ms=2,
                retry_backoff_ms=10,
            )
            try:
                await producer.start()
            except BaseException:
                await producer.stop()  # nothing left open when the broker refuses
                raise
            self.workers[tp.partition] = CellWorker(
                tp.partition,
                cell,
                producer,
                since_snapshot=committed - restored_at,
                evictions_counted=Counter(cell.descheduling.evictions),
                loops_counted=Counter(cell.descheduling.loops_prevented),
            )
            self.consumer.raw.seek(tp, committed)
            self.consumer.raw.resume(tp)
            log.info(
                "cell taken over",
                cell=tp.partition,
                committed_offset=committed,
                snapshot_offset=restored_at if restored_at else None,
                inputs_folded=folded,
                pending=cell.pending_count,
                rebuild_s=round(time.monotonic() - started, 3),
            )

    async def _restore(self, partition: int, committed: int) -> tuple[Cell, int]:
        """The cell from its latest usable snapshot and the offset to fold on from, or a fresh
        cell and 0 (no snapshot, snapshots off, or one this code or configuration cannot use)."""
        if self.settings.snapshot_every and committed:
            try:
                snapshot = await latest_snapshot(self.settings.kafka, partition, self.fingerprint, until=committed)
                if snapshot is not None:
                    return decode_cell(snapshot.data, partition, self.config), snapshot.offset
            except (KafkaError, ValueError, EOFError, pickle.UnpicklingError, zlib.error) as exc:
                log.warning(
                    "cell snapshot not usable; rebuilding the cell from its log", cell=partition, error=repr(exc)
                )
        return Cell(partition, self.config), 0

    async def _on_revoke(self, revoked: set[TopicPartition]) -> None:
        for tp in revoked:
            worker = self.workers.pop(tp.partition, None)
            if worker is not None:
                await worker.stop()
                log.info("cell handed over", cell=tp.partition)

    async def run(self, stop: asyncio.Event) -> None:
        await ensure_topics(self.settings.kafka)
        if self.settings.snapshot_every:
            inputs = self.settings.kafka.names.topic(DECISION_INPUTS)
            cells = (await partition_counts(self.settings.kafka, [inputs]))[inputs]
            await ensure_snapshot_topic(self.settings.kafka, cells)
        await self.consumer.start()
        self._report_queues()  # the queues' series exist (at 0) before the first batch
        try:
            while not stop.is_set():
                batches = await self.consumer.raw.getmany(timeout_ms=200, max_records=CHUNK)
                for tp in sorted(batches, key=lambda t: t.partition):
                    worker = self.workers.get(tp.partition)
                    if worker is not None and batches[tp]:
                        await self._process(worker, tp, batches[tp])
                    elif batches[tp] and tp in self.consumer.raw.assignment():
                        # Never drop a cell's input: without its worker (a takeover still in
                        # progress) the batch is fetched again once the cell is rebuilt.
                        log.warning(
                            "batch for a cell without its worker; fetching it again",
                            cell=tp.partition,
                            offset=batches[tp][0].offset,
                        )
                        self.consumer.raw.seek(tp, batches[tp][0].offset)
                self._report_queues()
        finally:
            await self.consumer.stop()
            for worker in list(self.workers.values()):
                await worker.stop()
            self.workers.clear()

    async def _process(self, worker: CellWorker, tp: TopicPartition, records: list[Any]) -> None:
        if self.workers.get(tp.partition) is not worker:
            return  # the cell moved while this batch was fetched; its new owner decides it
        try:
            async with worker.busy:
                await self._decide_batch(worker, tp, records)
        except KafkaError as exc:
            # The transaction was aborted, but the cell already folded the batch: its state
            # is ahead of what was committed. Throw it away and rebuild from the committed
            # offset, if this worker still owns the cell (re-initialising the transactional id
            # otherwise would fence the rightful owner).
            log.warning("batch aborted; rebuilding the cell", cell=tp.partition, error=repr(exc))
            self.workers.pop(tp.partition, None)
            try:
                await worker.producer.stop()
            except KafkaError:
                pass
            if tp in self.consumer.raw.assignment():
                await self._on_assign({tp})  # rebuilds and resumes the cell at its committed offset

    async def _decide_batch(self, worker: CellWorker, tp: TopicPartition, records: list[Any]) -> None:
        names = self.settings.kafka.names
        outputs: list[CellDecision] = []
        for record in records:
            consumed = await self.consumer.accept(record)  # bad records → dead-letter topic
            if consumed is None:
                continue
            position = InputPosition(topic=tp.topic, partition=tp.partition, offset=record.offset)
            outputs.extend(worker.cell.handle(consumed.event, position))
            await asyncio.sleep(0)  # one input may retry many pods: let heartbeats through
        async with worker.producer.transaction():
            if not worker.announced:
                await self._announce(worker)
            for decision in outputs:
                for command in decision.commands:
                    # To the binder (commands topic), or a hand-over to the inventory: to the
                    # partition where the inventory keeps the pod's route.
                    encoded = encode(command, source=SOURCE, event_id=command.command_id)
                    partition = command.route_partition if isinstance(command, HandOverPod) else None
                    await worker.producer.send(
                        names.topic(topic_for_event(command)),
                        encoded.value,
                        key=encoded.key,
                        headers=encoded.headers,
                        partition=partition,
                    )
                encoded = encode(decision.record, source=SOURCE, event_id=decision.record.decision_id)
                await worker.producer.send(
                    names.topic(DECISIONS), encoded.value, key=encoded.key, headers=encoded.headers
                )
                if decision.record.outcome == "handed-over":
                    PODS_HANDED_OVER.labels(str(worker.partition)).inc()
                for command in decision.commands:
                    if isinstance(command, ScalePool):
                        POOL_DESIRED_REPLICAS.labels(command.namespace, command.pool).set(command.replicas)
            worker.since_snapshot += len(records)
            every = self.settings.snapshot_every
            snapshot = bool(every and worker.since_snapshot >= every)
            if snapshot:
                await self._snapshot(worker, records[-1].offset + 1)
            await worker.producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, names.group(GROUP))
        if snapshot:
            return_free_memory()  # the snapshot's buffers, sent and committed by now
        worker.decided += len(outputs)
        worker.count_descheduling()

    async def _snapshot(self, worker: CellWorker, offset: int) -> None:
        """Snapshot the cell as of ``offset`` in the open transaction, which commits that offset:
        both become visible together, or neither."""
        started = time.monotonic()
        data = encode_cell(worker.cell)
        chunks = await write_snapshot(
            worker.producer, worker.partition, offset, data, self.fingerprint, names=self.settings.kafka.names
        )
        worker.since_snapshot = 0
        log.info(
            "cell snapshot written",
            cell=worker.partition,
            offset=offset,
            bytes=len(data),
            chunks=chunks,
            seconds=round(time.monotonic() - started, 3),
        )

    async def _announce(self, worker: CellWorker) -> None:
        config = worker.cell.config
        config_hash = config.hash
        event = SchedulerConfigAnnounced(
            config_hash=config_hash,
            config_version=config.version,
            document=config.document,
            cell=worker.cell.cell_name,
            announced_at=datetime.now(UTC),
        )
        encoded = encode(event, source=SOURCE, event_id=f"{worker.cell.cell_name}/{config_hash}")
        await worker.producer.send(
            self.settings.kafka.names.topic(DECISIONS), encoded.value, key=encoded.key, headers=encoded.headers
        )
        worker.announced = True

    def _report_queues(self) -> None:
        """kube's queues: pods placed and awaiting their binding are in none of them. At most
        once a second: counting the placements in flight walks them."""
        now = time.monotonic()
        if now - self._queues_reported_at < 1.0:
            return
        self._queues_reported_at = now
        cells = [w.cell for w in self.workers.values()]
        unschedulable = sum(c.unschedulable_count for c in cells)
        assumed = sum(1 for c in cells for uid in c.queue.assumed if uid in c.queue.pending)
        PENDING_PODS.labels("unschedulable").set(unschedulable)
        PENDING_PODS.labels("active").set(max(0, sum(c.pending_count for c in cells) - unschedulable - assumed))
        PENDING_PODS.labels("backoff").set(0)
