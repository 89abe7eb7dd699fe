"""The binder service: commands in, cluster API calls, results out, then offsets committed.

Reads ``berth.scheduler.commands.v1`` as group ``berth-binder`` (read_committed: only commands of
committed decision transactions). For each batch:

1. applies the commands through the :class:`~.applier.Binder`: commands with the same partition
   key (pod UID, pool, node) one after another in log order, others concurrently (bounded);
2. publishes each :class:`CommandResult` to ``berth.scheduler.results.v1`` (for audit) and, when
   the command did not apply (:attr:`CommandResult.concerns_issuing_cell`), to the issuing cell's
   partition of ``berth.scheduler.inputs.v1`` (``partition = command.cell``, so the decision cell
   learns the failure in its ordered log; an applied binding reaches it as the bound pod's event);
   failed commands also go, whole, to ``berth.deadletter.v1`` with the reason;
3. waits until the broker has all of that, then commits the batch's offsets.

With ``report_unschedulable`` (on by default with the Kubernetes backend), a second consumer
(group ``<group>-decisions``, starting at the end of the topic the first time: old verdicts are
stale) reads ``berth.scheduler.decisions.v1`` and hands unschedulable verdicts to the
:class:`~.unschedulable.UnschedulableReporter`, committing after each batch (at least once).

A crash between 1 and 3 re-applies the batch: the backend operations are idempotent, so the
cluster is unchanged and the results say ``applied`` again. Result records carry the command id
as their CloudEvents id, so readers can tell a repeat from a new result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition
from berth.schemas import CommandResult, DeadLetter
from berth.schemas.envelope import encode
from berth.schemas.topics import COMMANDS, DEAD_LETTER, DECISION_INPUTS, DECISIONS

from berth.bus import EventConsumer, EventProducer, dead_letter_for, ensure_topics
from berth.logs import get_logger
from berth.metrics import EVENTS_PUBLISHED, labelled
from berth.settings import BerthSettings

from .applier import Binder, Verdict
from .unschedulable import UnschedulableReporter

log = get_logger(__name__)
GROUP = "berth-binder"
SOURCE = "berth/binder"
CONSUMER_NAME = "binder"


@dataclass(frozen=True)
class SourceRecord:
    """Where a command came from, whole, so that it can be dead-lettered as it was."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def of(cls, record: Any) -> SourceRecord:
        return cls(record.topic, record.partition, record.offset, record.key, record.value, tuple(record.headers or ()))


class Outputs(Protocol):
    """Where the binder's answers go. ``result``/``dead_letter`` queue; ``flush`` waits for all."""

    cells: frozenset[int] | None
    """The partitions of the decision-input topic (None: not known, accept any cell)."""

    async def result(self, result: CommandResult, cell: int | None) -> None:
        """To the results topic, and to partition ``cell`` of the decision-input topic (unless None)."""
        ...

    async def dead_letter(self, letter: DeadLetter) -> None: ...

    async def flush(self) -> None: ...


class KafkaOutputs:
    """:class:`Outputs` on an idempotent producer."""

    def __init__(self, producer: EventProducer, cells: frozenset[int] | None) -> None:
        self._producer = producer
        self.cells = cells
        self._in_flight: list[asyncio.Future[Any]] = []

    async def result(self, result: CommandResult, cell: int | None) -> None:
        self._in_flight.append(await self._producer.send(result, event_id=result.command_id))
        if cell is None:
            return
        record = encode(result, source=SOURCE, event_id=result.command_id)
        inputs = self._producer.names.topic(DECISION_INPUTS)
        self._in_flight.append(
            await self._producer.raw.send(inputs, record.value, key=record.key, headers=record.headers, partition=cell)
        )
        labelled(EVENTS_PUBLISHED, inputs, result.type).inc()

    async def dead_letter(self, letter: DeadLetter) -> None:
        self._in_flight.append(await self._producer.send(letter, topic=DEAD_LETTER.name))

    async def flush(self) -> None:
        pending, self._in_flight = self._in_flight, []
        await asyncio.gather(*pending)


class CommandHandler:
    """Everything the service does with decoded commands, without Kafka consumption (testable
    with fake outputs). ``max_in_flight`` bounds commands applied at the same time."""

    def __init__(self, binder: Binder, outputs: Outputs, *, max_in_flight: int = 32) -> None:
        self.binder = binder
        self.outputs = outputs
        self._slots = asyncio.Semaphore(max_in_flight)

    async def handle(self, command: Any, source: SourceRecord) -> Verdict:
        cells = self.outputs.cells
        known_cell = cells is None or command.cell in cells
        if not known_cell:
            # The issuing cell could never learn the outcome, so its view of the cluster would
            # drift from the cluster's: refuse rather than apply.
            verdict = self.binder.refuse(
                command,
                f"cell {command.cell} is not a partition of {DECISION_INPUTS.name} (partitions: {sorted(cells)})",
            )
        else:
            async with self._slots:
                verdict = await self.binder.apply(command)
        copy_to = command.cell if known_cell and verdict.result.concerns_issuing_cell else None
        await self.outputs.result(verdict.result, copy_to)
        if verdict.dead_letter_reason is not None:
            await self.outputs.dead_letter(
                dead_letter_for(
                    topic=source.topic,
                    partition=source.partition,
                    offset=source.offset,
                    key=source.key,
                    value=source.value,
                    headers=source.headers,
                    consumer=CONSUMER_NAME,
                    reason=verdict.dead_letter_reason,
                )
            )
        return verdict

    async def handle_batch(self, items: Sequence[tuple[Any, SourceRecord]]) -> list[Verdict]:
        """Apply a batch: same partition key in order, different keys concurrently. Returns the
        verdicts in input order once every result is queued (not yet flushed)."""
        by_key: dict[str, list[int]] = {}
        for index, (command, _) in enumerate(items):
            by_key.setdefault(command.partition_key, []).append(index)
        verdicts: list[Verdict | None] = [None] * len(items)

        async def run_in_order(indices: list[int]) -> None:
            for index in indices:
                command, source = items[index]
                verdicts[index] = await self.handle(command, source)

        await asyncio.gather(*(run_in_order(indices) for indices in by_key.values()))
        return [v for v in verdicts if v is not None]


class BinderService:
    """The Kafka loop around a :class:`CommandHandler`."""

    def __init__(
        self,
        settings: BerthSettings,
        binder: Binder,
        *,
        max_in_flight: int = 32,
        max_batch: int = 500,
        group: str = GROUP,
        report_unschedulable: bool = False,
    ) -> None:
        self.settings = settings
        self.group = group
        self.binder = binder
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self.consumer = EventConsumer(
            settings.kafka,
            [COMMANDS],
            group_id=group,
            name=CONSUMER_NAME,
            isolation_level="read_committed",
            max_poll_records=max_batch,
        )
        self.producer = EventProducer(settings.kafka, source=SOURCE)
        self.decisions = (
            EventConsumer(
                settings.kafka,
                [DECISIONS],
                group_id=f"{group}-decisions",
                name=f"{CONSUMER_NAME}-decisions",
                auto_offset_reset="latest",
                isolation_level="read_committed",
                max_poll_records=max_batch,
            )
            if report_unschedulable
            else None
        )

    async def run(self, stop: asyncio.Event) -> None:
        await ensure_topics(self.settings.kafka)
        await self.producer.start()
        try:
            partitions = await self.producer.raw.partitions_for(self.producer.names.topic(DECISION_INPUTS))
            outputs = KafkaOutputs(self.producer, frozenset(partitions) if partitions else None)
            handler = CommandHandler(self.binder, outputs, max_in_flight=self.max_in_flight)
            start_backend = getattr(self.binder.backend, "start", None)
            if start_backend is not None:  # e.g. the Kubernetes backend's node informer
                await start_backend()
            await self.consumer.start()
            log.info(
                "binder started",
                group=self.settings.kafka.names.group(self.group),
                cells=sorted(partitions or ()),
                qps=self.binder.limiter.qps,
                burst=self.binder.limiter.burst,
                report_unschedulable=self.decisions is not None,
            )
            try:
                if self.decisions is None:
                    await self._command_loop(handler, outputs, stop)
                else:  # one failing loop stops the other (TaskGroup cancels its siblings)
                    async with asyncio.TaskGroup() as loops:
                        loops.create_task(self._command_loop(handler, outputs, stop))
                        loops.create_task(self._report_loop(stop))
            finally:
                await self.consumer.stop()
        finally:
            await self.producer.stop()
            await self.binder.backend.close()
            log.info("binder stopped")

    async def _command_loop(self, handler: CommandHandler, outputs: KafkaOutputs, stop: asyncio.Event) -> None:
        while not stop.is_set():
            batches = await self.consumer.raw.getmany(timeout_ms=200, max_records=self.max_batch)
            if batches:
                await self._process(handler, outputs, batches)

    async def _report_loop(self, stop: asyncio.Event) -> None:
        consumer = self.decisions
        assert consumer is not None
        reporter = UnschedulableReporter(self.binder, max_in_flight=self.max_in_flight)
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.raw.getmany(timeout_ms=200, max_records=self.max_batch)
                if not batches:
                    continue
                events = []
                for tp in sorted(batches, key=lambda t: t.partition):
                    for record in batches[tp]:
                        # Most records are placements of pods never reported: decided by their
                        # headers, their bodies (every node's verdict) are not parsed at all.
                        header = dict(record.headers or ()).get
                        if not reporter.wants(header("ce_type"), header("ce_outcome"), header("ce_subject")):
                            continue
                        consumed = await consumer.accept(record)
                        if consumed is not None:
                            events.append(consumed.event)
                results = await reporter.handle_batch(events)
                await consumer.commit(
                    {(tp.topic, tp.partition): records[-1].offset + 1 for tp, records in batches.items() if records}
                )
                if results:
                    log.debug("verdicts handled", **{r: list(results.values()).count(r) for r in set(results.values())})
        finally:
            await consumer.stop()

    async def _process(
        self, handler: CommandHandler, outputs: KafkaOutputs, batches: dict[TopicPartition, list[Any]]
    ) -> None:
        items: list[tuple[Any, SourceRecord]] = []
        for tp in sorted(batches, key=lambda t: t.partition):
            for record in batches[tp]:
                consumed = await self.consumer.accept(record)  # undecodable → dead-letter topic
                if consumed is not None:
                    items.append((consumed.event, SourceRecord.of(record)))
        verdicts = await handler.handle_batch(items)
        await outputs.flush()
        await self.consumer.commit(
            {(tp.topic, tp.partition): records[-1].offset + 1 for tp, records in batches.items() if records}
        )
        log.debug(
            "batch committed", commands=len(verdicts), failed=sum(1 for v in verdicts if v.result.status == "failed")
        )
