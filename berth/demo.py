"""``berth demo``: Berth's main job on the local stack, start to finish, with nothing left behind.

Stages (each reports progress; any failure stops everything started so far):
1. start Kafka 3.9.1 and Postgres 15 (berth.devstack), migrate the audit store, create topics;
2. the contract round trip: publish one event of every type plus malformed records, read them
   back through the contract, and show that the malformed ones reached the dead-letter topic;
3. shut down cleanly. The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from berth.audit import db
from berth.bus import EventConsumer, EventProducer, ensure_topics
from berth.devstack.stack import DevStack
from berth.schemas import ALL_TOPICS, encode
from berth.schemas.samples import one_of_each
from berth.schemas.topics import DEAD_LETTER, QUEUE_LAG
from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings

console = Console(stderr=True)


def run_demo() -> dict[str, Any]:
    """Run the demo; returns the summary printed as the last line."""
    started = time.monotonic()
    with console.status("starting Kafka 3.9.1 (KRaft) and Postgres 15 …"):
        stack = DevStack().start()
    try:
        env = stack.env()
        console.print(f"[green]✓[/] Kafka at {env['BERTH_KAFKA_BOOTSTRAP']}, Postgres at "
                      f"{DatabaseSettings(url=env['BERTH_DATABASE_URL']).redacted_url()}")
        os.environ.update(env)
        settings = BerthSettings()
        db.upgrade(settings.database)
        console.print("[green]✓[/] audit store migrated")
        summary = asyncio.run(_contract_round_trip(settings.kafka))
    finally:
        with console.status("stopping Kafka and Postgres …"):
            stack.stop()
        console.print("[green]✓[/] stopped everything the demo started")
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    return summary


async def _contract_round_trip(kafka: KafkaSettings) -> dict[str, Any]:
    created = await ensure_topics(kafka)
    console.print(f"[green]✓[/] {len(ALL_TOPICS)} topics ready ({len(created)} created)")
    events = one_of_each()
    lag = next(e for e in events if e.type in QUEUE_LAG.event_types)
    valid = encode(lag, source="berth/demo")
    negative_queue = json.dumps(json.loads(valid.value) | {"tokens_in_queue": -1}).encode()
    async with EventProducer(kafka, source="berth/demo") as producer:
        for event in events:
            await producer.send_and_wait(event)
        # Two records a careless producer might send: a negative queue and a non-CloudEvent.
        await producer.raw.send_and_wait(QUEUE_LAG.name, negative_queue, key=valid.key,
                                         headers=valid.headers)
        await producer.raw.send_and_wait(QUEUE_LAG.name, b"tokens=lots", key=valid.key)
    console.print(f"[green]✓[/] published {len(events)} events of {len({e.type for e in events})} "
                  "types and 2 malformed records")

    seen: Counter[str] = Counter()
    async with EventConsumer(kafka, [t for t in ALL_TOPICS if t is not DEAD_LETTER], group_id=None,
                             name="demo-reader") as consumer:
        async for item in consumer.events(idle_timeout_s=3):
            seen[item.decoded.type] += 1
    refused: list[Any] = []
    async with EventConsumer(kafka, [DEAD_LETTER], group_id=None, name="demo-dlq") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            seen[item.decoded.type] += 1
            if item.event.consumer == "demo-reader":
                refused.append(item.event)

    table = Table(title="read back through the contract")
    table.add_column("event type", no_wrap=True)
    table.add_column("records", justify="right")
    for event_type in sorted(seen):
        table.add_row(event_type, str(seen[event_type]))
    console.print(table)
    for letter in refused:
        console.print(f"[yellow]dead-lettered[/] {letter.source_topic} offset {letter.source_offset}: "
                      f"{letter.reason}")
    expected = {e.type for e in events}
    return {
        "event_types": len(expected),
        "events_published": len(events),
        "events_read": sum(seen.values()),
        "types_read": len(set(seen) & expected),
        "malformed_published": 2,
        "dead_lettered": len(refused),
    }


def main() -> None:
    summary = run_demo()
    print(json.dumps(summary))
