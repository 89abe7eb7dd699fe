"""``python -m bench.pipeline --soak 30m [--rate N]``: the pipeline at a steady rate for a long time,
watching the services' memory and the consumer groups' lag for growth.

The rate is ``--rate``, or half the highest rate a short ramp run first on the same stack
sustained (the bench's steps, 6 s each, until one falls below 0.9 × offered or leaves pods
unplaced: throughput, not the 1 s latency goal, is what a soak's rate is half of; see
:func:`.soak_stats.soak_rate`). Pods must leave again or 5,000 nodes fill
in minutes, so a stand-in cluster (:class:`StandInCluster`, in this process) plays the binder and
the cluster for every placement: it reports the command applied (to the results topic and the
issuing cell's input partition, as the binder does), publishes the pod observed bound to its node
(as ingest would see it), and deletes it ``lifetime_s`` after its placement. In steady state about
``rate × lifetime_s`` pods hold capacity, and every pod makes the whole round: observed, routed,
placed, confirmed, bound, deleted.

Every ``sample_s`` it records the RSS of each service's process tree (``/proc``; also Kafka's and
Postgres's, for reference) and each consumer group's lag (committed offsets against the read_committed
end offsets of the partitions it has committed on). At the end: a table and a verdict per series
(:mod:`.soak_stats` says how, and why the thresholds), a JSON file and optionally a PNG.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from . import soak_stats
from .__main__ import NODES, PROBES, Recorder, _drive, _pct, console, pipeline

RAMP_RATES = (25.0, 50.0, 100.0, 200.0, 400.0, 800.0)
RAMP_STEP_S = 6.0
LIFETIME_S = 60.0
SAMPLE_S = 10.0
TEMPLATES = 2000
BERTH_SERVICES = ("audit", "inventory", "decision")


@dataclass(frozen=True)
class SoakOptions:
    duration_s: float
    rate: float | None = None
    """Pods offered per second; None: half the highest rate achieved by a ramp run first."""
    lifetime_s: float = LIFETIME_S
    sample_s: float = SAMPLE_S
    nodes: int = NODES
    seed: int = 1
    decision_workers: int = 1
    keep_logs: Path | None = None
    json_path: Path | None = None
    plot: Path | None = None


class PodFactory:
    """An endless supply of pending pods: the bench generator's mix (``TEMPLATES`` pods), each
    template reused under a new UID and name, so a long run needs no long generation."""

    def __init__(self, templates: list[Any], seed: int) -> None:
        self.templates = templates
        self.namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"berth-bench-soak:{seed}")
        self.made = 0

    def take(self, count: int) -> list[Any]:
        return [self.next() for _ in range(count)]

    def next(self) -> Any:
        n = self.made
        self.made += 1
        template = self.templates[n % len(self.templates)]
        return template.model_copy(update={"uid": str(uuid.uuid5(self.namespace, str(n))), "name": f"soak-pod-{n:07d}"})


class StandInCluster:
    """The binder and the cluster, for the soak: confirms each ``PlacePods`` it is handed
    (:attr:`placements`), observes its pods bound, and deletes each ``lifetime_s`` after its
    placement. Only pods :meth:`register`-ed (the bench's own) are bound and deleted, once each.
    Runs in a thread with its own event loop and producer."""

    def __init__(self, kafka: Any, lifetime_s: float) -> None:
        self.kafka = kafka
        self.lifetime_s = lifetime_s
        self.placements: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pods: dict[str, Any] = {}
        self.bound = 0
        self.deleted = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-soak-cluster", daemon=True)

    @property
    def holding(self) -> int:
        """Pods bound and not deleted yet: what holds capacity in the cells."""
        return self.bound - self.deleted

    def register(self, pod: Any) -> None:
        self._pods[pod.uid] = pod

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(30)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError("the soak's stand-in cluster failed") from self.error

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.error = exc

    async def _serve(self) -> None:
        from berth.schemas import CommandResult, PodDeleted, PodObserved
        from berth.services.binder.service import KafkaOutputs

        from berth.bus import EventProducer

        departures: list[tuple[float, str]] = []
        async with EventProducer(self.kafka, source="bench/pipeline-soak", linger_ms=5) as producer:
            outputs = KafkaOutputs(producer, frozenset(range(self.kafka.cells)))
            sent: list[Any] = []
            while not self._stopping.is_set():
                now, wall = time.monotonic(), datetime.now(UTC)
                while True:
                    try:
                        command = self.placements.get_nowait()
                    except queue.Empty:
                        break
                    result = CommandResult.of(command, "applied", wall)
                    # As the binder: an applied result reaches the cell as the bound pod's event.
                    await outputs.result(result, command.cell if result.concerns_issuing_cell else None)
                    for placement in command.placements:
                        pod = self._pods.get(placement.pod_uid)
                        if pod is None or pod.node_name:
                            continue  # not ours, or bound already (a command seen twice)
                        pod = bound_pod(pod, placement)
                        self._pods[pod.uid] = pod
                        sent.append(await producer.send(PodObserved(pod=pod, resource_version="2", observed_at=wall)))
                        self.bound += 1
                        heapq.heappush(departures, (now + self.lifetime_s, pod.uid))
                while departures and departures[0][0] <= now:
                    pod = self._pods.pop(heapq.heappop(departures)[1])
                    gone = PodDeleted(
                        uid=pod.uid, namespace=pod.namespace, name=pod.name, node_name=pod.node_name, observed_at=wall
                    )
                    sent.append(await producer.send(gone))
                    self.deleted += 1
                await outputs.flush()
                await asyncio.gather(*sent)
                sent.clear()
                await asyncio.sleep(0.1)


def bound_pod(pod: Any, placement: Any) -> Any:
    """``pod`` as the apiserver shows it once the binder has bound it per ``placement``: on its
    node, running, holding its devices (and Berth's binding annotations)."""
    from berth.services.binder.ports import ANNOTATION_GPU_MILLI

    from berth.kube.manifests.common import ANNOTATION_GPU_DEVICES

    annotations = dict(pod.annotations)
    if placement.gpu_devices:
        annotations[ANNOTATION_GPU_DEVICES] = ",".join(str(d) for d in placement.gpu_devices)
    if placement.gpu_milli is not None:
        annotations[ANNOTATION_GPU_MILLI] = str(placement.gpu_milli)
    # Validated again (not model_copy): the contract keeps a pod's devices sorted.
    return type(pod).model_validate(
        pod.model_dump()
        | {
            "node_name": placement.node,
            "gpu_devices": placement.gpu_devices,
            "phase": "Running",
            "annotations": annotations,
        }
    )


class LagReader:
    """Each consumer group's lag: its committed offsets (admin API) against the read_committed end
    offsets of those partitions, and the sum of those end offsets (its input so far)."""

    def __init__(self, kafka: Any) -> None:
        options = kafka.client_options()
        self.admin = AIOKafkaAdminClient(**options)
        self.reader = AIOKafkaConsumer(
            **options, group_id=None, enable_auto_commit=False, isolation_level="read_committed"
        )

    async def __aenter__(self) -> LagReader:
        await self.admin.start()
        await self.reader.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.reader.stop()
        await self.admin.close()

    async def sample(self) -> tuple[dict[str, int], dict[str, int]]:
        """``({group: lag}, {group: summed end offsets})``."""
        committed: dict[str, dict[tuple[str, int], int]] = {}
        for group_id, *_ in await self.admin.list_consumer_groups():
            offsets = await self.admin.list_consumer_group_offsets(group_id)
            committed[group_id] = {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}
        partitions = sorted({tp for offsets in committed.values() for tp in offsets})
        ends_by_tp = await self.reader.end_offsets([TopicPartition(t, p) for t, p in partitions]) if partitions else {}
        ends = {(tp.topic, tp.partition): offset for tp, offset in ends_by_tp.items()}
        lags = {group: soak_stats.group_lag(offsets, ends) for group, offsets in sorted(committed.items())}
        inputs = {group: sum(ends.get(tp, 0) for tp in offsets) for group, offsets in sorted(committed.items())}
        return lags, inputs


def run_soak(options: SoakOptions) -> dict[str, Any]:
    """Ramp (unless a rate is given), soak, judge; returns the JSON summary (also written to
    ``options.json_path``)."""
    from berth_dev.workloads import from_documents, generated_documents

    started = time.monotonic()
    with console.status(f"generating {options.nodes:,} nodes and {TEMPLATES:,} pod templates …"):
        workload = from_documents(
            generated_documents(f"bench:{options.seed}", nodes=options.nodes, pods=TEMPLATES),
            name=f"bench:{options.seed}",
        )
    factory = PodFactory([t.pod for t in workload.pods], options.seed)
    ramp_rates = RAMP_RATES if options.rate is None else ()
    with pipeline(options.keep_logs, options.decision_workers) as running:
        cluster = StandInCluster(running.settings.kafka, options.lifetime_s)
        running.recorder.placements = cluster.placements
        cluster.start()
        try:
            warm_up = factory.take(PROBES + sum(int(r * RAMP_STEP_S) for r in ramp_rates))
            for pod in warm_up:
                cluster.register(pod)
            steps = _drive(
                running.settings,
                running.services,
                running.recorder,
                workload.nodes,
                warm_up,
                ramp_rates,
                RAMP_STEP_S,
                running.ports,
                latency_bound=False,
            )
            if options.rate is None:
                rate, peak = soak_stats.soak_rate(steps)
                rate_from = f"half the ramp's highest sustained rate ({peak} pods/s)"
            else:
                rate, rate_from = options.rate, "--rate"
            _wait_placed(running, [p.uid for p in warm_up])
            console.print(f"[green]✓[/] soaking at {rate:g} pods/s ({rate_from}) for {options.duration_s:g} s")
            roots = {key: service.pid for key, service in running.services.services.items()}
            roots |= {"kafka": running.stack.kafka.pid, "postgres": running.stack.postgres.pid}
            samples, latencies = asyncio.run(_soak(running, factory, cluster, roots, rate, options))
        finally:
            cluster.stop()
    summary = _summarise(options, rate, rate_from, steps, samples, latencies, time.monotonic() - started)
    _print_summary(summary)
    if options.json_path is not None:
        options.json_path.write_text(json.dumps(summary, indent=1) + "\n")
        console.print(f"[green]✓[/] wrote {options.json_path}")
    if options.plot is not None:
        from .soak_plot import plot_soak

        console.print(f"[green]✓[/] wrote {plot_soak(summary, options.plot)}")
    return summary


def _wait_placed(running: Any, uids: list[str], patience_s: float = 120.0) -> None:
    """Wait (at most ``patience_s``) until every pod of ``uids`` is placed: a saturated ramp's
    backlog before the soak, the last pods offered after it."""
    with console.status(f"waiting for {len(uids):,} pods to be placed …"):
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline and not all(u in running.recorder.placed for u in uids):
            running.services.check_alive()
            running.recorder.check()
            time.sleep(0.2)


async def _soak(
    running: Any, factory: PodFactory, cluster: StandInCluster, roots: dict[str, int], rate: float, options: SoakOptions
) -> tuple[list[dict[str, Any]], list[float]]:
    """Offer ``rate`` pods/s for the duration, sampling every ``sample_s``; returns the samples and
    the latency (ms) of every pod offered, infinite for one never placed."""
    from berth.schemas import PodObserved

    from berth.bus import EventProducer

    recorder: Recorder = running.recorder
    offered: list[str] = []
    samples: list[dict[str, Any]] = []
    offered_at_samples = [0, 0]
    report_every = max(1, round(60 / options.sample_s))
    columns = (
        TextColumn("soak"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
    )
    async with (
        LagReader(running.settings.kafka) as lags,
        EventProducer(running.settings.kafka, source="bench/pipeline", linger_ms=2) as producer,
    ):
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("soak", total=options.duration_s, status="")
            started = time.monotonic()
            next_sample = started
            pending: list[Any] = []
            while True:
                now = time.monotonic()
                if now >= next_sample or now - started >= options.duration_s:
                    running.services.check_alive()
                    recorder.check()
                    cluster.check()
                    # Latency of the pods offered between the two samples before: they have had
                    # a whole interval to be placed.
                    window = offered[offered_at_samples[-2] : offered_at_samples[-1]]
                    sample = await _sample(lags, roots, recorder, cluster, offered, window, now - started)
                    offered_at_samples.append(len(offered))
                    samples.append(sample)
                    next_sample += options.sample_s
                    progress.update(task, completed=min(now - started, options.duration_s), status=_brief(sample))
                    if not console.is_terminal and len(samples) % report_every == 1:
                        console.print(f"{sample['t_s']:>7.0f} s  {_brief(sample)}")
                    if now - started >= options.duration_s:
                        break
                due = min(int((now - started) * rate) + 1, int(options.duration_s * rate))
                while len(offered) < due:
                    pod = factory.next()
                    cluster.register(pod)
                    recorder.published[pod.uid] = time.monotonic()
                    event = PodObserved(pod=pod, resource_version="1", observed_at=datetime.now(UTC))
                    pending.append(await producer.send(event))
                    offered.append(pod.uid)
                if len(pending) >= 500:
                    await asyncio.gather(*pending)
                    pending.clear()
                wake = min(started + len(offered) / rate, next_sample, started + options.duration_s)
                await asyncio.sleep(max(0.0, wake - time.monotonic()))
            await asyncio.gather(*pending)
        _wait_placed(running, offered, patience_s=60.0)
    latencies = [
        (recorder.placed[u] - recorder.published[u]) * 1000 if u in recorder.placed else float("inf") for u in offered
    ]
    return samples, latencies


async def _sample(
    lags: LagReader,
    roots: dict[str, int],
    recorder: Recorder,
    cluster: StandInCluster,
    offered: list[str],
    window: list[str],
    t_s: float,
) -> dict[str, Any]:
    lag, inputs = await lags.sample()
    placed = sum(1 for u in offered if u in recorder.placed) if offered else 0
    window_latencies = [(recorder.placed[u] - recorder.published[u]) * 1000 for u in window if u in recorder.placed] + [
        float("inf")
    ] * sum(1 for u in window if u not in recorder.placed)
    return {
        "t_s": round(t_s, 1),
        "rss_mib": {name: round(mib, 1) for name, mib in soak_stats.tree_rss_mib(roots).items()},
        "lag": lag,
        "end_offsets": inputs,
        "offered": len(offered),
        "placed": placed,
        "holding": cluster.holding,
        "p99_latency_ms_previous_interval": round(_pct(window_latencies, 0.99), 1) if window_latencies else None,
        "load1": round(os.getloadavg()[0], 2),
    }


def _brief(sample: dict[str, Any]) -> str:
    rss = " ".join(f"{name} {mib:.0f}" for name, mib in sample["rss_mib"].items() if _is_berth(name))
    lag = " ".join(f"{group} {value}" for group, value in sample["lag"].items())
    return f"RSS MiB: {rss} | lag: {lag} | holding {sample['holding']} | load {sample['load1']}"


def _is_berth(name: str) -> bool:
    return name.split("-")[0] in BERTH_SERVICES


def _summarise(
    options: SoakOptions,
    rate: float,
    rate_from: str,
    steps: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    latencies: list[float],
    elapsed_s: float,
) -> dict[str, Any]:
    times = [s["t_s"] for s in samples]
    rss = [
        soak_stats.rss_verdict(name, times, [s["rss_mib"][name] for s in samples]).as_dict()
        | {"berth_service": _is_berth(name)}
        for name in samples[0]["rss_mib"]
    ]
    groups = sorted({g for s in samples for g in s["lag"]})
    lag = []
    for group in groups:
        present = [s for s in samples if group in s["lag"]]
        if len(present) < 2:
            continue
        verdict = soak_stats.lag_verdict(
            group,
            [s["t_s"] for s in present],
            [s["lag"][group] for s in present],
            [s["end_offsets"][group] for s in present],
        )
        lag.append(verdict.as_dict())
    loads = [s["load1"] for s in samples]
    placed = [x for x in latencies if x != float("inf")]
    for step in steps:
        step.pop("started_at", None)
    judged = [v for v in rss if v["berth_service"]] + lag
    return {
        "duration_s": options.duration_s,
        "rate_pods_per_s": rate,
        "rate_from": rate_from,
        "achieved_pods_per_s": round(len(placed) / options.duration_s, 1),
        "pods_offered": len(latencies),
        "pods_not_placed": len(latencies) - len(placed),
        "p50_latency_ms": round(_pct(latencies, 0.50), 1) if latencies else None,
        "p99_latency_ms": round(_pct(latencies, 0.99), 1) if latencies else None,
        "lifetime_s": options.lifetime_s,
        "nodes": options.nodes,
        "decision_workers": options.decision_workers,
        "cpus": os.cpu_count(),
        "load1": {"min": min(loads), "mean": round(sum(loads) / len(loads), 2), "max": max(loads)},
        "thresholds": {
            "rss_mib_per_h": soak_stats.RSS_THRESHOLD_MIB_PER_H,
            "lag_share_of_input": soak_stats.LAG_THRESHOLD_SHARE_OF_INPUT,
            "lag_floor_records_per_min": soak_stats.LAG_THRESHOLD_FLOOR_PER_MIN,
        },
        "flat": all(v["flat"] for v in judged),
        "rss": rss,
        "lag": lag,
        "ramp_steps": steps,
        "samples": samples,
        "elapsed_s": round(elapsed_s, 1),
    }


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(
        title=f"Soak: {summary['rate_pods_per_s']:g} pods/s for {summary['duration_s']:g} s "
        f"(slopes over the second half)"
    )
    for column in ("series", "start", "end", "slope", "threshold", "flat"):
        table.add_column(column, justify="right" if column != "series" else "left")
    for verdict in summary["rss"]:
        label = f"RSS {verdict['series']}" + ("" if verdict["berth_service"] else " (reference)")
        table.add_row(
            label,
            f"{verdict['start']} MiB",
            f"{verdict['end']} MiB",
            f"{verdict['slope']} MiB/h",
            f"{verdict['threshold']} MiB/h",
            _yes(verdict["flat"]),
        )
    for verdict in summary["lag"]:
        table.add_row(
            f"lag {verdict['series']}",
            f"{verdict['start']:g}",
            f"{verdict['end']:g}",
            f"{verdict['slope']} /min",
            f"{verdict['threshold']} /min",
            _yes(verdict["flat"]),
        )
    console.print(table)
    load = summary["load1"]
    console.print(
        f"offered {summary['pods_offered']:,} pods, achieved {summary['achieved_pods_per_s']} pods/s, "
        f"p50 {summary['p50_latency_ms']} ms, p99 {summary['p99_latency_ms']} ms, "
        f"{summary['pods_not_placed']} not placed; load average {load['min']}–{load['max']} "
        f"(mean {load['mean']}); verdict: {'flat' if summary['flat'] else '[red]growing[/]'}"
    )


def _yes(flat: bool) -> str:
    return "yes" if flat else "[red]no[/]"
