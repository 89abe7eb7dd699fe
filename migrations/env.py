"""Alembic environment for the audit store. Run through ``berth db upgrade``."""

from __future__ import annotations

from alembic import context
from berth.services.audit.models import Base
from sqlalchemy import create_engine

config = context.config
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = create_engine(
        config.get_main_option("sqlalchemy.url"), connect_args=config.attributes.get("connect_args", {})
    )
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
