"""The audit store: configs, inputs, checkpoints, decisions, commands, results, positions.

Revision ID: 0001_audit_store
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_audit_store"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_configs",
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("config_hash", name="pk_scheduler_configs"),
    )
    op.create_table(
        "decision_inputs",
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("cell", sa.String(128), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.String(128), nullable=False),
        sa.Column("event_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", "offset", name="pk_decision_inputs"),
        sa.UniqueConstraint("cell", "sequence", name="uq_decision_inputs_cell_sequence"),
    )
    op.create_index("ix_decision_inputs_cell", "decision_inputs", ["cell"])
    op.create_table(
        "checkpoints",
        sa.Column("snapshot_hash", sa.String(64), nullable=False),
        sa.Column("cell", sa.String(128), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("snapshot_hash", name="pk_checkpoints"),
    )
    op.create_index("ix_checkpoints_cell", "checkpoints", ["cell"])
    op.create_table(
        "decisions",
        sa.Column("decision_id", sa.String(64), nullable=False),
        sa.Column("cell", sa.String(128), nullable=False),
        sa.Column("input_topic", sa.String(249), nullable=False),
        sa.Column("input_partition", sa.Integer(), nullable=False),
        sa.Column("input_offset", sa.BigInteger(), nullable=False),
        sa.Column("subject", sa.String(512), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("gpu_devices", postgresql.JSONB(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("verdicts", postgresql.JSONB(), nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("config_version", sa.String(64), nullable=False),
        sa.Column("snapshot_hash", sa.String(64), nullable=False),
        sa.Column("decision_hash", sa.String(64), nullable=False),
        sa.Column("event_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["config_hash"], ["scheduler_configs.config_hash"], name="fk_decisions_config_hash_scheduler_configs"
        ),
        sa.PrimaryKeyConstraint("decision_id", name="pk_decisions"),
    )
    op.create_index("ix_decisions_input_position", "decisions", ["input_topic", "input_partition", "input_offset"])
    op.create_index("ix_decisions_subject", "decisions", ["subject"])
    op.create_index("ix_decisions_outcome", "decisions", ["outcome"])
    op.create_index("ix_decisions_event_time", "decisions", ["event_time"])
    op.create_index("ix_decisions_cell_event_time", "decisions", ["cell", "event_time"])
    op.create_table(
        "commands",
        sa.Column("command_id", sa.String(64), nullable=False),
        sa.Column("decision_id", sa.String(64), nullable=False),
        sa.Column("command_type", sa.String(128), nullable=False),
        sa.Column("body", postgresql.JSONB(), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("command_id", name="pk_commands"),
    )
    op.create_index("ix_commands_decision_id", "commands", ["decision_id"])
    op.create_table(
        "command_results",
        sa.Column("command_id", sa.String(64), nullable=False),
        sa.Column("decision_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("command_id", name="pk_command_results"),
    )
    op.create_index("ix_command_results_decision_id", "command_results", ["decision_id"])
    op.create_table(
        "determinism_errors",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("decision_id", sa.String(64), nullable=False),
        sa.Column("input_topic", sa.String(249), nullable=False),
        sa.Column("input_partition", sa.Integer(), nullable=False),
        sa.Column("input_offset", sa.BigInteger(), nullable=False),
        sa.Column("recorded_hash", sa.String(64), nullable=False),
        sa.Column("new_hash", sa.String(64), nullable=False),
        sa.Column("detected_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_determinism_errors"),
    )
    op.create_table(
        "consumer_positions",
        sa.Column("consumer", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("consumer", "topic", "partition", name="pk_consumer_positions"),
    )


def downgrade() -> None:
    for table in (
        "consumer_positions",
        "determinism_errors",
        "command_results",
        "commands",
        "decisions",
        "checkpoints",
        "decision_inputs",
        "scheduler_configs",
    ):
        op.drop_table(table)
