"""Replay and what-if: re-derive a cell's decisions from Postgres alone.

``replay`` folds every recorded input of each cell, in order, through the pure cell under the
configuration the cell announced, and compares what comes out with what was recorded: the same
decision ids with the same hashes, nothing missing, nothing extra. ``what_if`` does the same fold
under another configuration and reports which decisions would have changed and how.

A running system keeps writing (decisions, and the ticks every cell gets), so the replay reads
one snapshot of the database (``REPEATABLE READ``) and folds each cell only up to the input of its
last recorded decision. That input's own decisions may be recorded only in part (the audit writes
batches as they come, and one input can yield many decisions): a re-derived decision of that last
input that is not recorded yet is lag, not a mismatch.

Limitation, said plainly: a cell is folded from its first input (there are no state snapshots
yet), and a cell whose configuration changed mid-stream is replayed under the configuration of its
latest decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth.schemas import InputPosition
from berth.schemas.topics import CellInput
from pydantic import TypeAdapter
from sqlalchemy import Engine, func, select

from berth.cells import Cell, CellConfig
from berth.metrics import REPLAY_MISMATCHES

from .models import DecisionRow, InputRow, SchedulerConfigRow

_INPUT = TypeAdapter(CellInput)


@dataclass(frozen=True)
class Mismatch:
    cell: str
    decision_id: str
    subject: str
    kind: str
    """``missing`` (recorded, not re-derived), ``extra`` (re-derived, not recorded), ``different``."""
    recorded: str = ""
    replayed: str = ""


@dataclass
class ReplayReport:
    cells: int = 0
    inputs: int = 0
    compared: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    changes: list[Mismatch] = field(default_factory=list)
    """what-if only: decisions that would change under the other configuration."""


def _summary(outcome: str, node: str | None, message: str) -> str:
    return f"{outcome}{' on ' + node if node else ''}{': ' + message if message else ''}"


def _cells(connection: Any) -> list[tuple[str, int]]:
    return [
        (row.cell, row.partition)
        for row in connection.execute(
            select(InputRow.cell, InputRow.partition)
            .group_by(InputRow.cell, InputRow.partition)
            .order_by(InputRow.partition)
        )
    ]


def _inputs(connection: Any, cell: str) -> Iterator[InputRow]:
    rows = connection.execute(
        select(InputRow).where(InputRow.cell == cell).order_by(InputRow.sequence).execution_options(yield_per=2000)
    )
    yield from rows


def _cell_config(connection: Any, cell: str) -> str | None:
    config_hash = connection.scalar(
        select(DecisionRow.config_hash)
        .where(DecisionRow.cell == cell)
        .order_by(DecisionRow.input_offset.desc())
        .limit(1)
    )
    if config_hash is None:
        return None
    return connection.scalar(select(SchedulerConfigRow.document).where(SchedulerConfigRow.config_hash == config_hash))


def replay(
    database: Engine,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    config_for: Callable[[str], CellConfig] = CellConfig.from_document,
    other_config: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Re-derive decisions; ``other_config`` (a configuration document) turns it into a what-if.

    Only decisions whose event time falls in ``[since, until)`` are compared; the fold itself
    always starts at each cell's first input, because state is a fold of everything before.
    """
    report = ReplayReport()
    with database.connect().execution_options(isolation_level="REPEATABLE READ") as connection:
        for cell, partition in _cells(connection):
            document = _cell_config(connection, cell)
            if document is None:
                continue  # inputs recorded but no decision yet: nothing to compare
            report.cells += 1
            recorded = {
                row.decision_id: row for row in connection.execute(select(DecisionRow).where(DecisionRow.cell == cell))
            }
            last_offset = (
                connection.scalar(select(func.max(DecisionRow.input_offset)).where(DecisionRow.cell == cell)) or 0
            )
            cell_folds = Cell(partition, config_for(other_config or document))
            seen: set[str] = set()
            for row in _inputs(connection, cell):
                if row.offset > last_offset:
                    break  # the decision service has not got this far (or the audit lags)
                event = _INPUT.validate_python(row.body)
                position = InputPosition(topic=row.topic, partition=row.partition, offset=row.offset)
                report.inputs += 1
                if progress is not None:
                    progress(1)
                for decision in cell_folds.handle(event, position):
                    made = decision.record
                    if not _in_window(made.event_time, since, until):
                        continue
                    seen.add(made.decision_id)
                    report.compared += 1
                    kept = recorded.get(made.decision_id)
                    replayed = _summary(made.outcome, made.node, made.message)
                    if kept is None and row.offset == last_offset:
                        report.compared -= 1  # the audit has not recorded all of this input's yet
                        seen.discard(made.decision_id)
                    elif kept is None:
                        _note(
                            report, other_config, Mismatch(cell, made.decision_id, made.subject, "extra", "", replayed)
                        )
                    elif kept.decision_hash != made.decision_hash:
                        was = _summary(kept.outcome, kept.node, kept.message)
                        if other_config is None or was != replayed:
                            _note(
                                report,
                                other_config,
                                Mismatch(cell, made.decision_id, made.subject, "different", was, replayed),
                            )
            for decision_id, kept in recorded.items():
                if decision_id not in seen and _in_window(kept.event_time, since, until):
                    _note(
                        report,
                        other_config,
                        Mismatch(
                            cell, decision_id, kept.subject, "missing", _summary(kept.outcome, kept.node, kept.message)
                        ),
                    )
    return report


def _in_window(when: datetime, since: datetime | None, until: datetime | None) -> bool:
    return (since is None or when >= since) and (until is None or when < until)


def _note(report: ReplayReport, other_config: str | None, mismatch: Mismatch) -> None:
    if other_config is None:
        report.mismatches.append(mismatch)
        REPLAY_MISMATCHES.inc()
    else:
        report.changes.append(mismatch)
