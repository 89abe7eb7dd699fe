"""The audit store's one-statement batch write on a real Postgres: duplicates inside a batch, a batch
re-delivered after a crash, and a write that fails part-way each leave every row stored exactly once,
with the same content the events carry."""

from __future__ import annotations

import uuid

import pytest
from berth.schemas.envelope import event_time
from berth.schemas.samples import one_of_each
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS, RESULTS
from berth.services.audit import db
from berth.services.audit.models import CommandResultRow, CommandRow, DecisionRow, InputRow
from berth.services.audit.store import AuditRecord, AuditStore
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from berth.settings import DatabaseSettings

pytestmark = pytest.mark.integration


@pytest.fixture()
def store(database_url):
    settings = DatabaseSettings(url=database_url)
    db.upgrade(settings)
    engine = db.make_engine(settings)
    yield AuditStore(engine), engine
    engine.dispose()


def _sample(kind: str):
    return next(e for e in one_of_each() if e.type == kind)


def _records(partition: int):
    """Inputs, a configuration, two decisions, a command and a result, each record delivered twice
    in the batch (as a producer retry would), and two decisions with one id but different hashes."""
    tag = uuid.uuid4().hex
    config = _sample("io.berth.scheduler.config.v1").model_copy(update={"config_hash": f"h-{tag}"})
    decision = _sample("io.berth.scheduler.decision.v1").model_copy(
        update={"decision_id": f"d1-{tag}", "config_hash": config.config_hash}
    )
    other = decision.model_copy(update={"decision_id": f"d2-{tag}", "node": None, "gpu_devices": (), "verdicts": ()})
    conflicting = decision.model_copy(update={"decision_hash": "f" * 64, "node": "elsewhere"})
    command = _sample("io.berth.scheduler.place-pods.v1").model_copy(
        update={"command_id": f"c-{tag}", "decision_id": decision.decision_id}
    )
    result = _sample("io.berth.scheduler.command-result.v1").model_copy(
        update={"command_id": command.command_id, "decision_id": decision.decision_id}
    )
    pod_event = _sample("io.berth.cluster.pod-observed.v1")
    records = [
        AuditRecord(DECISION_INPUTS.name, partition, 0, pod_event),
        AuditRecord(DECISION_INPUTS.name, partition, 1, pod_event),
        AuditRecord(DECISION_INPUTS.name, partition, 0, pod_event),
        AuditRecord(DECISIONS.name, partition, 10, config),
        AuditRecord(DECISIONS.name, partition, 11, decision),
        AuditRecord(DECISIONS.name, partition, 12, conflicting),
        AuditRecord(DECISIONS.name, partition, 13, other),
        AuditRecord(DECISIONS.name, partition, 11, decision),
        AuditRecord(DECISIONS.name, partition, 10, config),
        AuditRecord(COMMANDS.name, partition, 5, command),
        AuditRecord(COMMANDS.name, partition, 5, command),
        AuditRecord(RESULTS.name, partition, 7, result),
        AuditRecord(RESULTS.name, partition, 7, result),
    ]
    return records, decision, other, command, result, pod_event


def _stored(engine, partition: int, decision, other, command):
    with engine.connect() as connection:
        inputs = connection.execute(
            select(
                InputRow.offset,
                InputRow.cell,
                InputRow.sequence,
                InputRow.event_type,
                InputRow.event_time,
                InputRow.body,
            )
            .where(InputRow.topic == DECISION_INPUTS.name, InputRow.partition == partition)
            .order_by(InputRow.offset)
        ).all()
        decisions = connection.execute(
            select(DecisionRow.decision_id, DecisionRow.decision_hash, DecisionRow.node, DecisionRow.gpu_devices)
            .add_columns(DecisionRow.verdicts, DecisionRow.config_hash, DecisionRow.event_time)
            .where(DecisionRow.decision_id.in_([decision.decision_id, other.decision_id]))
            .order_by(DecisionRow.decision_id)
        ).all()
        commands = connection.execute(
            select(CommandRow.command_type, CommandRow.body, CommandRow.issued_at).where(
                CommandRow.command_id == command.command_id
            )
        ).all()
        results = connection.execute(
            select(CommandResultRow.decision_id, CommandResultRow.status, CommandResultRow.reason)
            .add_columns(CommandResultRow.attempts, CommandResultRow.applied_at)
            .where(CommandResultRow.command_id == command.command_id)
        ).all()
    return inputs, decisions, commands, results


def test_a_batch_with_duplicates_and_its_redelivery_store_every_row_once_as_the_events_say(store):
    audit, engine = store
    consumer = f"test-{uuid.uuid4().hex[:8]}"
    partition = 2000 + uuid.uuid4().int % 1000
    records, decision, other, command, result, pod_event = _records(partition)

    first = audit.write_batch(records, consumer=consumer)
    assert (first.configs, first.inputs, first.decisions, first.commands, first.results) == (1, 2, 2, 1, 1)
    # The conflicting decision came in the same batch as the first: the first one is kept.
    assert first.determinism_errors == []

    inputs, decisions, commands, results = _stored(engine, partition, decision, other, command)
    body = pod_event.model_dump(mode="json")
    assert [tuple(row) for row in inputs] == [
        (0, f"cell-{partition}", 0, pod_event.type, event_time(pod_event), body),
        (1, f"cell-{partition}", 1, pod_event.type, event_time(pod_event), body),
    ]
    assert [tuple(row) for row in decisions] == [
        (
            d.decision_id,
            d.decision_hash,
            d.node,
            list(d.gpu_devices),
            [v.model_dump(mode="json") for v in d.verdicts],
            d.config_hash,
            d.event_time,
        )
        for d in sorted([decision, other], key=lambda d: d.decision_id)
    ]
    assert decision.verdicts, "the sample decision must carry verdicts for this check to mean anything"
    assert [tuple(row) for row in commands] == [(command.type, command.model_dump(mode="json"), command.issued_at)]
    assert [tuple(row) for row in results] == [
        (result.decision_id, result.status, result.reason, result.attempts, result.applied_at)
    ]

    # Re-delivered after a crash that came between the commit and Kafka's offsets: nothing twice.
    again = audit.write_batch(records, consumer=consumer)
    assert (again.configs, again.inputs, again.decisions, again.commands, again.results) == (0, 0, 0, 0, 0)
    # The stored decision now differs from the conflicting re-delivered one: that is reported.
    assert again.determinism_errors == [decision.decision_id]
    assert _stored(engine, partition, decision, other, command) == (inputs, decisions, commands, results)
    assert audit.positions(consumer) == {
        (DECISION_INPUTS.name, partition): 2,
        (DECISIONS.name, partition): 14,
        (COMMANDS.name, partition): 6,
        (RESULTS.name, partition): 8,
    }


def test_a_batch_that_fails_part_way_stores_nothing_and_its_retry_stores_everything_once(store):
    audit, engine = store
    consumer = f"test-{uuid.uuid4().hex[:8]}"
    partition = 3000 + uuid.uuid4().int % 1000
    records, decision, other, command, _, _ = _records(partition)
    without_config = [r for r in records if r.event.type != "io.berth.scheduler.config.v1"]

    # The decisions reference a configuration the store does not hold: the statement fails after
    # the inputs were inserted, and the transaction takes them back with it.
    with pytest.raises(IntegrityError):
        audit.write_batch(without_config, consumer=consumer)
    assert _stored(engine, partition, decision, other, command) == ([], [], [], [])
    assert audit.positions(consumer) == {}

    report = audit.write_batch(records, consumer=consumer)
    assert (report.inputs, report.decisions, report.commands, report.results) == (2, 2, 1, 1)
    inputs, decisions, commands, results = _stored(engine, partition, decision, other, command)
    assert (len(inputs), len(decisions), len(commands), len(results)) == (2, 2, 1, 1)
