"""``python -m bench.recovery.token_lag``: how long the token-lag service takes to recover its
table after a long history, before and after the broker compacted its changelog.

The token-lag service (``berth token-lag run``, faust, ``memory://`` store) has one table,
``pools`` (key ``namespace/pool``, the pool's latest lag state), rebuilt at every start from its
compacted changelog ``berth-token-lag-pools-changelog``. The history: ``--events`` queue
observations (default 1,000,000) of ``--pools`` pools (default 200) in turn, each a new state
(no deletions: pools are not removed from the table). As in :mod:`bench.recovery.inventory`, they
are folded with the service's own fold (``fold_queue_lag``, default settings) and written to the
changelog as faust writes it (JSON key, raw value, the partition the pool name hashes to on the
queue topic); the same steps follow: a restart before compaction, the compaction (same bench
settings), a restart after, each timed until the table is recovered and until a new observation
(pool ``p`` of namespace ``probe-…``) comes out on ``berth.inference.lag-state.v1``, and the
recovered table compared with the one written.

Measured (2026-11-26, ``nice -n 19 python -m bench.recovery.token_lag --events 1000000`` on the
shared 2-core machine, load average 12 falling to 2): 1,000,000 changelog records (315 MiB) before
compaction, the table recovered in 185.0 s (the new observation out at 186.0 s); 317 records
(0.1 MiB) after, recovered in 2.1 s; the same table both times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.recovery.changelogs import (
    DAY_MS,
    Changelogs,
    broker,
    compact,
    console,
    count_records,
    log_bytes,
    partition_of,
    restart,
    restart_figures,
    set_topic_configs,
)
from bench.recovery.inventory_worker import PROBE_PREFIX, table_digest
from bench.results import RECORD_HELP, emit

HEADLINE = (
    "events",
    "changelog_records_before",
    "before_recovered_s",
    "changelog_records_after",
    "after_recovered_s",
)


def observations(events: int, pools: int) -> Iterator[Any]:
    """``events`` queue observations of ``pools`` pools in turn, a second apart per pool."""
    from berth.schemas import QueueLagObserved
    from berth.schemas.samples import T0

    for index in range(events):
        yield QueueLagObserved(
            pool=f"pool-{index % pools:04d}",
            namespace="serving",
            tokens_in_queue=(index * 7919) % 200_000,
            token_rate=1000.0 + index % 5000,
            active_sessions=index % 64,
            ready_replicas=1 + index % 4,
            observed_at=T0 + timedelta(seconds=index // pools),
        )


async def _write_changelog(kafka: Any, changelogs: Changelogs, events: int, pools: int) -> None:
    from aiokafka import AIOKafkaProducer
    from berth.services.token_lag.app import POOL_STATE
    from berth.services.token_lag.fold import LagSettings, fold_queue_lag, pool_key

    settings = LagSettings()
    states: dict[str, Any] = {}
    changelogs.tables = {"pools": {}}
    pending = []
    producer = AIOKafkaProducer(**kafka.client_options(), linger_ms=20, max_batch_size=256 * 1024)
    await producer.start()
    try:
        for observation in observations(events, pools):
            key = pool_key(observation.namespace, observation.pool)
            state = fold_queue_lag(states.get(key), observation, settings)
            if state is None:
                continue
            states[key] = state
            value = POOL_STATE.dump_json(state)
            partition = partition_of(observation.pool, changelogs.partitions["pools"])
            encoded_key = json.dumps(key).encode()
            pending.append(await producer.send(changelogs.topics["pools"], value, key=encoded_key, partition=partition))
            changelogs.last_record[("pools", partition)] = (encoded_key, value)
            changelogs.tables["pools"][key] = value
            changelogs.records += 1
            if len(pending) >= 5000:
                for future in pending:
                    await future
                pending.clear()
        for future in pending:
            await future
    finally:
        await producer.stop()


async def _prepare(kafka: Any) -> Changelogs:
    """Create Berth's topics and the service's own as it does; its changelog."""
    from berth.schemas.topics import DECISION_INPUTS, QUEUE_LAG
    from berth.services.token_lag.app import Layout, create_app
    from berth.services.token_lag.fold import LagSettings

    from berth.bus import ensure_topics
    from berth.bus.streams import faust_app_options, internal_topics
    from berth.bus.topics_admin import create_missing_topics

    await ensure_topics(kafka)
    built = create_app(
        Layout(cells=DECISION_INPUTS.partitions, queue_partitions=QUEUE_LAG.partitions),
        LagSettings(),
        app_options=faust_app_options(kafka),
        names=kafka.names,
    )
    await create_missing_topics(kafka, internal_topics(built.app))
    table = built.pools.table
    return Changelogs(topics={"pools": table.changelog_topic.get_topic_name()}, partitions={"pools": table.partitions})


async def _send_probe(kafka: Any, name: str) -> Any:
    """Send an observation of pool ``p`` in namespace ``name``; a reader at the end of the lag-state topic."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from berth.schemas import QueueLagObserved
    from berth.schemas.samples import T0
    from berth.schemas.topics import LAG_STATE

    from berth.bus import EventProducer

    reader = AIOKafkaConsumer(**kafka.client_options(), enable_auto_commit=False)
    await reader.start()
    topic = kafka.names.topic(LAG_STATE)
    partitions = [TopicPartition(topic, p) for p in range(LAG_STATE.partitions)]
    reader.assign(partitions)
    for tp, offset in (await reader.end_offsets(partitions)).items():
        reader.seek(tp, offset)
    async with EventProducer(kafka, source="bench/recovery") as producer:
        observation = QueueLagObserved(pool="p", namespace=name, tokens_in_queue=1, token_rate=1.0, observed_at=T0)
        await producer.send_and_wait(observation)
    return reader


def run(events: int, pools: int) -> dict[str, Any]:
    from berth.settings import load_settings

    with broker() as (bootstrap, data_dir), tempfile.TemporaryDirectory(prefix="bench-recovery-") as scratch:
        kafka = load_settings(kafka=bootstrap).kafka
        workdir = Path(scratch)
        changelogs = asyncio.run(_prepare(kafka))
        topics = list(changelogs.topics.values())
        asyncio.run(set_topic_configs(kafka, topics, {"min.compaction.lag.ms": str(DAY_MS)}))
        console.print(f"folding {events:,} observations of {pools} pools into the changelog …")
        started = time.perf_counter()
        asyncio.run(_write_changelog(kafka, changelogs, events, pools))
        write_s = time.perf_counter() - started
        expected = {"pools": table_digest(changelogs.tables["pools"].items())}
        bytes_before = log_bytes(data_dir, changelogs.topics)
        console.print(f"{changelogs.records:,} changelog records ({bytes_before / 2**20:.0f} MiB) in {write_s:.0f} s")
        worker = "bench.recovery.token_lag_worker"
        before = asyncio.run(restart(kafka, f"{PROBE_PREFIX}before", workdir, worker, _send_probe))
        console.print(f"before compaction: table recovered in {before['recovered_s']} s")
        compact_s, _ = asyncio.run(compact(kafka, changelogs, data_dir))
        bytes_after = log_bytes(data_dir, changelogs.topics)
        records_after, _ = asyncio.run(count_records(kafka, {topics[0]: changelogs.partitions["pools"]}))
        console.print(f"compacted in {compact_s:.0f} s: {records_after:,} records ({bytes_after / 2**20:.1f} MiB)")
        after = asyncio.run(restart(kafka, f"{PROBE_PREFIX}after", workdir, worker, _send_probe))
    return {
        "events": events,
        "pools": pools,
        "history": "folded by the service's pure fold and written to the changelog as faust writes it",
        "changelog_records_before": changelogs.records,
        "changelog_bytes_before": bytes_before,
        "changelog_records_after": records_after,
        "changelog_bytes_after": bytes_after,
        "same_tables": before["tables"] == expected and after["tables"] == expected,
        **restart_figures(before, after, compact_s, write_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery.token_lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="observations of history (default %(default)s)")
    parser.add_argument("--pools", type=int, default=200, help="pools observed in turn (default %(default)s)")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args()
    if args.events <= args.pools or args.pools <= 0:
        parser.error("--pools must be positive and --events exceed it")
    summary = run(args.events, args.pools)
    if not summary["same_tables"]:
        emit("bench.recovery.token_lag", summary, headline={"same_tables": False}, record=False)
        raise SystemExit("error: the recovered table differs from the one written")
    console.print(
        f"{summary['events']:,} observations: token-lag table recovered in {summary['before_recovered_s']} s "
        f"({summary['changelog_records_before']:,} changelog records) before compaction, in "
        f"{summary['after_recovered_s']} s ({summary['changelog_records_after']:,} records) after"
    )
    headline = {key: summary[key] for key in HEADLINE}
    emit("bench.recovery.token_lag", summary, headline=headline, record=args.record)


if __name__ == "__main__":
    main()
