"""Berth's "cache synced": its consumers have read everything published so far.

kube-scheduler schedules nothing before its informer caches are synced (``WaitForCacheSync``), so
in the bench it starts knowing every node. Berth's equivalent is that the services which fold
cluster facts into the cells — the inventory (consumer group ``berth-inventory``) and the decision
service (``berth-decision``) — have no consumer lag on their inputs: every node event ingest
published has reached the cells.

Lag is read from the brokers, not from the services' ``berth_consumer_lag_records`` gauge: the
gauge is refreshed every 5 s and only for partitions a process has fetched from, so "no sample"
and "no lag" look alike. Here a group's lag on a partition is its end offset minus the offset the
group committed there (nothing committed counts from 0: the services read from the earliest).

Order matters when reading both: committed offsets first, end offsets second. A group whose
committed offsets (read at t0) reach the end offsets (read at t1 > t0) had, at t0, processed every
record that existed at t1 — including the records an upstream group produced from its own inputs,
which it flushes before committing them. Read the other way round, a record produced between the
two reads could be missed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Partition = tuple[str, int]
"""``(topic, partition)``."""


@dataclass(frozen=True)
class GroupLag:
    """One consumer group's records left to read, per input partition that has any."""

    group: str
    behind: Mapping[Partition, int]

    @property
    def total(self) -> int:
        return sum(self.behind.values())


def lag_of(group: str, committed: Mapping[Partition, int | None], ends: Mapping[Partition, int]) -> GroupLag:
    """The lag of ``group`` on every partition of ``ends``.

    ``committed``: the group's committed offset per partition; a partition it has no offset for
    (absent, None or negative, as Kafka answers) counts from 0. A committed offset at or past the
    end offset is no lag. Only partitions with a lag are kept in :attr:`GroupLag.behind`.
    """
    behind: dict[Partition, int] = {}
    for partition in sorted(ends):
        offset = committed.get(partition)
        left = ends[partition] - (offset if offset is not None and offset >= 0 else 0)
        if left > 0:
            behind[partition] = left
    return GroupLag(group, behind)


def caught_up(lags: Sequence[GroupLag]) -> bool:
    """Every group has read everything (no group lags anywhere)."""
    return all(lag.total == 0 for lag in lags)


def describe(lags: Sequence[GroupLag]) -> str:
    """One line for progress output, e.g. ``berth-inventory 1,204 behind, berth-decision 0 behind``."""
    return ", ".join(f"{lag.group} {lag.total:,} behind" for lag in lags)


# --- reading it from the brokers -------------------------------------------------------------------


class LagReader:
    """Reads consumer groups' lags from the brokers at ``bootstrap``; ``inputs`` maps each group to
    its input topics. Use as ``async with LagReader(...) as reader: await reader.read()``."""

    def __init__(self, bootstrap: str, inputs: Mapping[str, Sequence[str]]) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.admin import AIOKafkaAdminClient

        self.inputs = {group: frozenset(topics) for group, topics in inputs.items()}
        self._bootstrap = bootstrap
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        self._ends = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        self._partitions: list[Any] = []

    async def __aenter__(self) -> LagReader:
        from aiokafka import TopicPartition

        await self._admin.start()
        await self._ends.start()
        topics = sorted(set().union(*self.inputs.values()))
        described = await self._admin.describe_topics(topics)
        self._partitions = [
            TopicPartition(entry["topic"], p["partition"]) for entry in described for p in entry["partitions"]
        ]
        missing = sorted(set(topics) - {tp.topic for tp in self._partitions})
        if missing:
            await self.__aexit__()
            raise RuntimeError(f"topics not found on {self._bootstrap}: {', '.join(missing)}")
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._ends.stop()
        await self._admin.close()

    async def read(self) -> list[GroupLag]:
        """Each group's lag now: committed offsets first, then end offsets (module docstring)."""
        committed: dict[str, dict[Partition, int | None]] = {}
        for group, topics in self.inputs.items():
            own = [tp for tp in self._partitions if tp.topic in topics]
            answer = await self._admin.list_consumer_group_offsets(group, partitions=own)
            committed[group] = {(tp.topic, tp.partition): meta.offset for tp, meta in answer.items()}
        ends = {(tp.topic, tp.partition): end for tp, end in (await self._ends.end_offsets(self._partitions)).items()}
        return [
            lag_of(group, committed[group], {p: end for p, end in ends.items() if p[0] in topics})
            for group, topics in self.inputs.items()
        ]


def wait_caught_up(
    bootstrap: str,
    inputs: Mapping[str, Sequence[str]],
    *,
    timeout: float,
    progress: Callable[[str], None],
    poll_s: float = 0.5,
    report_s: float = 5.0,
) -> float:
    """Block until no group of ``inputs`` (group → its input topics) lags; returns the seconds it took.

    Reports the lags through ``progress`` every ``report_s`` seconds while waiting; raises
    :class:`TimeoutError` (naming what is still behind) after ``timeout`` seconds.
    """

    async def wait() -> float:
        started = time.monotonic()
        last_report = started
        async with LagReader(bootstrap, inputs) as reader:
            while True:
                lags = await reader.read()
                now = time.monotonic()
                if caught_up(lags):
                    return now - started
                if now - started > timeout:
                    raise TimeoutError(
                        f"Berth's consumers did not catch up within {timeout:.0f} s: {describe(lags)}; "
                        "see the services' logs (--keep-logs DIR) for a stuck or crashing consumer"
                    )
                if now - last_report >= report_s:
                    last_report = now
                    progress(f"{now - started:5.1f} s: {describe(lags)}")
                await asyncio.sleep(poll_s)

    return asyncio.run(wait())
