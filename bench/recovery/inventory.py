"""``python -m bench.recovery.inventory``: how long the inventory service takes to recover its
tables after a long history, before and after the broker compacted their changelogs.

The inventory (``berth inventory run``, faust, ``memory://`` store) rebuilds its two tables at
every start from their compacted changelog topics (``berth-inventory-pod-routes-changelog``, key
pod UID; ``berth-inventory-nodes-changelog``, key node name). What it reads is what the broker
kept: the whole history until the log cleaner has run, about one record per live key after.

How the history is made: ``--events`` inputs (default 1,000,000): 200 GPU nodes, then a churn in
which pods arrive pending (scheduler ``berth``), are bound to a node and deleted, the live set
staying a few hundred pods, among node status updates (each a new ``resourceVersion``). They are
not sent through the service (about a millisecond an input, two hops for node inputs): the bench
folds them with the service's own pure folds (``fold_pod_input`` then ``fold_node_input`` on what
the pod stage hands to the node stage, as the agents do) and writes every table change to the
changelogs as faust writes it (JSON key, raw value, a null value for a deleted key, the partition
the input's key hashes to). Topics are created by the same code the service runs
(``internal_topics`` + ``create_missing_topics``, the product's compaction settings).

Then, on a broker of its own:

1. **before compaction**: the changelogs hold the whole history (the bench sets
   ``min.compaction.lag.ms`` to a day on them meanwhile, so that a segment rolled by size is not
   cleaned yet). The service is started; the bench times it until faust reports its table
   recovery complete and until a new input (a ``NodeObserved`` of a node ``probe-…``, sent
   before the start) has come out of it on ``berth.inventory.state.v1``; then SIGTERM.
2. **compaction**: the bench sets ``segment.ms`` to 1 s (production: 10 min),
   ``delete.retention.ms`` to 1 s (production: an hour; the history is minutes old, so this
   stands for tombstones past their retention), ``min.cleanable.dirty.ratio`` to 0.0001
   (production: 0.2) and ``min.compaction.lag.ms`` back to 0; appends to each partition the
   record it last wrote there again (the same value: the table does not change) so that the
   active segment rolls, and waits for the broker's log cleaner to have cleaned every partition
   up to that roll; then writes every live key's value again and rolls once more, for the clean
   that drops the tombstones (:func:`compact`).
3. **after compaction**: the same restart and timings.

Both restarts must recover tables equal to the ones the bench wrote (key count and SHA-256 of the
sorted keys and values, reported by :mod:`bench.recovery.inventory_worker`, which runs the
command's own function plus that observer). Progress on stderr; a summary, then as the LAST line
one JSON object (see :func:`bench.results.emit`).

Measured (2026-11-26, ``nice -n 19 python -m bench.recovery.inventory --events 1000000`` on the
shared 2-core machine, load average 4 to 15 from other work): 1,499,600 changelog records
(249,650 tombstones, 3.8 GiB) for 500 live keys (300 pods, 200 nodes); before compaction the
tables were recovered in 228.5 s and the new input came out at 229.5 s; after compaction
511 records (1.0 MiB): recovered in 3.7 s, new input out at 5.0 s (the process's start and
imports included); the same tables both times. After the cleaner's first pass, before the
tombstones' retention had passed, 250,159 records remained, 249,652 of them tombstones: what
Kafka's default ``delete.retention.ms`` (a day) would have kept (see ``COMPACTION`` in
``berth.bus.topics_admin``). That run's second clean needed ``min.cleanable.dirty.ratio`` lowered
by hand to the 0.0001 the bench now sets (it set 0.01 then).
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

WORKER = "bench.recovery.inventory_worker"
NODES = 200
LIVE_PODS = 300


def inventory_inputs(events: int) -> Iterator[Any]:
    """``events`` inventory inputs: the nodes, then pods arriving, bound and deleted among node updates."""
    from berth.schemas import NodeObserved, PodDeleted, PodInfo, PodObserved
    from berth.schemas.samples import T0, h100_node

    nodes = [h100_node(f"gpu-{i:03d}") for i in range(NODES)]
    for node in nodes:
        yield NodeObserved(node=node, resource_version="0", observed_at=T0)
    produced = NODES
    pending: list[PodInfo] = []
    bound: list[PodInfo] = []
    serial = 0
    while produced < events:
        at = T0 + timedelta(seconds=produced // 100)
        step = produced % 4
        if step == 0:
            serial += 1
            pod = PodInfo(
                uid=f"uid-{serial}",
                namespace="ml",
                name=f"p-{serial}",
                scheduler_name="berth",
                requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": 1},
                creation_time=at,
                tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
            )
            pending.append(pod)
            yield PodObserved(pod=pod, observed_at=at)
        elif step == 1 and pending:
            pod = pending.pop(0)
            node = nodes[int(pod.uid.removeprefix("uid-")) % NODES].name
            pod = pod.model_copy(update={"node_name": node, "gpu_devices": (len(bound) % 8,), "phase": "Running"})
            bound.append(pod)
            yield PodObserved(pod=pod, observed_at=at)
        elif step == 2 and len(bound) > LIVE_PODS:
            pod = bound.pop(0)
            yield PodDeleted(
                uid=pod.uid, namespace=pod.namespace, name=pod.name, node_name=pod.node_name, observed_at=at
            )
        else:
            node = nodes[produced % NODES]
            yield NodeObserved(node=node, resource_version=str(produced), observed_at=at)
        produced += 1


async def _write_changelogs(kafka: Any, changelogs: Changelogs, events: int, cells: int) -> None:
    """Fold ``events`` inputs as the service's agents do and write each table change to its changelog."""
    from aiokafka import AIOKafkaProducer
    from berth.schemas import PodDeleted, PodObserved
    from berth.services.inventory.fold import (
        NODE_STATE,
        POD_ROUTE,
        NodeInput,
        ToNode,
        fold_node_input,
        fold_pod_input,
    )

    routes: dict[str, Any] = {}
    node_states: dict[str, Any] = {}
    pending: list[Any] = []
    producer = AIOKafkaProducer(**kafka.client_options(), linger_ms=20, max_batch_size=256 * 1024)
    await producer.start()

    async def put(table: str, key: str, value: bytes | None) -> None:
        partition = partition_of(key, changelogs.partitions[table])
        encoded_key = json.dumps(key).encode()
        pending.append(await producer.send(changelogs.topics[table], value, key=encoded_key, partition=partition))
        changelogs.last_record[(table, partition)] = (encoded_key, value)
        changelogs.records += 1
        if value is None:
            changelogs.tombstones += 1
            changelogs.tables[table].pop(key, None)
        else:
            changelogs.tables[table][key] = value
        if len(pending) >= 5000:
            for future in pending:
                await future
            pending.clear()

    async def node_stage(item: Any) -> None:
        state = node_states.get(item.node)
        folded = fold_node_input(state, item, cells)
        if folded.state != state:
            node_states[item.node] = folded.state
            await put("nodes", item.node, NODE_STATE.dump_json(folded.state))

    changelogs.tables = {table: {} for table in changelogs.topics}
    started = time.perf_counter()
    try:
        for index, event in enumerate(inventory_inputs(events)):
            if isinstance(event, (PodObserved, PodDeleted)):
                uid = event.partition_key
                route = routes.get(uid)
                folded = fold_pod_input(
                    route, event, cells, partition=partition_of(uid, changelogs.partitions["pod-routes"])
                )
                if folded.state != route:
                    if folded.state is None:
                        routes.pop(uid, None)
                        await put("pod-routes", uid, None)
                    else:
                        routes[uid] = folded.state
                        await put("pod-routes", uid, POD_ROUTE.dump_json(folded.state))
                for output in folded.outputs:
                    if isinstance(output, ToNode):
                        await node_stage(output.payload)
            else:
                await node_stage(NodeInput.of(event))
            if index % 100_000 == 0 and index:
                rate = index / (time.perf_counter() - started)
                console.print(f"  {index:,} inputs folded, {changelogs.records:,} changelog records ({rate:,.0f}/s)")
        for future in pending:
            await future
    finally:
        await producer.stop()


async def _send_probe(kafka: Any, name: str) -> Any:
    """Send a new node's ``NodeObserved`` and return a reader of the inventory state topic positioned
    at its end (the caller stops it)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from berth.schemas import NodeObserved
    from berth.schemas.samples import T0, h100_node
    from berth.schemas.topics import INVENTORY_STATE

    from berth.bus import EventProducer

    reader = AIOKafkaConsumer(**kafka.client_options(), enable_auto_commit=False)
    await reader.start()
    topic = kafka.names.topic(INVENTORY_STATE)
    partitions = [TopicPartition(topic, p) for p in range(INVENTORY_STATE.partitions)]
    reader.assign(partitions)
    for tp, offset in (await reader.end_offsets(partitions)).items():
        reader.seek(tp, offset)
    async with EventProducer(kafka, source="bench/recovery") as producer:
        await producer.send_and_wait(NodeObserved(node=h100_node(name), resource_version="1", observed_at=T0))
    return reader


async def _prepare(kafka: Any) -> tuple[Changelogs, int]:
    """Create Berth's topics and the inventory's own as the service does; the changelogs and the cell count."""
    from berth.services.inventory.app import LAYOUT_TOPICS, Layout, create_app

    from berth.bus import ensure_topics
    from berth.bus.streams import faust_app_options, internal_topics, partition_counts
    from berth.bus.topics_admin import create_missing_topics

    await ensure_topics(kafka)
    contract = {kafka.names.topic(name): name for name in LAYOUT_TOPICS}
    counts = {contract[name]: count for name, count in (await partition_counts(kafka, contract)).items()}
    built = create_app(Layout.of(counts), app_options=faust_app_options(kafka), names=kafka.names)
    await create_missing_topics(kafka, internal_topics(built.app))
    tables = {"pod-routes": built.pod_routes.table, "nodes": built.nodes.table}
    changelogs = Changelogs(
        topics={name: table.changelog_topic.get_topic_name() for name, table in tables.items()},
        partitions={name: table.partitions for name, table in tables.items()},
    )
    return changelogs, built.layout.cells


def run(events: int) -> dict[str, Any]:
    """The whole bench on a broker of its own; the summary."""
    from berth.settings import load_settings

    with broker() as (bootstrap, data_dir), tempfile.TemporaryDirectory(prefix="bench-recovery-") as scratch:
        kafka = load_settings(kafka=bootstrap).kafka
        workdir = Path(scratch)
        changelogs, cells = asyncio.run(_prepare(kafka))
        topics = list(changelogs.topics.values())
        asyncio.run(set_topic_configs(kafka, topics, {"min.compaction.lag.ms": str(DAY_MS)}))
        console.print(f"folding {events:,} inputs into the changelogs ({cells} cells) …")
        started = time.perf_counter()
        asyncio.run(_write_changelogs(kafka, changelogs, events, cells))
        write_s = time.perf_counter() - started
        expected = {table: table_digest(values.items()) for table, values in changelogs.tables.items()}
        bytes_before = log_bytes(data_dir, changelogs.topics)
        console.print(
            f"{changelogs.records:,} changelog records ({changelogs.tombstones:,} tombstones, "
            f"{bytes_before / 2**20:.0f} MiB) in {write_s:.0f} s; restarting the inventory …"
        )
        before = asyncio.run(restart(kafka, f"{PROBE_PREFIX}before", workdir, WORKER, _send_probe))
        console.print(
            f"before compaction: tables recovered in {before['recovered_s']} s, "
            f"new input out at {before['first_event_s']} s"
        )
        console.print("compacting (bench settings: segment.ms 1 s, delete.retention.ms 1 s, dirty ratio 0.0001) …")
        compact_s, (records_first_clean, tombstones_first_clean) = asyncio.run(compact(kafka, changelogs, data_dir))
        bytes_after = log_bytes(data_dir, changelogs.topics)
        records_after, tombstones_after = asyncio.run(
            count_records(kafka, {changelogs.topics[t]: changelogs.partitions[t] for t in changelogs.topics})
        )
        console.print(
            f"compacted in {compact_s:.0f} s: {records_after:,} records ({tombstones_after:,} tombstones, "
            f"{bytes_after / 2**20:.1f} MiB); restarting the inventory …"
        )
        after = asyncio.run(restart(kafka, f"{PROBE_PREFIX}after", workdir, WORKER, _send_probe))
    same = before["tables"] == expected and after["tables"] == expected
    return {
        "events": events,
        "history": "folded by the service's pure folds and written to the changelogs as faust writes them",
        "changelog_records_before": changelogs.records,
        "tombstones_before": changelogs.tombstones,
        "changelog_bytes_before": bytes_before,
        "changelog_records_first_clean": records_first_clean,
        "tombstones_first_clean": tombstones_first_clean,
        "changelog_records_after": records_after,
        "tombstones_after": tombstones_after,
        "changelog_bytes_after": bytes_after,
        "live_keys": {table: digest["keys"] for table, digest in expected.items()},
        "same_tables": same,
        **restart_figures(before, after, compact_s, write_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery.inventory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="inputs of history (default %(default)s)")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args()
    if args.events <= NODES:
        parser.error(f"--events must exceed {NODES}")
    summary = run(args.events)
    if not summary["same_tables"]:
        emit("bench.recovery.inventory", summary, headline={"same_tables": False}, record=False)
        raise SystemExit("error: the recovered tables differ from the ones written")
    console.print(
        f"{summary['events']:,} inputs: inventory tables recovered in {summary['before_recovered_s']} s "
        f"({summary['changelog_records_before']:,} changelog records) before compaction, in "
        f"{summary['after_recovered_s']} s ({summary['changelog_records_after']:,} records) after"
    )
    headline = {
        key: summary[key]
        for key in (
            "events",
            "changelog_records_before",
            "before_recovered_s",
            "changelog_records_after",
            "after_recovered_s",
        )
    }
    emit("bench.recovery.inventory", summary, headline=headline, record=args.record)


if __name__ == "__main__":
    main()
