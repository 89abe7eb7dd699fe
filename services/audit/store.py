"""Idempotent writes of the audit trail, one transaction per batch of Kafka records.

Each batch's rows and the consumer positions after it are committed together, so a crash
between Postgres and Kafka neither loses nor duplicates rows: on restart the service seeks to
the positions stored here, not to Kafka's committed offsets. Rows are keyed by what identifies
them (input position, decision id, command id), and inserts skip existing keys. A decision id
that comes back with a different hash is a determinism bug: it is recorded, counted, and the
first version kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.schemas import CommandResult, DecisionRecord, SchedulerConfigAnnounced
from berth.schemas.envelope import event_time
from berth.schemas.topics import COMMANDS, CONTRACT_NAMES, DECISION_INPUTS, DECISIONS, RESULTS, KafkaNames
from sqlalchemy import Engine, select
from sqlalchemy.dialects.postgresql import insert

from berth.metrics import AUDIT_WRITE_DURATION, DETERMINISM_ERRORS

from .models import (
    CommandResultRow,
    CommandRow,
    ConsumerPositionRow,
    DecisionRow,
    DeterminismErrorRow,
    InputRow,
    SchedulerConfigRow,
)

CONSUMER = "berth-audit"


def cell_name(partition: int) -> str:
    """Decision cells are named after their partition of the decision-input topic."""
    return f"cell-{partition}"


@dataclass(frozen=True)
class AuditRecord:
    """One consumed record, reduced to what the audit needs."""

    topic: str
    partition: int
    offset: int
    event: Any


@dataclass
class WriteReport:
    inputs: int = 0
    decisions: int = 0
    commands: int = 0
    results: int = 0
    configs: int = 0
    determinism_errors: list[str] = field(default_factory=list)


class AuditStore:
    """Writes batches of audit records; reads back consumer positions. Records carry their
    topics' names on the brokers, those of the installation ``names`` describes."""

    def __init__(self, engine: Engine, *, names: KafkaNames = CONTRACT_NAMES) -> None:
        self._engine = engine
        self._inputs, self._decisions = names.topic(DECISION_INPUTS), names.topic(DECISIONS)
        self._commands, self._results = names.topic(COMMANDS), names.topic(RESULTS)

    def positions(self, consumer: str = CONSUMER) -> dict[tuple[str, int], int]:
        """``{(topic, partition): next offset}`` this consumer has durably written."""
        with self._engine.connect() as connection:
            rows = connection.execute(
                select(ConsumerPositionRow.topic, ConsumerPositionRow.partition, ConsumerPositionRow.next_offset).where(
                    ConsumerPositionRow.consumer == consumer
                )
            )
            return {(row.topic, row.partition): row.next_offset for row in rows}

    def write_batch(self, records: Sequence[AuditRecord], consumer: str = CONSUMER) -> WriteReport:
        report = WriteReport()
        if not records:
            return report
        started = time.perf_counter()
        inputs, configs, decisions, commands, results = [], [], [], [], []
        next_offsets: dict[tuple[str, int], int] = {}
        for record in records:
            key = (record.topic, record.partition)
            next_offsets[key] = max(next_offsets.get(key, 0), record.offset + 1)
            event = record.event
            if record.topic == self._inputs:
                inputs.append(_input_row(record))
            elif record.topic == self._decisions and isinstance(event, SchedulerConfigAnnounced):
                configs.append({"config_hash": event.config_hash, "document": event.document})
            elif record.topic == self._decisions and isinstance(event, DecisionRecord):
                decisions.append(_decision_row(event))
            elif record.topic == self._commands:
                commands.append(
                    {
                        "command_id": event.command_id,
                        "decision_id": event.decision_id,
                        "command_type": event.type,
                        "body": event.model_dump(mode="json"),
                        "issued_at": event.issued_at,
                    }
                )
            elif record.topic == self._results and isinstance(event, CommandResult):
                results.append(
                    {
                        "command_id": event.command_id,
                        "decision_id": event.decision_id,
                        "status": event.status,
                        "reason": event.reason,
                        "attempts": event.attempts,
                        "applied_at": event.applied_at,
                    }
                )
        with self._engine.begin() as connection:
            if configs:
                report.configs = len(_insert_new(connection, SchedulerConfigRow, configs, ["config_hash"]))
            if inputs:
                report.inputs = len(_insert_new(connection, InputRow, inputs, ["topic", "partition", "offset"]))
            if decisions:
                report.decisions = self._write_decisions(connection, decisions, report)
            if commands:
                report.commands = len(_insert_new(connection, CommandRow, commands, ["command_id"]))
            if results:
                # The first final result per command wins; a retried command keeps its first
                # outcome (the binder only reports after its own retries are exhausted).
                report.results = len(_insert_new(connection, CommandResultRow, results, ["command_id"]))
            for (topic, partition), next_offset in next_offsets.items():
                statement = insert(ConsumerPositionRow).values(
                    consumer=consumer, topic=topic, partition=partition, next_offset=next_offset
                )
                connection.execute(
                    statement.on_conflict_do_update(
                        index_elements=["consumer", "topic", "partition"],
                        set_={"next_offset": statement.excluded.next_offset},
                    )
                )
        AUDIT_WRITE_DURATION.observe(time.perf_counter() - started)
        return report

    def _write_decisions(self, connection: Any, rows: list[dict[str, Any]], report: WriteReport) -> int:
        written = _insert_new(connection, DecisionRow, rows, ["decision_id"])
        skipped = [row for row in rows if row["decision_id"] not in written]
        if skipped:
            existing = dict(
                connection.execute(
                    select(DecisionRow.decision_id, DecisionRow.decision_hash).where(
                        DecisionRow.decision_id.in_([row["decision_id"] for row in skipped])
                    )
                ).all()
            )
            for row in skipped:
                recorded = existing.get(row["decision_id"])
                if recorded is not None and recorded != row["decision_hash"]:
                    connection.execute(
                        insert(DeterminismErrorRow).values(
                            decision_id=row["decision_id"],
                            input_topic=row["input_topic"],
                            input_partition=row["input_partition"],
                            input_offset=row["input_offset"],
                            recorded_hash=recorded,
                            new_hash=row["decision_hash"],
                        )
                    )
                    DETERMINISM_ERRORS.inc()
                    report.determinism_errors.append(row["decision_id"])
        return len(written)


def _insert_new(connection: Any, table: Any, rows: list[dict[str, Any]], keys: list[str]) -> set[Any]:
    """Insert the rows whose keys are new; returns the keys inserted (a value for a one-column
    key, else a tuple). RETURNING, because rowcount is not reported for batched inserts.

    One statement with the rows as parameters (SQLAlchemy's "insertmanyvalues"): its SQL is
    compiled once per table and pages of rows go in fixed-size multi-row INSERTs, instead of a
    new statement of a new size, compiled and parsed again, for every batch."""
    columns = [getattr(table, key) for key in keys]
    statement = insert(table).on_conflict_do_nothing(index_elements=keys).returning(*columns)
    return {row[0] if len(keys) == 1 else tuple(row) for row in connection.execute(statement, rows)}


def _input_row(record: AuditRecord) -> dict[str, Any]:
    event = record.event
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "cell": cell_name(record.partition),
        "sequence": record.offset,
        "event_type": event.type,
        "event_time": event_time(event),
        "body": event.model_dump(mode="json"),
    }


def _decision_row(decision: DecisionRecord) -> dict[str, Any]:
    return {
        "decision_id": decision.decision_id,
        "cell": decision.cell,
        "input_topic": decision.input.topic,
        "input_partition": decision.input.partition,
        "input_offset": decision.input.offset,
        "subject": decision.subject,
        "outcome": decision.outcome,
        "node": decision.node,
        "gpu_devices": list(decision.gpu_devices),
        "message": decision.message,
        "verdicts": [verdict.model_dump(mode="json") for verdict in decision.verdicts],
        "config_hash": decision.config_hash,
        "config_version": decision.config_version,
        "snapshot_hash": decision.snapshot_hash,
        "decision_hash": decision.decision_hash,
        "event_time": decision.event_time,
    }
