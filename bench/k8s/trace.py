"""``python -m bench.k8s.trace``: where a pod's time goes inside Berth, stage by stage.

The setup of ``python -m bench.k8s`` for Berth alone (fresh control plane, ``--nodes`` fake nodes,
Kafka, Postgres, the six services, the warm-up, the wait for its consumers to catch up), then
``--pods`` pods created by 16 threads. After ``--wait`` seconds the topics are read back, and for
each pod the first record about it on each topic is matched by the CloudEvents ``subject`` (``namespace/name``):

    created ──▶ berth.cluster.pods.v1 (ingest) ──▶ berth.scheduler.inputs.v1 (inventory)
            ──▶ berth.scheduler.commands.v1 (decision) ──▶ berth.scheduler.results.v1 (binder)

Times are the records' Kafka timestamps (set by the producers) against the wall-clock time each
creation returned, on one machine. Printed: the median and the maximum of each stage for the
pods in creation order (the first 100, then larger groups), and how many pods had reached each
topic every two seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench.k8s.__main__ import (
    CREATE_THREADS,
    NAMESPACE,
    _create_namespace,
    _create_pod,
    _warm_up,
    berth_pipeline,
    catch_up,
)
from bench.k8s.workload import gpu_pods, pod_manifest

STAGES = (
    ("created", "berth.cluster.pods.v1"),
    ("berth.cluster.pods.v1", "berth.scheduler.inputs.v1"),
    ("berth.scheduler.inputs.v1", "berth.scheduler.commands.v1"),
    ("berth.scheduler.commands.v1", "berth.scheduler.results.v1"),
)


async def first_seen(bootstrap: str, topic: str, names: set[str]) -> dict[str, float]:
    """Pod name → Kafka timestamp (seconds) of the first committed record whose subject names it,
    on contract topic ``topic`` of the installation the environment describes."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from berth.settings import load_settings

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    try:
        from berth.schemas.topics import COMMANDS, DECISION_INPUTS, PODS, RESULTS

        partitions = {t.name: t.partitions for t in (PODS, DECISION_INPUTS, COMMANDS, RESULTS)}[topic]
        tps = [TopicPartition(load_settings().kafka.names.topic(topic), p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen: dict[str, float] = {}
        while batches := await consumer.getmany(timeout_ms=2000, max_records=5000):
            for records in batches.values():
                for record in records:
                    subject = dict(record.headers or ()).get("ce_subject", b"").decode()
                    name = subject.rpartition("/")[2]
                    if name in names and (name not in seen or record.timestamp / 1000 < seen[name]):
                        seen[name] = record.timestamp / 1000
        return seen
    finally:
        await consumer.stop()


def report(created: dict[str, float], seen: dict[str, dict[str, float]]) -> None:
    order = sorted(created, key=created.__getitem__)
    groups = [(0, 100), (100, 500), (500, 1500), (1500, len(order))]
    times = {"created": created, **seen}
    for source, target in STAGES:
        for low, high in groups:
            delays = [
                times[target][n] - times[source][n]
                for n in order[low:high]
                if n in times[target] and n in times[source]
            ]
            if delays:
                print(
                    f"{source:>27} → {target:<27} pods {low:>5}-{high:<5} n={len(delays):>5} "
                    f"p50 {statistics.median(delays):6.2f} s  max {max(delays):6.2f} s"
                )
    start = created[order[0]]
    print("seconds after the first creation: pods created / on each topic")
    for second in range(0, int(max(max(t.values(), default=start) for t in times.values()) - start) + 2, 2):
        counts = [sum(1 for t in times[topic].values() if t - start < second) for topic in times]
        print(f"  {second:>4} s  " + "  ".join(f"{c:>5}" for c in counts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.k8s.trace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="fake 8-GPU nodes (default %(default)s)")
    parser.add_argument("--pods", type=int, default=2500, help="pods to create (default %(default)s)")
    parser.add_argument("--qps", type=float, default=50.0, help="the binder's QPS (default %(default)s)")
    parser.add_argument("--burst", type=int, default=100, help="the binder's burst (default %(default)s)")
    parser.add_argument(
        "--idle",
        type=float,
        default=0.0,
        help="seconds to wait after the warm-up before creating pods: does a latency come from "
        "a backlog left by the start (nodes, warm-up) or from the pods themselves? (default 0)",
    )
    parser.add_argument(
        "--no-catch-up",
        action="store_true",
        help="create the pods right after the warm-up, without waiting for the inventory and "
        "decision consumers to have no lag (as bench.k8s did before it waited)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds after the last creation before the topics are read (default %(default)s)",
    )
    args = parser.parse_args(argv)

    from berth.schemas.topics import DECISION_INPUTS
    from berth_dev.devstack.fakenodes import create_fake_nodes
    from berth_dev.devstack.gobuild import ensure_kubernetes_binaries
    from berth_dev.devstack.kube import KubeControlPlane

    ensure_kubernetes_binaries()
    bodies = [pod_manifest(pod, scheduler_name="berth") for pod in gpu_pods(args.pods, seed=1)]
    created: dict[str, float] = {}
    lock = threading.Lock()

    def create(body: dict[str, Any]) -> None:
        _create_pod(api, body)
        with lock:
            created[body["metadata"]["name"]] = time.time()

    with (
        TemporaryDirectory(prefix="berth-bench-trace-") as scratch,
        KubeControlPlane() as plane,
        plane.connection().api_client(pool_size=CREATE_THREADS + 4) as api,
    ):
        create_fake_nodes(api, args.nodes, gpus=8, prefix="gpu-")
        _create_namespace(api, NAMESPACE)
        with berth_pipeline(plane, Path(scratch), qps=args.qps, burst=args.burst) as running:
            _warm_up(api, "berth", DECISION_INPUTS.partitions)
            if not args.no_catch_up:
                catch_up(running, "berth", timeout=300)
            time.sleep(args.idle)
            with ThreadPoolExecutor(CREATE_THREADS) as pool:
                list(pool.map(create, bodies))
            print(f"created {len(created)} pods; waiting {args.wait:.0f} s", file=sys.stderr)
            time.sleep(args.wait)
            running.check_alive()
            seen = {topic: asyncio.run(first_seen(running.kafka_bootstrap, topic, set(created))) for _, topic in STAGES}
    report(created, seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
