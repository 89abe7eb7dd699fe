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
from pydantic_core import to_json
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
        inputs: list[tuple[Any, ...]] = []
        configs: list[SchedulerConfigAnnounced] = []
        decisions: list[DecisionRecord] = []
        commands: list[Any] = []
        results: list[CommandResult] = []
        next_offsets: dict[tuple[str, int], int] = {}
        for record in records:
            key = (record.topic, record.partition)
            next_offsets[key] = max(next_offsets.get(key, 0), record.offset + 1)
            event = record.event
            if record.topic == self._inputs:
                inputs.append(
                    (
                        record.topic,
                        record.partition,
                        record.offset,
                        cell_name(record.partition),
                        event.type,
                        event_time(event),
                        event,
                    )
                )
            elif record.topic == self._decisions and isinstance(event, SchedulerConfigAnnounced):
                configs.append(event)
            elif record.topic == self._decisions and isinstance(event, DecisionRecord):
                decisions.append(event)
            elif record.topic == self._commands:
                commands.append(event)
            elif record.topic == self._results and isinstance(event, CommandResult):
                results.append(event)
        parameters = {
            # Serialised by pydantic-core in one call per table; Postgres takes the rows apart.
            "configs": to_json(configs).decode(),
            "inputs": to_json(inputs).decode(),
            "decisions": to_json(decisions).decode(),
            "commands": to_json(commands).decode(),
            "results": to_json(results).decode(),
            "consumer": consumer,
            "position_topics": [topic for topic, _ in next_offsets],
            "position_partitions": [partition for _, partition in next_offsets],
            "position_next_offsets": list(next_offsets.values()),
        }
        with self._engine.begin() as connection:
            row = connection.exec_driver_sql(_WRITE_BATCH, parameters).one()
            report.configs, report.inputs, written, report.commands, report.results = row
            report.decisions = len(written)
            if report.decisions < len(decisions):
                self._record_determinism_errors(connection, decisions, set(written), report)
        AUDIT_WRITE_DURATION.observe(time.perf_counter() - started)
        return report

    def _record_determinism_errors(
        self, connection: Any, decisions: list[DecisionRecord], written: set[str], report: WriteReport
    ) -> None:
        """Compare the decisions the batch did not insert with the stored ones of the same id."""
        skipped = [decision for decision in decisions if decision.decision_id not in written]
        existing = dict(
            connection.execute(
                select(DecisionRow.decision_id, DecisionRow.decision_hash).where(
                    DecisionRow.decision_id.in_([decision.decision_id for decision in skipped])
                )
            ).all()
        )
        for decision in skipped:
            recorded = existing.get(decision.decision_id)
            if recorded is not None and recorded != decision.decision_hash:
                connection.execute(
                    insert(DeterminismErrorRow).values(
                        decision_id=decision.decision_id,
                        input_topic=decision.input.topic,
                        input_partition=decision.input.partition,
                        input_offset=decision.input.offset,
                        recorded_hash=recorded,
                        new_hash=decision.decision_hash,
                    )
                )
                DETERMINISM_ERRORS.inc()
                report.determinism_errors.append(decision.decision_id)


_WRITE_BATCH = """
WITH new_configs AS (
    INSERT INTO scheduler_configs (config_hash, document)
    SELECT config ->> 'config_hash', config ->> 'document'
    FROM jsonb_array_elements(%(configs)s::jsonb) WITH ORDINALITY AS batch (config, ord)
    ORDER BY ord
    ON CONFLICT (config_hash) DO NOTHING
    RETURNING 1
), new_inputs AS (
    INSERT INTO decision_inputs (topic, "partition", "offset", cell, sequence, event_type, event_time, body)
    SELECT
        input ->> 0, (input ->> 1)::integer, (input ->> 2)::bigint, input ->> 3, (input ->> 2)::bigint,
        input ->> 4, (input ->> 5)::timestamptz, input -> 6
    FROM jsonb_array_elements(%(inputs)s::jsonb) WITH ORDINALITY AS batch (input, ord)
    ORDER BY ord
    ON CONFLICT (topic, "partition", "offset") DO NOTHING
    RETURNING 1
), new_decisions AS (
    INSERT INTO decisions (
        decision_id, cell, input_topic, input_partition, input_offset, subject, outcome, node, gpu_devices,
        message, verdicts, config_hash, config_version, snapshot_hash, decision_hash, event_time
    )
    SELECT
        decision ->> 'decision_id', decision ->> 'cell', decision -> 'input' ->> 'topic',
        (decision -> 'input' ->> 'partition')::integer, (decision -> 'input' ->> 'offset')::bigint,
        decision ->> 'subject', decision ->> 'outcome', decision ->> 'node', decision -> 'gpu_devices',
        decision ->> 'message', decision -> 'verdicts', decision ->> 'config_hash', decision ->> 'config_version',
        decision ->> 'snapshot_hash', decision ->> 'decision_hash', (decision ->> 'event_time')::timestamptz
    FROM jsonb_array_elements(%(decisions)s::jsonb) WITH ORDINALITY AS batch (decision, ord)
    ORDER BY ord
    ON CONFLICT (decision_id) DO NOTHING
    RETURNING decision_id
), new_commands AS (
    INSERT INTO commands (command_id, decision_id, command_type, body, issued_at)
    SELECT
        command ->> 'command_id', command ->> 'decision_id', command ->> 'type', command,
        (command ->> 'issued_at')::timestamptz
    FROM jsonb_array_elements(%(commands)s::jsonb) WITH ORDINALITY AS batch (command, ord)
    ORDER BY ord
    ON CONFLICT (command_id) DO NOTHING
    RETURNING 1
), new_results AS (
    -- The first final result per command wins; a retried command keeps its first outcome (the
    -- binder only reports after its own retries are exhausted).
    INSERT INTO command_results (command_id, decision_id, status, reason, attempts, applied_at)
    SELECT
        result ->> 'command_id', result ->> 'decision_id', result ->> 'status', result ->> 'reason',
        (result ->> 'attempts')::integer, (result ->> 'applied_at')::timestamptz
    FROM jsonb_array_elements(%(results)s::jsonb) WITH ORDINALITY AS batch (result, ord)
    ORDER BY ord
    ON CONFLICT (command_id) DO NOTHING
    RETURNING 1
), positions AS (
    INSERT INTO consumer_positions (consumer, topic, "partition", next_offset)
    SELECT %(consumer)s, topic, "partition", next_offset
    FROM unnest(%(position_topics)s::text[], %(position_partitions)s::integer[], %(position_next_offsets)s::bigint[])
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
"""Every table of a batch and the positions after it in one statement of fixed text, so psycopg and
Postgres prepare it once per connection whatever the batch's size, and one round trip. Each table's
rows arrive as one JSON array (events as their contract JSON, inputs as
``[topic, partition, offset, cell, type, event time, event]``): JSONB columns take the events' JSON
as it is, and the Python side does one serialisation per table instead of one conversion per value.
Data-modifying CTEs all run, read or not; foreign keys (a decision's configuration) are checked at
the end of the statement, when the batch's configurations are in. ``ORDER BY ord`` keeps the first of
two rows with one key in a batch, as row-by-row inserts would."""
