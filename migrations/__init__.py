"""Alembic migrations of the audit store (installed as berth.migrations)."""
