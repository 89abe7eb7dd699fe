"""``python -m bench.k8s.inventory_rate``: how fast the inventory folds the nodes' start-up events, alone.

A fresh Kafka broker, Berth's topics, ``--nodes`` ``NodeObserved`` events of the bench's fake 8-GPU
nodes published on ``berth.cluster.nodes.v1`` (as ingest publishes its first list), then ``berth
inventory run`` as its own process. From the moment it is ready, the consumer group
``berth-inventory`` is watched (:mod:`bench.k8s.catchup`) until it has no lag; printed: the
seconds since it was ready, when its CPU stopped growing (the work was done; the rest is faust's
commit interval, ~2.8 s), and the CPU seconds the process used in all (``/proc/<pid>/stat``; some
of the fold may happen before faust reports ready, so compare two ``--nodes`` for a cost per node).

Nothing else runs beside it (no apiserver, no other service), so this is the inventory's own cost;
in ``python -m bench.k8s`` the same events are folded while everything else starts too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.k8s.catchup import LagReader, caught_up, describe


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def publish_nodes(bootstrap: str, count: int) -> None:
    from berth.schemas import NodeObserved
    from berth_dev.devstack.fakenodes import fake_node

    from berth.bus import EventProducer
    from berth.kube.manifests import node_from_manifest
    from berth.settings import load_settings

    events = []
    for index in range(count):
        fake = fake_node(index, prefix="gpu-")
        info = node_from_manifest({**fake.node, "status": fake.status})
        events.append(NodeObserved(node=info, resource_version=str(index + 1), observed_at=datetime.now(UTC)))
    async with EventProducer(load_settings(kafka=bootstrap).kafka, source="berth/ingest") as producer:
        await producer.send_all(events)


async def follow(bootstrap: str, pid: int, *, timeout: float) -> tuple[float, float, float]:
    """Until the inventory has no lag: (seconds, its CPU seconds since it started, seconds until
    its CPU last grew fast)."""
    from berth.services.inventory.app import APP_ID, INPUT_TOPICS

    from berth.settings import load_settings

    names = load_settings().kafka.names
    started, cpu_at_start = time.monotonic(), cpu_seconds(pid)
    busy_until, previous_cpu, previous = 0.0, cpu_at_start, 0.0
    async with LagReader(bootstrap, {names.group(APP_ID): [names.topic(name) for name in INPUT_TOPICS]}) as reader:
        while True:
            lags = await reader.read()
            now, cpu = time.monotonic() - started, cpu_seconds(pid)
            if cpu - previous_cpu > 0.25 * (now - previous):  # over a quarter of a core since the last look
                busy_until = now
            previous_cpu, previous = cpu, now
            if caught_up(lags):
                return now, cpu, busy_until
            if now > timeout:
                raise TimeoutError(f"the inventory did not catch up within {timeout:.0f} s: {describe(lags)}")
            await asyncio.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.k8s.inventory_rate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="NodeObserved events to fold (default %(default)s)")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the fold (default %(default)s)"
    )
    args = parser.parse_args(argv)

    from berth_dev.devstack.cache import ensure_kafka_jars
    from berth_dev.devstack.kafka import KafkaProcess
    from berth_dev.supervisor import Supervisor, create_pipeline_topics

    from berth.settings import load_settings

    ensure_kafka_jars()
    kafka = KafkaProcess().start()
    try:
        bootstrap = kafka.bootstrap_servers
        asyncio.run(create_pipeline_topics(load_settings(kafka=bootstrap).kafka))
        asyncio.run(publish_nodes(bootstrap, args.nodes))
        with (
            TemporaryDirectory(prefix="berth-inventory-rate-") as scratch,
            Supervisor(
                Path(scratch) / "logs", {"BERTH_KAFKA_BOOTSTRAP": bootstrap, "BERTH_LOG_LEVEL": "warning"}
            ) as services,
        ):
            inventory = services.start("inventory", ["run", "--data-dir", f"{scratch}/inventory"], ready_timeout=120)
            assert inventory.pid is not None
            seconds, cpu, busy = asyncio.run(follow(bootstrap, inventory.pid, timeout=args.timeout))
    finally:
        kafka.stop()
    print(
        f"{args.nodes} node events folded by the inventory alone: no lag {seconds:.2f} s after it was ready "
        f"(busy until {busy:.2f} s); its CPU since it started (imports and start-up included): {cpu:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
