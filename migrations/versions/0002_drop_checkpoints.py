"""Drop the checkpoints table: nothing ever wrote or read it (replay folds each cell from its first
input), and state snapshots, when they come, are tied to input offsets in a shape of their own.

Revision ID: 0002_drop_checkpoints
Revises: 0001_audit_store
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_drop_checkpoints"
down_revision = "0001_audit_store"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_checkpoints_cell", table_name="checkpoints")
    op.drop_table("checkpoints")


def downgrade() -> None:
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
