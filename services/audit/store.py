"""Idempotent writes of the audit trail, one transaction per batch of Kafka records.

Each batch's rows and the consumer positions after it are committed together, so a crash
between Postgres and Kafka neither loses nor duplicates rows: on restart the service seeks to
the positions stored here, not to Kafka's committed offsets. Rows are keyed by what identifies
them (input position, decision id, command id), and inserts skip existing keys. A decision id
that comes back with a different hash is a determinism bug: it is recorded, counted, and the
first version kept.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.schemas import CommandResult, DecisionRecord, NodeVerdict, SchedulerConfigAnnounced
from berth.schemas.envelope import event_time
from berth.schemas.topics import COMMANDS, CONTRACT_NAMES, DECISION_INPUTS, DECISIONS, RESULTS, KafkaNames
from pydantic import TypeAdapter
from sqlalchemy import Engine, select
from sqlalchemy.dialects.postgresql import insert

from berth.metrics import AUDIT_WRITE_DURATION, DETERMINISM_ERRORS

from .models import ConsumerPositionRow, DecisionRow, DeterminismErrorRow

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
        """Write ``records`` and the positions after them in one transaction; rows whose keys are
        already stored are skipped (the first version stays), and a decision id stored with
        another hash is recorded as a determinism error. The report counts the rows inserted."""
        report = WriteReport()
        if not records:
            return report
        started = time.perf_counter()
        columns = _BatchColumns()
        next_offsets: dict[tuple[str, int], int] = {}
        for record in records:
            key = (record.topic, record.partition)
            next_offsets[key] = max(next_offsets.get(key, 0), record.offset + 1)
            event = record.event
            if record.topic == self._inputs:
                columns.add_input(record)
            elif record.topic == self._decisions and isinstance(event, SchedulerConfigAnnounced):
                columns.add("config", config_hash=event.config_hash, document=event.document)
            elif record.topic == self._decisions and isinstance(event, DecisionRecord):
                columns.add_decision(event)
            elif record.topic == self._commands:
                columns.add(
                    "command",
                    command_id=event.command_id,
                    decision_id=event.decision_id,
                    command_type=event.type,
                    body=event.model_dump_json(),
                    issued_at=event.issued_at,
                )
            elif record.topic == self._results and isinstance(event, CommandResult):
                columns.add(
                    "result",
                    command_id=event.command_id,
                    decision_id=event.decision_id,
                    status=event.status,
                    reason=event.reason,
                    attempts=event.attempts,
                    applied_at=event.applied_at,
                )
        parameters = columns.parameters
        parameters["consumer"] = consumer
        parameters["position_topic"] = [topic for topic, _ in next_offsets]
        parameters["position_partition"] = [partition for _, partition in next_offsets]
        parameters["position_next_offset"] = list(next_offsets.values())
        with self._engine.begin() as connection:
            configs, inputs, decision_ids, commands, results = connection.exec_driver_sql(
                _WRITE_BATCH, parameters
            ).one()
            report.configs, report.inputs, report.commands, report.results = configs, inputs, commands, results
            report.decisions = len(decision_ids)
            if report.decisions < len(parameters["decision_decision_id"]):
                self._record_determinism_errors(connection, columns, set(decision_ids), report)
        AUDIT_WRITE_DURATION.observe(time.perf_counter() - started)
        return report

    def _record_determinism_errors(
        self, connection: Any, columns: _BatchColumns, written: set[str], report: WriteReport
    ) -> None:
        """Compare the decisions the batch did not insert with the stored ones of the same id."""
        skipped = [row for row in columns.decisions() if row["decision_id"] not in written]
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


_VERDICTS = TypeAdapter(tuple[NodeVerdict, ...])

_TABLE_COLUMNS = {
    "config": ("config_hash", "document"),
    "input": ("topic", "partition", "offset", "cell", "event_type", "event_time", "body"),
    "decision": (
        "decision_id",
        "cell",
        "input_topic",
        "input_partition",
        "input_offset",
        "subject",
        "outcome",
        "node",
        "gpu_devices",
        "message",
        "verdicts",
        "config_hash",
        "config_version",
        "snapshot_hash",
        "decision_hash",
        "event_time",
    ),
    "command": ("command_id", "decision_id", "command_type", "body", "issued_at"),
    "result": ("command_id", "decision_id", "status", "reason", "attempts", "applied_at"),
}


class _BatchColumns:
    """A batch's rows, one list per column (``<table>_<column>``): the parameters of
    :data:`_WRITE_BATCH`, whose ``unnest`` turns them back into rows. JSONB columns hold JSON text."""

    def __init__(self) -> None:
        self.parameters: dict[str, Any] = {
            f"{table}_{column}": [] for table, names in _TABLE_COLUMNS.items() for column in names
        }

    def add(self, table: str, **row: Any) -> None:
        for column, value in row.items():
            self.parameters[f"{table}_{column}"].append(value)

    def add_input(self, record: AuditRecord) -> None:
        event = record.event
        self.add(
            "input",
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            cell=cell_name(record.partition),
            event_type=event.type,
            event_time=event_time(event),
            body=event.model_dump_json(),
        )

    def add_decision(self, decision: DecisionRecord) -> None:
        self.add(
            "decision",
            decision_id=decision.decision_id,
            cell=decision.cell,
            input_topic=decision.input.topic,
            input_partition=decision.input.partition,
            input_offset=decision.input.offset,
            subject=decision.subject,
            outcome=decision.outcome,
            node=decision.node,
            gpu_devices=json.dumps(decision.gpu_devices),
            message=decision.message,
            verdicts=_VERDICTS.dump_json(decision.verdicts).decode(),
            config_hash=decision.config_hash,
            config_version=decision.config_version,
            snapshot_hash=decision.snapshot_hash,
            decision_hash=decision.decision_hash,
            event_time=decision.event_time,
        )

    def decisions(self) -> list[dict[str, Any]]:
        names = _TABLE_COLUMNS["decision"]
        return [
            dict(zip(names, row, strict=True))
            for row in zip(*(self.parameters[f"decision_{n}"] for n in names), strict=True)
        ]


_WRITE_BATCH = """
WITH new_configs AS (
    INSERT INTO scheduler_configs (config_hash, document)
    SELECT config_hash, document
    FROM unnest(%(config_config_hash)s::text[], %(config_document)s::text[])
        WITH ORDINALITY AS batch (config_hash, document, ord)
    ORDER BY ord
    ON CONFLICT (config_hash) DO NOTHING
    RETURNING 1
), new_inputs AS (
    INSERT INTO decision_inputs (topic, "partition", "offset", cell, sequence, event_type, event_time, body)
    SELECT topic, "partition", "offset", cell, "offset", event_type, event_time, body::jsonb
    FROM unnest(
        %(input_topic)s::text[], %(input_partition)s::integer[], %(input_offset)s::bigint[],
        %(input_cell)s::text[], %(input_event_type)s::text[], %(input_event_time)s::timestamptz[],
        %(input_body)s::text[]
    ) WITH ORDINALITY AS batch (topic, "partition", "offset", cell, event_type, event_time, body, ord)
    ORDER BY ord
    ON CONFLICT (topic, "partition", "offset") DO NOTHING
    RETURNING 1
), new_decisions AS (
    INSERT INTO decisions (
        decision_id, cell, input_topic, input_partition, input_offset, subject, outcome, node, gpu_devices,
        message, verdicts, config_hash, config_version, snapshot_hash, decision_hash, event_time
    )
    SELECT
        decision_id, cell, input_topic, input_partition, input_offset, subject, outcome, node, gpu_devices::jsonb,
        message, verdicts::jsonb, config_hash, config_version, snapshot_hash, decision_hash, event_time
    FROM unnest(
        %(decision_decision_id)s::text[], %(decision_cell)s::text[], %(decision_input_topic)s::text[],
        %(decision_input_partition)s::integer[], %(decision_input_offset)s::bigint[], %(decision_subject)s::text[],
        %(decision_outcome)s::text[], %(decision_node)s::text[], %(decision_gpu_devices)s::text[],
        %(decision_message)s::text[], %(decision_verdicts)s::text[], %(decision_config_hash)s::text[],
        %(decision_config_version)s::text[], %(decision_snapshot_hash)s::text[], %(decision_decision_hash)s::text[],
        %(decision_event_time)s::timestamptz[]
    ) WITH ORDINALITY AS batch (
        decision_id, cell, input_topic, input_partition, input_offset, subject, outcome, node, gpu_devices,
        message, verdicts, config_hash, config_version, snapshot_hash, decision_hash, event_time, ord
    )
    ORDER BY ord
    ON CONFLICT (decision_id) DO NOTHING
    RETURNING decision_id
), new_commands AS (
    INSERT INTO commands (command_id, decision_id, command_type, body, issued_at)
    SELECT command_id, decision_id, command_type, body::jsonb, issued_at
    FROM unnest(
        %(command_command_id)s::text[], %(command_decision_id)s::text[], %(command_command_type)s::text[],
        %(command_body)s::text[], %(command_issued_at)s::timestamptz[]
    ) WITH ORDINALITY AS batch (command_id, decision_id, command_type, body, issued_at, ord)
    ORDER BY ord
    ON CONFLICT (command_id) DO NOTHING
    RETURNING 1
), new_results AS (
    -- The first final result per command wins; a retried command keeps its first outcome (the
    -- binder only reports after its own retries are exhausted).
    INSERT INTO command_results (command_id, decision_id, status, reason, attempts, applied_at)
    SELECT command_id, decision_id, status, reason, attempts, applied_at
    FROM unnest(
        %(result_command_id)s::text[], %(result_decision_id)s::text[], %(result_status)s::text[],
        %(result_reason)s::text[], %(result_attempts)s::integer[], %(result_applied_at)s::timestamptz[]
    ) WITH ORDINALITY AS batch (command_id, decision_id, status, reason, attempts, applied_at, ord)
    ORDER BY ord
    ON CONFLICT (command_id) DO NOTHING
    RETURNING 1
), positions AS (
    INSERT INTO consumer_positions (consumer, topic, "partition", next_offset)
    SELECT %(consumer)s, topic, "partition", next_offset
    FROM unnest(%(position_topic)s::text[], %(position_partition)s::integer[], %(position_next_offset)s::bigint[])
        AS batch (topic, "partition", next_offset)
    ON CONFLICT (consumer, topic, "partition") DO UPDATE SET next_offset = excluded.next_offset
)
SELECT
    (SELECT count(*) FROM new_configs),
    (SELECT count(*) FROM new_inputs),
    ARRAY(SELECT decision_id FROM new_decisions),
    (SELECT count(*) FROM new_commands),
    (SELECT count(*) FROM new_results)
"""
"""Every table of a batch and the positions after it in one statement of fixed text (so psycopg and
Postgres prepare it once per connection, whatever the batch's size), one round trip: each table's rows
arrive as one array per column. Data-modifying CTEs all run, read or not; foreign keys (a decision's
configuration) are checked at the end of the statement, when the configurations of the batch are in.
``ORDER BY ord`` keeps the first of two rows with one key in a batch, as row-by-row inserts would."""
