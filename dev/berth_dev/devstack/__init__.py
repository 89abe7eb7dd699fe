"""Local infrastructure without Docker: real Kafka and Postgres processes for dev and tests.

See DESIGN.md §6. Entry points:

* :class:`KafkaProcess` (:class:`KafkaCluster` for three brokers), :class:`PostgresProcess`, :class:`DevStack`:
  in-process services with ``start()``/``stop()`` and context-manager use; they die with the Python process that
  owns them.
* :func:`up`, :func:`status`, :func:`down`: a background stack recorded in ``.run/devstack.json``
  (``berth dev up|status|down``, or ``python -m berth_dev.devstack up|status|down|fetch``).
* :func:`ensure_kafka_jars`: fill the download cache (``.cache/kafka-3.9.1/libs``).
"""

from berth_dev.devstack.cache import cache_dir, ensure_kafka_jars, kafka_libs_dir
from berth_dev.devstack.kafka import KafkaCluster, KafkaProcess, kafka_answers
from berth_dev.devstack.postgres import PostgresProcess
from berth_dev.devstack.procs import DevStackError
from berth_dev.devstack.stack import DevStack, StackStatus, down, state_file, status, up

__all__ = [
    "DevStack",
    "DevStackError",
    "KafkaCluster",
    "KafkaProcess",
    "PostgresProcess",
    "StackStatus",
    "cache_dir",
    "down",
    "ensure_kafka_jars",
    "kafka_answers",
    "kafka_libs_dir",
    "state_file",
    "status",
    "up",
]
