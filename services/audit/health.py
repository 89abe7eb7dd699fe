"""The audit service's readiness (``/readyz``).

- ``database``: the audit store answers ``SELECT 1`` within the timeout (a connection of the
  health check's own, so that a pool busy with a batch does not make the probe fail).
- ``caught-up``: the positions the store has durably written (its ``consumer_positions``, the
  truth the service resumes from; Kafka's committed offsets are only a hint) are within
  :data:`~berth.health.DEFAULT_MAX_LAG` records of the log end (last stable offset) of every
  partition of the audited topics, as the first check after start saw it. Not ready while the
  backlog found at start is written, while Kafka cannot be reached or while the store's tables
  do not exist yet (migrations running). Once caught up it stays so: falling behind under load
  is not a reason to stop the service. The positions are the whole group's (they live in the
  store), so with several audit members each reports the group's progress.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text

from berth.health import DEFAULT_MAX_LAG, HealthServer, blocking_check
from berth.settings import BerthSettings

from .service import AUDITED_TOPICS
from .store import AuditStore

CONNECT_TIMEOUT_S = 2


def register(health: HealthServer, settings: BerthSettings, *, max_lag: int = DEFAULT_MAX_LAG) -> HealthServer:
    """Add the audit service's readiness checks to ``health``."""
    database = settings.database
    connect_args = {**database.connect_args(), "connect_timeout": CONNECT_TIMEOUT_S}
    engine = create_engine(database.sqlalchemy_url(), connect_args=connect_args, pool_size=1, max_overflow=0,
                           pool_pre_ping=True)
    where = database.redacted_url()

    def select_one() -> tuple[bool, str]:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1")).scalar_one()
        except Exception as exc:  # noqa: BLE001 - the reason is the answer
            return False, f"database {where} does not answer: {type(exc).__name__}: {exc}"
        return True, f"database {where} answers"

    health.add_readiness("database", blocking_check(select_one))
    health.add_readiness("caught-up", _CaughtUp(settings, AuditStore(engine), max_lag))
    return health


class _CaughtUp:
    def __init__(self, settings: BerthSettings, store: AuditStore, max_lag: int) -> None:
        self.settings = settings
        self.store = store
        self.max_lag = max_lag
        self.targets: dict[tuple[str, int], int] | None = None
        self.caught_up = False
        self._read_positions = blocking_check(self._positions_now)
        self._last: dict[tuple[str, int], int] = {}

    def _positions_now(self) -> tuple[bool, str]:
        self._last = self.store.positions()
        return True, ""

    async def __call__(self) -> tuple[bool, str]:
        if self.caught_up:
            return True, "caught up with the backlog found at start"
        if self.targets is None:
            self.targets = await log_ends(self.settings, [topic.name for topic in AUDITED_TOPICS])
        ok, detail = await self._read_positions()
        if not ok:
            return False, detail
        behind = {tp: end - self._last.get(tp, 0) for tp, end in self.targets.items()
                  if end - self._last.get(tp, 0) > self.max_lag}
        if behind:
            worst = sorted(behind.items(), key=lambda item: -item[1])[:3]
            return False, (f"writing the backlog found at start: {len(behind)} partition(s) more than "
                           f"{self.max_lag} records behind (" + ", ".join(f"{t}[{p}] {n}" for (t, p), n in worst) + ")")
        self.caught_up = True
        return True, f"caught up with the backlog found at start ({len(self.targets)} partitions)"


async def log_ends(settings: BerthSettings, topics: list[str]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): last stable offset}`` of every partition of ``topics``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    reader: Any = AIOKafkaConsumer(**settings.kafka.client_options(), group_id=None, enable_auto_commit=False,
                                   isolation_level="read_committed")
    try:
        await reader.start()
        await reader.topics()  # the metadata of every topic
        partitions = [TopicPartition(topic, p) for topic in topics for p in sorted(reader.partitions_for_topic(topic) or ())]
        ends = await reader.end_offsets(partitions) if partitions else {}
    finally:
        await reader.stop()
    return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}
