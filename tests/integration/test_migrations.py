"""The audit store's Alembic migrations on a real Postgres."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from berth.services.audit import db
from berth.services.audit.models import Base
from sqlalchemy import inspect
from typer.testing import CliRunner

from berth.cli import app
from berth.settings import DatabaseSettings

pytestmark = pytest.mark.integration

TABLES = {
    "scheduler_configs",
    "decision_inputs",
    "decisions",
    "commands",
    "command_results",
    "determinism_errors",
    "consumer_positions",
}


def test_upgrade_matches_the_models_and_downgrade_removes_everything(database_url):
    settings = DatabaseSettings(url=database_url)
    db.downgrade(settings, "base")
    db.upgrade(settings)
    engine = db.make_engine(settings)
    try:
        with engine.connect() as connection:
            assert TABLES <= set(inspect(connection).get_table_names())
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
            assert diff == [], f"models and migrations disagree: {diff}"
        assert db.current_revision(settings) == "0002_drop_checkpoints"
        db.downgrade(settings, "base")
        with engine.connect() as connection:
            assert not TABLES & set(inspect(connection).get_table_names())
        assert db.current_revision(settings) is None
    finally:
        engine.dispose()
        db.upgrade(settings)


def test_cli_upgrade_and_current(database_url):
    runner = CliRunner()
    result = runner.invoke(app, ["db", "upgrade", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["db", "current", "--database-url", database_url])
    assert result.stdout.strip() == "0002_drop_checkpoints"
