"""The audit service's readiness (``/readyz``).

- ``database``: the audit store answers ``SELECT 1`` within the timeout (a connection of the
  health check's own, so that a pool busy with a batch does not make the probe fail).
- ``caught-up``: the positions the store has durably written (its ``consumer_positions``, the
  truth the service resumes from; Kafka's committed offsets are only a hint) are within
  :data:`~berth.health.DEFAULT_MAX_LAG` records of the end of every partition of the audited
  topics as the first check after start found it: the offset after its last committed record
  (transaction markers and aborted records hold offsets no position is written for, so the tail
  is read rather than the last stable offset taken). Records dead-lettered at a partition's very
  end are not written either: more than that many of them hold readiness back until the next
  good record. Not ready while the backlog found at start is written, while Kafka cannot be
  reached or while the store's tables do not exist yet (migrations running). Once caught up it stays so: falling behind
  under load is not a reason to stop the service. The positions are the whole group's (they live in the
  store), so with several audit members each reports the group's progress.
"""

from __future__ import annotations

import asyncio
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
    engine = create_engine(
        database.sqlalchemy_url(), connect_args=connect_args, pool_size=1, max_overflow=0, pool_pre_ping=True
    )
    where = database.redacted_url()

    def select_one() -> tuple[bool, str]:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1")).scalar_one()
        except Exception as exc:
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
        self.caught_up = False
        self._targets: asyncio.Task[dict[tuple[str, int], int]] | None = None
        self._read_positions = blocking_check(self._positions_now)
        self._last: dict[tuple[str, int], int] = {}

    def _positions_now(self) -> tuple[bool, str]:
        self._last = self.store.positions()
        return True, ""

    async def __call__(self) -> tuple[bool, str]:
        if self.caught_up:
            return True, "caught up with the backlog found at start"
        # Measured once, in a task of its own: a probe's timeout must not cut it short every time.
        if self._targets is None or (self._targets.done() and self._targets.exception() is not None):
            failed = self._targets.exception() if self._targets is not None else None
            self._targets = asyncio.get_running_loop().create_task(
                visible_ends(self.settings, [self.settings.kafka.names.topic(topic) for topic in AUDITED_TOPICS]),
                name="audit log ends",
            )
            if failed is not None:
                return False, f"cannot read the audited topics' ends: {type(failed).__name__}: {failed}"
        if not self._targets.done():
            return False, "reading where the audited topics end"
        targets = self._targets.result()
        ok, detail = await self._read_positions()
        if not ok:
            return False, detail
        behind = {
            tp: end - self._last.get(tp, 0) for tp, end in targets.items() if end - self._last.get(tp, 0) > self.max_lag
        }
        if behind:
            worst = sorted(behind.items(), key=lambda item: -item[1])[:3]
            return False, (
                f"writing the backlog found at start: {len(behind)} partition(s) more than "
                f"{self.max_lag} records behind (" + ", ".join(f"{t}[{p}] {n}" for (t, p), n in worst) + ")"
            )
        self.caught_up = True
        return True, f"caught up with the backlog found at start ({len(targets)} partitions)"


async def visible_ends(
    settings: BerthSettings, topics: list[str], *, window: int = 500, timeout_s: float = 60.0
) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset after its last committed record}`` for every partition of
    ``topics`` (0 when it has none): where the store's positions end once everything is written.

    Not the last stable offset: transaction markers and aborted records take offsets that the
    store never writes a position for, so the tail of each partition is read (from ``window``
    records before its end, further back while nothing visible is found)."""
    from aiokafka import AIOKafkaConsumer

    reader: Any = AIOKafkaConsumer(
        **settings.kafka.client_options(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    found: dict[tuple[str, int], int] = {}
    try:
        async with asyncio.timeout(timeout_s):
            await _read_tails(settings.kafka.client_options(), reader, topics, window, found)
    finally:
        await reader.stop()
    return found


async def _read_tails(
    options: dict[str, Any], reader: Any, topics: list[str], window: int, found: dict[tuple[str, int], int]
) -> None:
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**options)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    partitions = [
        TopicPartition(entry["topic"], p["partition"])
        for entry in described
        for p in sorted(entry["partitions"] or (), key=lambda p: p["partition"])
    ]
    if not partitions:
        return
    await reader.start()
    ends = await reader.end_offsets(partitions)
    begins = await reader.beginning_offsets(partitions)
    # Assigned once, every position set before anything is awaited, all paused but the one read:
    # a partition assigned without a position would ask a group coordinator this reader has not.
    reader.assign(partitions)
    for tp in partitions:
        reader.seek(tp, max(begins[tp], ends[tp] - window))
    reader.pause(*partitions)
    for tp in partitions:
        end, begin, span = ends[tp], begins[tp], window
        found[(tp.topic, tp.partition)] = 0
        reader.resume(tp)
        while end > begin:
            start = max(begin, end - span)
            reader.seek(tp, start)
            last = None
            while await reader.position(tp) < end:
                batch = await reader.getmany(tp, timeout_ms=500)
                last = max([r.offset for r in batch.get(tp, []) if r.offset < end], default=last)
            if last is not None:
                found[(tp.topic, tp.partition)] = last + 1
                break
            if start == begin:
                break
            span *= 8
        reader.pause(tp)
