"""Private, empty Kafka brokers and Postgres databases for runs whose names are fixed.

Pipelines of real services use the contract's fixed topic names (and the audit store its fixed
tables), so two runs on one broker or database would read each other's records. Tests (and
anyone scripting such runs) take a scratch one instead.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from berth_dev.devstack.kafka import KafkaCluster

__all__ = ["empty_kafka", "empty_kafka_cluster", "scratch_database"]


@contextlib.contextmanager
def empty_kafka() -> Iterator[str]:
    """A broker of its own (bootstrap servers), empty, stopped afterwards. For pipelines of real
    services: their topic names are fixed, so the session's broker would mix runs. Fetches the
    Kafka jars first when the cache lacks them."""
    from berth_dev.devstack.cache import ensure_kafka_jars, kafka_jars_present
    from berth_dev.devstack.kafka import KafkaProcess

    if not kafka_jars_present():
        ensure_kafka_jars(quiet=True)
    with KafkaProcess() as kafka:
        yield kafka.bootstrap_servers


@contextlib.contextmanager
def empty_kafka_cluster(size: int = 3) -> Iterator[KafkaCluster]:
    """A three-broker KRaft cluster of its own (replication factor 3, ``min.insync.replicas=2``),
    empty, stopped afterwards; yields the :class:`~berth_dev.devstack.kafka.KafkaCluster` so the
    caller can kill and restart brokers (``.bootstrap_servers`` lists all of them)."""
    from berth_dev.devstack.cache import ensure_kafka_jars, kafka_jars_present
    from berth_dev.devstack.kafka import KafkaCluster

    if not kafka_jars_present():
        ensure_kafka_jars(quiet=True)
    with KafkaCluster(size=size) as cluster:
        yield cluster


@contextlib.contextmanager
def scratch_database(database_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database (its URL) on the Postgres server of ``database_url``, dropped afterwards."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(make_url(database_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as connection:
            connection.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
            )
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
    finally:
        admin.dispose()
