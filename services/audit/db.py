"""Connecting to the audit store and running its migrations."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine

from berth.settings import DatabaseSettings


def make_engine(database: DatabaseSettings) -> Engine:
    return create_engine(
        database.sqlalchemy_url(),
        connect_args=database.connect_args(),
        pool_size=database.pool_size,
        pool_pre_ping=True,
    )


def alembic_config(database: DatabaseSettings) -> Config:
    """An Alembic config pointing at ``migrations/`` (installed as ``berth.migrations``)."""
    script_location = Path(str(files("berth.migrations")))
    config = Config()
    config.set_main_option("script_location", str(script_location))
    # ConfigParser treats % as interpolation; escape it so passwords with % survive.
    config.set_main_option("sqlalchemy.url", database.sqlalchemy_url().replace("%", "%%"))
    config.attributes["connect_args"] = database.connect_args()
    return config


def upgrade(database: DatabaseSettings, revision: str = "head") -> None:
    command.upgrade(alembic_config(database), revision)


def downgrade(database: DatabaseSettings, revision: str = "base") -> None:
    command.downgrade(alembic_config(database), revision)


def current_revision(database: DatabaseSettings) -> str | None:
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(database)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
