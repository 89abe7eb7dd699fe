"""The audit store on a real Postgres: idempotent writes, determinism errors, positions."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from berth.audit import db
from berth.audit.models import CommandRow, DecisionRow, DeterminismErrorRow, InputRow
from berth.schemas.samples import one_of_each
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS
from berth.services.audit.store import AuditRecord, AuditStore
from berth.settings import DatabaseSettings

pytestmark = pytest.mark.integration


@pytest.fixture()
def store(database_url):
    settings = DatabaseSettings(url=database_url)
    db.upgrade(settings)
    engine = db.make_engine(settings)
    yield AuditStore(engine), engine
    engine.dispose()


def _events(kind: str):
    return next(e for e in one_of_each() if e.type == kind)


def test_rewriting_a_batch_inserts_nothing_twice_and_positions_advance(store):
    audit, engine = store
    consumer = f"test-{uuid.uuid4().hex[:8]}"
    partition = 900 + uuid.uuid4().int % 1000  # a partition number no other test uses
    config = _events("io.berth.scheduler.config.v1")
    decision = _events("io.berth.scheduler.decision.v1").model_copy(
        update={"decision_id": f"d-{uuid.uuid4().hex}"})
    command = _events("io.berth.scheduler.place-pods.v1").model_copy(
        update={"command_id": f"c-{uuid.uuid4().hex}", "decision_id": decision.decision_id})
    pod_event = _events("io.berth.cluster.pod-observed.v1")
    batch = [
        AuditRecord(DECISION_INPUTS.name, partition, 0, pod_event),
        AuditRecord(DECISION_INPUTS.name, partition, 1, pod_event),
        AuditRecord(DECISIONS.name, partition, 10, config),
        AuditRecord(DECISIONS.name, partition, 11, decision),
        AuditRecord(COMMANDS.name, partition, 5, command),
    ]
    first = audit.write_batch(batch, consumer=consumer)
    assert (first.inputs, first.decisions, first.commands) == (2, 1, 1)
    again = audit.write_batch(batch, consumer=consumer)
    assert (again.inputs, again.decisions, again.commands, again.determinism_errors) == (0, 0, 0, [])
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(InputRow)
                                 .where(InputRow.partition == partition)) == 2
        assert connection.scalar(select(func.count()).select_from(CommandRow)
                                 .where(CommandRow.command_id == command.command_id)) == 1
    positions = audit.positions(consumer)
    assert positions[(DECISION_INPUTS.name, partition)] == 2
    assert positions[(DECISIONS.name, partition)] == 12
    assert positions[(COMMANDS.name, partition)] == 6


def test_same_decision_id_with_another_hash_is_a_determinism_error(store):
    audit, engine = store
    config = _events("io.berth.scheduler.config.v1")
    decision = _events("io.berth.scheduler.decision.v1").model_copy(
        update={"decision_id": f"d-{uuid.uuid4().hex}"})
    audit.write_batch([AuditRecord(DECISIONS.name, 0, 1, config),
                       AuditRecord(DECISIONS.name, 0, 2, decision)], consumer="t-det")
    changed = decision.model_copy(update={"decision_hash": "f" * 64, "node": "elsewhere"})
    report = audit.write_batch([AuditRecord(DECISIONS.name, 0, 3, changed)], consumer="t-det")
    assert report.determinism_errors == [decision.decision_id]
    with engine.connect() as connection:
        kept = connection.execute(select(DecisionRow.node, DecisionRow.decision_hash)
                                  .where(DecisionRow.decision_id == decision.decision_id)).one()
        assert tuple(kept) == (decision.node, decision.decision_hash)  # the first version stays
        errors = connection.execute(select(DeterminismErrorRow.new_hash)
                                    .where(DeterminismErrorRow.decision_id == decision.decision_id)).all()
        assert [row[0] for row in errors] == ["f" * 64]
