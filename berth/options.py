"""Command-line options every Berth process shares, declared once so that ``--kafka``,
``--database-url``, ``--metrics-port`` and ``--health-port`` read the same environment variables
and say the same thing in every ``--help``."""

from __future__ import annotations

from typing import Annotated

import typer

KafkaOption = Annotated[
    str | None,
    typer.Option("--kafka", envvar="BERTH_KAFKA_BOOTSTRAP", help="Kafka bootstrap servers, host:port[,host:port]."),
]
DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="BERTH_DATABASE_URL",
        show_default=False,
        help="SQLAlchemy URL of the audit store, e.g. postgresql+psycopg://u:p@host:5432/berth.",
    ),
]
MetricsPortOption = Annotated[
    int | None, typer.Option(help="Serve Prometheus /metrics on this port (BERTH_METRICS_PORT).")
]
HealthPortOption = Annotated[
    int | None, typer.Option(help="Serve /livez and /readyz on this port, 0: a free one (BERTH_HEALTH_PORT).")
]

__all__ = ["DatabaseOption", "HealthPortOption", "KafkaOption", "MetricsPortOption"]
