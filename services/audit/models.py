"""SQLAlchemy 2 models of the audit store (the system of record for decisions).

Writes are idempotent: inputs are keyed by their Kafka position, decisions by the position of
the input that triggered them, commands by their deterministic id. Re-processing after a crash
therefore inserts nothing twice, and a second decision for the same position with another hash
is a determinism error (recorded in ``determinism_errors``), never silently overwritten.
Schema changes go through Alembic (``migrations/``); this module and the migrations must agree,
which a test checks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class SchedulerConfigRow(Base):
    """A scheduler configuration document, content-addressed by its hash."""

    __tablename__ = "scheduler_configs"

    config_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    document: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class InputRow(Base):
    """One input record a decision cell consumed, in order; replay folds these again."""

    __tablename__ = "decision_inputs"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    cell: Mapped[str] = mapped_column(String(128), index=True)
    sequence: Mapped[int] = mapped_column(BigInteger)
    """Order of consumption within the cell (inputs of several topics interleave)."""
    event_type: Mapped[str] = mapped_column(String(128))
    event_time: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    body: Mapped[dict[str, Any]] = mapped_column(JSONB)

    __table_args__ = (UniqueConstraint("cell", "sequence", name="uq_decision_inputs_cell_sequence"),)


class DecisionRow(Base):
    __tablename__ = "decisions"

    decision_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cell: Mapped[str] = mapped_column(String(128))
    input_topic: Mapped[str] = mapped_column(String(249))
    input_partition: Mapped[int] = mapped_column(Integer)
    input_offset: Mapped[int] = mapped_column(BigInteger)
    subject: Mapped[str] = mapped_column(String(512), index=True)
    outcome: Mapped[str] = mapped_column(String(32), index=True)
    node: Mapped[str | None] = mapped_column(String(253))
    gpu_devices: Mapped[list[int]] = mapped_column(JSONB, default=list)
    message: Mapped[str] = mapped_column(Text, default="")
    verdicts: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, default=list)
    config_hash: Mapped[str] = mapped_column(String(64), ForeignKey("scheduler_configs.config_hash"))
    config_version: Mapped[str] = mapped_column(String(64))
    snapshot_hash: Mapped[str] = mapped_column(String(64))
    decision_hash: Mapped[str] = mapped_column(String(64))
    event_time: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        # decision_id is derived from (cell, input position, subject), so the primary key already
        # makes a position's decision about a subject unique; this index serves look-ups.
        Index("ix_decisions_input_position", "input_topic", "input_partition", "input_offset"),
    )


class CommandRow(Base):
    __tablename__ = "commands"

    command_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    decision_id: Mapped[str] = mapped_column(String(64), index=True)
    """No foreign key: commands and decisions arrive on different topics, in either order."""
    command_type: Mapped[str] = mapped_column(String(128))
    body: Mapped[dict[str, Any]] = mapped_column(JSONB)
    issued_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CommandResultRow(Base):
    __tablename__ = "command_results"

    command_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    decision_id: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    applied_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DeterminismErrorRow(Base):
    """The same input position produced a decision with a different hash: a bug to report."""

    __tablename__ = "determinism_errors"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    decision_id: Mapped[str] = mapped_column(String(64))
    input_topic: Mapped[str] = mapped_column(String(249))
    input_partition: Mapped[int] = mapped_column(Integer)
    input_offset: Mapped[int] = mapped_column(BigInteger)
    recorded_hash: Mapped[str] = mapped_column(String(64))
    new_hash: Mapped[str] = mapped_column(String(64))
    detected_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ConsumerPositionRow(Base):
    """Next offset to read per consumer and partition, written in the same transaction as the
    rows it produced (the event-sourcing rule that makes a crash neither lose nor repeat work)."""

    __tablename__ = "consumer_positions"

    consumer: Mapped[str] = mapped_column(String(128), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    next_offset: Mapped[int] = mapped_column(BigInteger)


Index("ix_decisions_cell_event_time", DecisionRow.cell, DecisionRow.event_time)
