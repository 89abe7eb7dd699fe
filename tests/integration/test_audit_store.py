"""The audit store on a real Postgres: idempotent writes, determinism errors, positions."""

from __future__ import annotations

import uuid

import pytest
from berth.schemas.samples import one_of_each
from berth.schemas.topics import COMMANDS, DECISION_INPUTS, DECISIONS
from berth.services.audit import db
from berth.services.audit.models import CommandRow, DecisionRow, DeterminismErrorRow, InputRow
from berth.services.audit.store import AuditRecord, AuditStore
from sqlalchemy import func, select

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
    decision = _events("io.berth.scheduler.decision.v1").model_copy(update={"decision_id": f"d-{uuid.uuid4().hex}"})
    command = _events("io.berth.scheduler.place-pods.v1").model_copy(
        update={"command_id": f"c-{uuid.uuid4().hex}", "decision_id": decision.decision_id}
    )
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
        assert connection.scalar(select(func.count()).select_from(InputRow).where(InputRow.partition == partition)) == 2
        assert (
            connection.scalar(
                select(func.count()).select_from(CommandRow).where(CommandRow.command_id == command.command_id)
            )
            == 1
        )
    positions = audit.positions(consumer)
    assert positions[(DECISION_INPUTS.name, partition)] == 2
    assert positions[(DECISIONS.name, partition)] == 12
    assert positions[(COMMANDS.name, partition)] == 6


def test_same_decision_id_with_another_hash_is_a_determinism_error(store):
    audit, engine = store
    config = _events("io.berth.scheduler.config.v1")
    decision = _events("io.berth.scheduler.decision.v1").model_copy(update={"decision_id": f"d-{uuid.uuid4().hex}"})
    audit.write_batch(
        [AuditRecord(DECISIONS.name, 0, 1, config), AuditRecord(DECISIONS.name, 0, 2, decision)], consumer="t-det"
    )
    changed = decision.model_copy(update={"decision_hash": "f" * 64, "node": "elsewhere"})
    report = audit.write_batch([AuditRecord(DECISIONS.name, 0, 3, changed)], consumer="t-det")
    assert report.determinism_errors == [decision.decision_id]
    with engine.connect() as connection:
        kept = connection.execute(
            select(DecisionRow.node, DecisionRow.decision_hash).where(DecisionRow.decision_id == decision.decision_id)
        ).one()
        assert tuple(kept) == (decision.node, decision.decision_hash)  # the first version stays
        errors = connection.execute(
            select(DeterminismErrorRow.new_hash).where(DeterminismErrorRow.decision_id == decision.decision_id)
        ).all()
        assert [row[0] for row in errors] == ["f" * 64]


def test_replay_takes_a_partly_recorded_last_input_as_lag_and_a_missing_earlier_decision_as_a_mismatch(database_url):
    """The audit may have written only some of the decisions of the last input it holds (one
    input can yield many; a running system keeps deciding while an auditor replays)."""
    from berth.schemas import InputPosition, NodeObserved, PodInfo, PodObserved, SchedulerConfigAnnounced
    from berth.schemas.samples import T0, h100_node
    from berth.services.audit.replay import replay
    from berth_dev.devstack.scratch import scratch_database
    from sqlalchemy import delete

    from berth.cells import Cell, CellConfig

    config = CellConfig()
    cell = Cell(0, config)
    pods = [
        PodInfo.model_validate(
            {
                "uid": f"uid-{name}",
                "namespace": "ml",
                "name": name,
                "scheduler_name": "berth",
                "creation_time": T0,
                "requests": {"cpu": 1000, "nvidia.com/gpu": 1},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            }
        )
        for name in ("a", "b")
    ]
    inputs = [
        *(PodObserved(pod=pod, observed_at=T0) for pod in pods),
        NodeObserved(node=h100_node("gpu-0"), observed_at=T0),
    ]
    decisions = [
        decision.record
        for offset, event in enumerate(inputs)
        for decision in cell.handle(event, InputPosition(topic=DECISION_INPUTS.name, partition=0, offset=offset))
    ]
    assert [d.input.offset for d in decisions] == [0, 1, 2, 2]  # the node placed both pods
    announced = SchedulerConfigAnnounced(
        config_hash=config.hash,
        config_version=config.version,
        document=config.document,
        cell=cell.cell_name,
        announced_at=T0,
    )
    with scratch_database(database_url, "replay") as url:
        settings = DatabaseSettings(url=url)
        db.upgrade(settings)
        database = db.make_engine(settings)
        try:
            AuditStore(database).write_batch(
                [AuditRecord(DECISION_INPUTS.name, 0, offset, event) for offset, event in enumerate(inputs)]
                + [AuditRecord(DECISIONS.name, 0, 100, announced)]
                + [AuditRecord(DECISIONS.name, 0, 101 + i, d) for i, d in enumerate(decisions[:-1])],
                consumer="t-replay",
            )
            lagging = replay(database)
            assert lagging.mismatches == [] and lagging.compared == 3
            with database.begin() as connection:
                connection.execute(delete(DecisionRow).where(DecisionRow.decision_id == decisions[0].decision_id))
            [mismatch] = replay(database).mismatches
            assert (mismatch.kind, mismatch.decision_id) == ("extra", decisions[0].decision_id)
        finally:
            database.dispose()
