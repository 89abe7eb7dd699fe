"""``python -m bench.recovery``: how long a decision cell takes to be taken over, with and without
snapshots, after a long history of inputs.

On a broker of its own (or, with ``--kafka-from-environment``, on the Kafka the ``BERTH_KAFKA_*``
settings reach, TLS and SASL included, whose cell 0 input partition must be empty), the bench
writes ``--events`` inputs (default 1,000,000) to cell 0's partition of
``berth.scheduler.inputs.v1``: 200 GPU nodes, then a steady churn in which a third
of the events are pods (each arrives pending, is bound later and deleted later still; the live
set stays a few hundred pods) and the rest node status updates — state that stays bounded while
history grows, as in a long-running cluster. Then it takes the cell over twice, as a new owner
of the decision service would (``services.decision.service.rebuild``, reading the log from the
broker, read_committed):

* **from the log**: fold every input from offset 0 (what a takeover costs without snapshots);
* **from a snapshot**: restore the cell's snapshot from the last multiple of ``--every`` inputs
  before the end (at worst a whole interval before it) — written to the snapshot topic by the same
  code and in a transaction, as the service writes it — and fold the inputs after it.

Both must end in the same cell state (snapshot hash). Progress on stderr; a summary, then as the
LAST line one JSON object: ``events``, ``snapshot_every``, ``from_log_s``, ``from_snapshot_s``,
``snapshot_bytes``, ``snapshot_offset``, ``tail_inputs``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.results import RECORD_HELP, emit

console = Console(stderr=True)
NODES = 200


def history(events: int) -> Iterator[Any]:
    """``events`` cell inputs: the nodes, then pods arriving, bound and deleted among node updates."""
    from berth.schemas import NodeObserved, PodDeleted, PodInfo, PodObserved
    from berth.schemas.samples import T0, h100_node

    nodes = [h100_node(f"gpu-{i:03d}") for i in range(NODES)]
    for node in nodes:
        yield NodeObserved(node=node, observed_at=T0)
    produced = NODES
    live: list[tuple[PodInfo, str]] = []
    serial = 0
    while produced < events:
        at = T0 + timedelta(seconds=produced // 100)
        kind = produced % 3
        if kind == 0:
            serial += 1
            pod = PodInfo(
                uid=f"uid-{serial}",
                namespace="ml",
                name=f"p-{serial}",
                scheduler_name="berth",
                requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": 1 + serial % 2},
                creation_time=at,
                tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
            )
            yield PodObserved(pod=pod, observed_at=at)
            node = nodes[serial % NODES].name
            live.append((pod, node))
        elif kind == 1 and live:
            pod, node = live[0]
            if len(live) > 300:  # the oldest leaves: the live set stays bounded
                live.pop(0)
                yield PodDeleted(uid=pod.uid, namespace=pod.namespace, name=pod.name, node_name=node, observed_at=at)
            else:
                yield NodeObserved(node=nodes[produced % NODES], observed_at=at)
        else:
            yield NodeObserved(node=nodes[produced % NODES], observed_at=at)
        produced += 1


async def _write(kafka: Any, events: int, progress: Progress) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from berth.schemas.envelope import encode
    from berth.schemas.topics import DECISION_INPUTS

    from berth.bus import EventProducer, ensure_topics

    await ensure_topics(kafka, [DECISION_INPUTS])
    # The takeovers read cell 0's partition from offset 0: it must hold this bench's inputs only.
    reader = AIOKafkaConsumer(**kafka.client_options(), enable_auto_commit=False)
    await reader.start()
    try:
        cell_0 = TopicPartition(kafka.names.topic(DECISION_INPUTS), 0)
        held = (await reader.end_offsets([cell_0]))[cell_0]
    finally:
        await reader.stop()
    if held:
        raise SystemExit(f"error: {cell_0.topic} partition 0 at {kafka.bootstrap} already holds {held} records")
    task = progress.add_task("writing the inputs", total=events)
    async with EventProducer(kafka, source="bench/recovery", linger_ms=20) as producer:
        pending = []
        for index, event in enumerate(history(events)):
            record = encode(event, source="bench/recovery")
            pending.append(
                await producer.raw.send(
                    kafka.names.topic(DECISION_INPUTS),
                    record.value,
                    key=record.key,
                    headers=record.headers,
                    partition=0,
                )
            )
            if len(pending) >= 5000:
                for future in pending:
                    await future
                pending.clear()
                progress.update(task, completed=index + 1)
        for future in pending:
            await future
    progress.update(task, completed=events)


async def _take_over(kafka: Any, events: int, every: int, progress: Progress) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer
    from berth.services.decision import service as decision
    from berth.services.decision import snapshots

    from berth.cells import Cell, CellConfig

    config = CellConfig()
    fingerprint = snapshots.code_fingerprint()
    # The worst case: the owner died just before its next snapshot, a whole interval to fold.
    at = events - (events % every or every)

    task = progress.add_task("taking over from the log", total=None)
    started = time.perf_counter()
    from_log = Cell(0, config)
    await decision.rebuild(kafka, from_log, 0, at)
    data = snapshots.encode_cell(from_log) if at else b""
    await decision.rebuild(kafka, from_log, 0, events, start=at)
    from_log_s = time.perf_counter() - started
    progress.update(task, description=f"taking over from the log: {from_log_s:.1f} s", total=1, completed=1)

    await snapshots.ensure_snapshot_topic(kafka, 2)
    producer = AIOKafkaProducer(
        **kafka.client_options(), enable_idempotence=True, transactional_id=kafka.names.group("bench-recovery-cell-0")
    )
    await producer.start()
    try:
        async with producer.transaction():
            await snapshots.write_snapshot(producer, 0, at, data, fingerprint, names=kafka.names)
    finally:
        await producer.stop()

    task = progress.add_task("taking over from the snapshot", total=None)
    started = time.perf_counter()
    found = await snapshots.latest_snapshot(kafka, 0, fingerprint, until=events)
    assert found is not None and found.offset == at, "the snapshot just written was not found"
    restored = snapshots.decode_cell(found.data, 0, config)
    tail = await decision.rebuild(kafka, restored, 0, events, start=found.offset)
    from_snapshot_s = time.perf_counter() - started
    progress.update(task, description=f"taking over from the snapshot: {from_snapshot_s:.1f} s", total=1, completed=1)
    same = restored.engine.snapshot_hash() == from_log.engine.snapshot_hash()
    if not same:
        raise SystemExit("error: the restored cell's state differs from the cell folded from the log")
    return {
        "events": events,
        "snapshot_every": every,
        "from_log_s": round(from_log_s, 2),
        "from_snapshot_s": round(from_snapshot_s, 2),
        "snapshot_bytes": len(data),
        "snapshot_offset": at,
        "tail_inputs": tail,
        "same_state": same,
        "pending_pods": restored.pending_count,
    }


@contextlib.contextmanager
def _kafka(from_environment: bool) -> Iterator[Any]:
    """The Kafka settings to run on: the environment's, or those of a broker of the bench's own
    (stopped afterwards)."""
    from berth.settings import load_settings

    if from_environment:
        yield load_settings().kafka
        return
    from berth_dev.devstack.scratch import empty_kafka

    with console.status("starting a broker of the bench's own …"):
        broker = empty_kafka()
        bootstrap = broker.__enter__()
    try:
        yield load_settings(kafka=bootstrap).kafka
    finally:
        broker.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="inputs of history (default %(default)s)")
    parser.add_argument(
        "--every",
        type=int,
        default=50_000,
        help="the snapshot interval in inputs, as BERTH_SNAPSHOT_EVERY (default %(default)s)",
    )
    parser.add_argument(
        "--kafka-from-environment",
        action="store_true",
        help="run on the Kafka of the BERTH_KAFKA_* settings (TLS and SASL included) instead of a broker of the "
        "bench's own; cell 0's partition of the inputs topic must be empty",
    )
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args()
    if args.events <= NODES or args.every <= 0:
        parser.error(f"--events must exceed {NODES} and --every must be positive")
    with _kafka(args.kafka_from_environment) as kafka:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            asyncio.run(_write(kafka, args.events, progress))
            summary = asyncio.run(_take_over(kafka, args.events, args.every, progress))
    console.print(
        f"{summary['events']:,} inputs: taken over from the log in {summary['from_log_s']} s, "
        f"from a snapshot ({summary['snapshot_bytes'] / 2**20:.1f} MiB at offset "
        f"{summary['snapshot_offset']:,}, then {summary['tail_inputs']:,} inputs) in "
        f"{summary['from_snapshot_s']} s"
    )
    headline = {key: summary[key] for key in ("events", "from_log_s", "from_snapshot_s", "snapshot_bytes")}
    emit("bench.recovery", summary, headline=headline, record=args.record)


if __name__ == "__main__":
    main()
