"""``python -m bench.pipeline``: placements per second through the real stack, at rising load.

Starts Kafka and Postgres (:class:`~berth_dev.devstack.stack.DevStack`) and the audit, inventory and
decision services as their own processes (:class:`~berth_dev.supervisor.Supervisor`); publishes the
bench generator's nodes (5,000 8-GPU nodes) as ``NodeObserved``; then offers pending pods
(``PodObserved``, schedulerName berth) at rising rates, a few seconds per step, until the pipeline
saturates (achieved < 0.9 × offered, or p99 latency > 1 s).

Latency of a pod: from its ``PodObserved`` being handed to the producer to its ``PlacePods``
command being consumed from ``berth.scheduler.commands.v1`` (by a consumer thread of this
process, same monotonic clock). The same thread also notes when the pod reaches its cell's input
log (``berth.scheduler.inputs.v1``), which splits the latency into the inventory hop and the
decision hop. No binder runs: the cells assume their placements forever, as for binds in flight.

Progress on stderr; a table, then as the LAST line one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.results import RECORD_HELP, emit

console = Console(stderr=True)
RATES = (25, 50, 100, 200, 400, 800, 1600)
STEP_S = 8.0
DRAIN_S = 6.0
NODES = 5000
PROBES = 16


class Recorder:
    """Consumes the cells' inputs and the commands in a thread with its own event loop."""

    def __init__(self, kafka: Any) -> None:
        self.kafka = kafka
        self.published: dict[str, float] = {}
        self.at_input: dict[str, float] = {}
        self.placed: dict[str, float] = {}
        self.node_inputs = 0
        self.other_commands = 0
        self.placements: queue.SimpleQueue[Any] | None = None
        """Set it to receive every ``PlacePods`` consumed (the soak's stand-in cluster reads them)."""
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="bench-recorder", daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(60):
            raise RuntimeError("the recorder's consumers did not start")
        if self.error:
            raise self.error

    def check(self) -> None:
        """Raise the consumer thread's error, if it died."""
        if self.error is not None:
            raise RuntimeError("the benchmark's consumer failed") from self.error

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._consume())
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    async def _consume(self) -> None:
        """Reads only what timing needs: the CloudEvent type and partition key headers, and the
        placed pods' UIDs of a ``PlacePods`` body. Validating every record with the schema models,
        as the services do, would cost this process about as much CPU per pod as a service, on
        the same cores as the pipeline it measures."""
        from aiokafka import AIOKafkaConsumer
        from berth.schemas import NodeObserved, PlacePods, PodObserved, PodRouted
        from berth.schemas.envelope import decode
        from berth.schemas.topics import COMMANDS, DECISION_INPUTS

        commands = self.kafka.names.topic(COMMANDS)
        inputs = self.kafka.names.topic(DECISION_INPUTS)
        place_pods = PlacePods.model_fields["type"].default.encode()
        pod_inputs = {
            PodObserved.model_fields["type"].default.encode(),
            PodRouted.model_fields["type"].default.encode(),
        }
        node_observed = NodeObserved.model_fields["type"].default.encode()
        consumer = AIOKafkaConsumer(
            commands,
            inputs,
            **self.kafka.client_options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=5000,
        )
        await consumer.start()
        try:
            # Wait for the assignment so nothing published from now on is missed.
            while not consumer.assignment():
                await asyncio.sleep(0.05)
            self.ready.set()
            while not self.stopping.is_set():
                batches = await consumer.getmany(timeout_ms=50)
                now = time.monotonic()
                for tp, records in batches.items():
                    for record in records:
                        headers = dict(record.headers)
                        event_type = headers.get("ce_type")
                        if tp.topic == commands:
                            if event_type != place_pods:
                                self.other_commands += 1
                                continue
                            for placement in json.loads(record.value)["placements"]:
                                self.placed.setdefault(placement["pod_uid"], now)
                            if self.placements is not None:
                                self.placements.put(decode(COMMANDS, record.key, record.value, record.headers).event)
                        elif tp.topic == inputs:
                            if event_type in pod_inputs:
                                # A pod that pins no cell reaches its first cell routed (PodRouted).
                                self.at_input.setdefault(record.key.decode(), now)
                            elif event_type == node_observed:
                                self.node_inputs += 1
        finally:
            await consumer.stop()


def _scrape_all(ports: list[int]) -> dict[str, float]:
    """The samples of several instances of a service, added up by name and labels."""
    total: dict[str, float] = {}
    for port in ports:
        for name, value in _scrape(port).items():
            total[name] = total.get(name, 0.0) + value
    return total


def _cpu_seconds(ports: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds each service's processes have used so far (``process_cpu_seconds_total``, which
    prometheus-client exports for the process serving the metrics), added up per service."""
    return {
        name: sum(_scrape(port).get("process_cpu_seconds_total", 0.0) for port in service_ports)
        for name, service_ports in ports.items()
    }


def _scrape(port: int) -> dict[str, float]:
    """A service's /metrics as {sample name with labels: value}."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                samples[name] = float(value)
            except ValueError:
                pass
    return samples


def _sum(samples: dict[str, float], pattern: str) -> float:
    regex = re.compile(pattern)
    return sum(v for k, v in samples.items() if regex.fullmatch(k))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _publish_nodes(settings: Any, nodes: Any) -> None:
    from berth.schemas import NodeObserved

    from berth.bus import EventProducer

    now = datetime.now(UTC)
    async with EventProducer(settings.kafka, source="bench/pipeline", linger_ms=20) as producer:
        await producer.send_all(NodeObserved(node=n, resource_version="1", observed_at=now) for n in nodes)


async def _offer(settings: Any, pods: list[Any], rate: float, recorder: Recorder) -> float:
    """Publish ``pods`` evenly at ``rate`` per second; returns the seconds publishing took."""
    from berth.schemas import PodObserved

    from berth.bus import EventProducer

    futures = []
    async with EventProducer(settings.kafka, source="bench/pipeline", linger_ms=2) as producer:
        started = time.monotonic()
        sent = 0
        while sent < len(pods):
            due = min(len(pods), int((time.monotonic() - started) * rate) + 1)
            while sent < due:
                pod = pods[sent]
                event = PodObserved(pod=pod, resource_version="1", observed_at=datetime.now(UTC))
                recorder.published[pod.uid] = time.monotonic()
                futures.append(await producer.send(event))
                sent += 1
            next_at = started + sent / rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        took = time.monotonic() - started
        for future in futures:
            await future
    return took


def _step_figures(
    recorder: Recorder,
    pods: list[Any],
    rate: float,
    took: float,
    decide_before: dict[str, float],
    decide_after: dict[str, float],
) -> dict[str, Any]:
    uids = [p.uid for p in pods]
    start = min(recorder.published[u] for u in uids)
    latencies = [(recorder.placed[u] - recorder.published[u]) * 1000 for u in uids if u in recorder.placed]
    to_input = [(recorder.at_input[u] - recorder.published[u]) * 1000 for u in uids if u in recorder.at_input]
    decide_hop = [
        (recorder.placed[u] - recorder.at_input[u]) * 1000
        for u in uids
        if u in recorder.placed and u in recorder.at_input
    ]
    placed = len(latencies)
    last = max((recorder.placed[u] for u in uids if u in recorder.placed), default=start)
    window = max(last - start, took, 1e-9)
    achieved = placed / window
    missing = len(uids) - placed
    # Pods not placed by the end of the drain count as infinitely late.
    padded = latencies + [float("inf")] * missing
    count = _sum(decide_after, r"scheduler_scheduling_attempt_duration_seconds_count\{.*\}") - _sum(
        decide_before, r"scheduler_scheduling_attempt_duration_seconds_count\{.*\}"
    )
    total = _sum(decide_after, r"scheduler_scheduling_attempt_duration_seconds_sum\{.*\}") - _sum(
        decide_before, r"scheduler_scheduling_attempt_duration_seconds_sum\{.*\}"
    )
    return {
        "offered_pods_per_s": rate,
        "achieved_pods_per_s": round(achieved, 1),
        "pods": len(uids),
        "placed": placed,
        "p50_latency_ms": round(_pct(padded, 0.50), 1),
        "p99_latency_ms": round(_pct(padded, 0.99), 1),
        "max_latency_ms": round(max(padded), 1) if padded else None,
        "p50_to_cell_input_ms": round(_pct(to_input, 0.50), 1),
        "p99_to_cell_input_ms": round(_pct(to_input, 0.99), 1),
        "p50_input_to_command_ms": round(_pct(decide_hop, 0.50), 1),
        "p99_input_to_command_ms": round(_pct(decide_hop, 0.99), 1),
        "decide_ms_per_pod": round(total / count * 1000, 2) if count else None,
        "decision_cpu_share": round(total / window, 2),
    }


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


@dataclass
class RunningPipeline:
    """What :func:`pipeline` started: the settings to reach Kafka, the services' supervisor, the
    benchmark's recorder (consuming), each service's metrics ports, and the stack (its pids)."""

    settings: Any
    services: Any
    recorder: Recorder
    ports: dict[str, list[int]]
    stack: Any


@contextmanager
def pipeline(keep_logs: Path | None, decision_workers: int, *, secured: bool = False) -> Iterator[RunningPipeline]:
    """Kafka and Postgres (``DevStack``), the audit store migrated, the topics, and the audit,
    inventory and ``decision_workers`` decision processes, with a started :class:`Recorder`; all
    stopped on exit (the recorder too, if still running). ``secured``: Kafka over SASL_SSL and
    Postgres over TLS (``DevStack(secured_in=...)``), every process configured by the
    ``BERTH_*`` settings the README gives for that."""
    from berth.services.audit import db
    from berth_dev.devstack.stack import DevStack
    from berth_dev.supervisor import Supervisor

    from berth.bus import ensure_topics
    from berth.settings import BerthSettings

    with TemporaryDirectory(prefix="berth-bench-pipeline-") as scratch:
        work = keep_logs or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        with console.status("starting Kafka and Postgres …"):
            stack = DevStack(secured_in=work / "tls" if secured else None).start()
        try:
            env = stack.env()
            os.environ.update(env)
            settings = BerthSettings()
            db.upgrade(settings.database)
            asyncio.run(ensure_topics(settings.kafka))
            with Supervisor(work / "logs", {**env, "BERTH_LOG_LEVEL": "warning"}) as services:
                with console.status("starting audit, inventory, decision …"):
                    services.start("audit")
                    services.start("inventory")
                    # Workers of the group berth-decision share the cells (partitions) between them.
                    deciders = [services.start("decision", key=f"decision-{n}") for n in range(decision_workers)]
                recorder = Recorder(settings.kafka)
                recorder.start()
                ports = {
                    "inventory": [services.services["inventory"].metrics_port],
                    "decision": [d.metrics_port for d in deciders],
                    "audit": [services.services["audit"].metrics_port],
                }
                try:
                    yield RunningPipeline(settings, services, recorder, ports, stack)
                finally:
                    recorder.stop()
        finally:
            with console.status("stopping Kafka and Postgres …"):
                stack.stop()


def run(
    rates: tuple[float, ...] = RATES,
    step_s: float = STEP_S,
    nodes: int = NODES,
    seed: int = 1,
    keep_logs: Path | None = None,
    decision_workers: int = 1,
    plot: Path | None = None,
    secured: bool = False,
) -> dict[str, Any]:
    from berth_dev.workloads import from_documents, generated_documents

    started = time.monotonic()
    total_pods = PROBES + sum(int(r * step_s) for r in rates)
    with console.status(f"generating {nodes:,} nodes and {total_pods:,} pods …"):
        workload = from_documents(
            generated_documents(f"bench:{seed}", nodes=nodes, pods=total_pods), name=f"bench:{seed}"
        )
    all_pods = [t.pod for t in workload.pods]
    assert len({p.uid for p in all_pods}) == len(all_pods), "bench pods must have unique UIDs"
    steps: list[dict[str, Any]] = []
    with pipeline(keep_logs, decision_workers, secured=secured) as running:
        try:
            steps = _drive(
                running.settings,
                running.services,
                running.recorder,
                workload.nodes,
                all_pods,
                rates,
                step_s,
                running.ports,
            )
        finally:
            running.recorder.stop()
        if plot is not None:
            from .plot import plot_timeline

            recorder = running.recorder
            offered = [p.uid for p in all_pods[PROBES:] if p.uid in recorder.published]
            written = plot_timeline(
                recorder.published,
                recorder.placed,
                offered,
                [(s["started_at"], s["offered_pods_per_s"]) for s in steps],
                plot,
                f"Berth pipeline, {nodes:,} nodes, {decision_workers} decision process(es), {os.cpu_count()} CPUs",
            )
            console.print(f"[green]✓[/] wrote {written}")
    sustained = [s for s in steps if s["sustained"]]
    best = max(sustained, key=lambda s: s["achieved_pods_per_s"]) if sustained else None
    for step in steps:
        step.pop("started_at", None)  # a monotonic reading: for the plot, meaningless in the JSON
    summary = {
        "pods_per_s": best["achieved_pods_per_s"] if best else 0.0,
        "p50_latency_ms": best["p50_latency_ms"] if best else None,
        "p99_latency_ms": best["p99_latency_ms"] if best else None,
        "offered_pods_per_s": best["offered_pods_per_s"] if best else None,
        "saturated_at_offered": next((s["offered_pods_per_s"] for s in steps if not s["sustained"]), None),
        "peak_achieved_pods_per_s": max((s["achieved_pods_per_s"] for s in steps), default=0.0),
        "goal_met": bool(best and best["achieved_pods_per_s"] >= 680 and best["p99_latency_ms"] < 1000),
        "steps": steps,
        "nodes": nodes,
        "decision_workers": decision_workers,
        "cells": running.settings.kafka.cells,
        "secured": secured,
        "cpus": os.cpu_count(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    _print_table(summary)
    return _json_safe(summary)


def _drive(
    settings: Any,
    services: Any,
    recorder: Recorder,
    nodes: Any,
    all_pods: list[Any],
    rates: tuple[float, ...],
    step_s: float,
    ports: dict[str, list[int]],
    latency_bound: bool = True,
) -> list[dict[str, Any]]:
    """Offer each rate for ``step_s`` and measure it, until a step saturates; ``ports``: each
    service's metrics ports. ``latency_bound`` False: a p99 over 1 s does not count as saturated
    (only throughput does: below 0.9 × offered, or pods not placed by the end of the drain)."""
    decision_ports, inventory_port = ports["decision"], ports["inventory"][0]
    with console.status(f"publishing {len(nodes):,} NodeObserved …"):
        t0 = time.monotonic()
        asyncio.run(_publish_nodes(settings, nodes))
    console.print(f"[green]✓[/] {len(nodes):,} nodes published in {time.monotonic() - t0:.1f} s")
    with console.status("waiting for the cells' input logs to hold every node …") as status:
        t0 = time.monotonic()
        while recorder.node_inputs < len(nodes):
            services.check_alive()
            recorder.check()
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"only {recorder.node_inputs} of {len(nodes)} nodes reached the cells")
            status.update(f"waiting for the cells' input logs: {recorder.node_inputs:,}/{len(nodes):,} nodes")
            time.sleep(0.2)
    console.print(f"[green]✓[/] every node in the cells' input logs after {time.monotonic() - t0:.1f} s")
    probes, rest = all_pods[:PROBES], all_pods[PROBES:]
    with console.status("probe pods: waiting until the decision cells have folded the nodes …"):
        t0 = time.monotonic()
        asyncio.run(_offer(settings, probes, 1000.0, recorder))
        while not all(p.uid in recorder.placed for p in probes):
            services.check_alive()
            recorder.check()
            if time.monotonic() - t0 > 180:
                raise RuntimeError("probe pods were not placed within 180 s")
            time.sleep(0.1)
    console.print(f"[green]✓[/] {PROBES} probe pods placed after {time.monotonic() - t0:.1f} s (the cells are warm)")
    steps: list[dict[str, Any]] = []
    offset = 0
    for rate in rates:
        pods = rest[offset : offset + int(rate * step_s)]
        offset += len(pods)
        before = _scrape_all(decision_ports)
        cpu_before = _cpu_seconds(ports)
        started_at = time.monotonic()
        with console.status(f"offering {rate:g} pods/s for {step_s:g} s …"):
            took = asyncio.run(_offer(settings, pods, rate, recorder))
        deadline = time.monotonic() + DRAIN_S
        with console.status("draining …"):
            while time.monotonic() < deadline and not all(p.uid in recorder.placed for p in pods):
                services.check_alive()
                recorder.check()
                time.sleep(0.1)
        after = _scrape_all(decision_ports)
        cpu_after = _cpu_seconds(ports)
        inventory_lag = _sum(_scrape(inventory_port), r"berth_consumer_lag_records\{.*\}")
        step = _step_figures(recorder, pods, rate, took, before, after)
        step["cpu_ms_per_pod"] = {
            name: round((cpu_after[name] - cpu_before[name]) * 1000 / max(1, len(pods)), 2) for name in sorted(ports)
        }
        step["publish_s"] = round(took, 2)
        step["started_at"] = started_at
        step["inventory_lag_records_after"] = inventory_lag
        step["sustained"] = (
            step["achieved_pods_per_s"] >= 0.9 * rate
            and (step["p99_latency_ms"] < 1000 or not latency_bound)
            and step["placed"] == step["pods"]
        )
        steps.append(step)
        console.print(
            f"  offered {rate:>6g}/s → achieved {step['achieved_pods_per_s']:>7.1f}/s, "
            f"p50 {step['p50_latency_ms']} ms, p99 {step['p99_latency_ms']} ms "
            f"(to input p50 {step['p50_to_cell_input_ms']} ms; input→command p50 "
            f"{step['p50_input_to_command_ms']} ms; decide {step['decide_ms_per_pod']} ms/pod; CPU ms/pod "
            + ", ".join(f"{name} {ms}" for name, ms in step["cpu_ms_per_pod"].items())
            + ")"
            + ("" if step["sustained"] else "  [red]saturated[/]")
        )
        if not step["sustained"]:
            break
    if recorder.other_commands:
        console.print(f"[yellow]![/] {recorder.other_commands} commands other than PlacePods")
    return steps


def _print_table(summary: dict[str, Any]) -> None:
    table = Table(title=f"Berth pipeline, {summary['nodes']:,} nodes ({summary['cpus']} CPUs)")
    for column in (
        "offered/s",
        "achieved/s",
        "p50 ms",
        "p99 ms",
        "pub→input p50/p99 ms",
        "input→cmd p50/p99 ms",
        "decide ms/pod",
        "CPU ms/pod audit/dec/inv",
        "sustained",
    ):
        table.add_column(column, justify="right")
    for s in summary["steps"]:
        table.add_row(
            f"{s['offered_pods_per_s']:g}",
            f"{s['achieved_pods_per_s']:.1f}",
            f"{s['p50_latency_ms']}",
            f"{s['p99_latency_ms']}",
            f"{s['p50_to_cell_input_ms']} / {s['p99_to_cell_input_ms']}",
            f"{s['p50_input_to_command_ms']} / {s['p99_input_to_command_ms']}",
            f"{s['decide_ms_per_pod']}",
            " / ".join(str(s["cpu_ms_per_pod"][name]) for name in ("audit", "decision", "inventory")),
            "yes" if s["sustained"] else "no",
        )
    console.print(table)
    console.print(
        f"best sustained: {summary['pods_per_s']} pods/s (goal ≥ 680 pods/s with p99 < 1 s: "
        f"{'met' if summary['goal_met'] else 'not met'})"
    )


RAMP_HEADLINE = ("pods_per_s", "p50_latency_ms", "p99_latency_ms", "saturated_at_offered", "decision_workers", "cells")
"""The figures of a ramp worth a row in the results log (the JSON line has every step)."""
SOAK_HEADLINE = ("duration_s", "rate_pods_per_s", "achieved_pods_per_s", "p99_latency_ms", "flat")
"""The same for a soak."""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates",
        default=",".join(str(r) for r in RATES),
        help="offered pods/s per step, comma-separated (default %(default)s)",
    )
    parser.add_argument("--step-s", type=float, default=STEP_S, help="seconds per step (default %(default)s)")
    parser.add_argument("--nodes", type=int, default=NODES, help="nodes (default %(default)s)")
    parser.add_argument("--keep-logs", type=Path, help="keep the services' logs in this directory")
    parser.add_argument(
        "--decision-workers",
        type=int,
        default=1,
        help="decision processes sharing the cells (default %(default)s; the cells are "
        "the partitions of berth.scheduler.inputs.v1, so more than --cells idle)",
    )
    parser.add_argument(
        "--cells",
        type=int,
        help="decision cells, i.e. partitions of berth.scheduler.inputs.v1 (sets BERTH_KAFKA__CELLS for the "
        "stack and every service; default: that setting's default, 2)",
    )
    parser.add_argument(
        "--plot", type=Path, metavar="PNG", help="write throughput and latency over time to this PNG (needs matplotlib)"
    )
    parser.add_argument(
        "--secured",
        action="store_true",
        help="Kafka over SASL_SSL (SCRAM-SHA-512) and Postgres over TLS, with certificates made for the run",
    )
    soak = parser.add_argument_group(
        "soak", "a long run at one rate, watching RSS and consumer lag for growth (see bench/pipeline/soak.py)"
    )
    soak.add_argument("--soak", metavar="DURATION", help="soak for this long (e.g. 30m, 20s, 1h) instead of ramping")
    soak.add_argument(
        "--rate", type=float, help="pods/s to soak at (default: half the highest achieved by a short ramp first)"
    )
    soak.add_argument(
        "--lifetime-s", type=float, default=60.0, help="seconds a placed pod lives before it is deleted (default 60)"
    )
    soak.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples (default 10)")
    soak.add_argument("--json", type=Path, help="write the soak's summary and samples to this file")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args()
    if args.cells is not None:
        if args.cells < 1:
            parser.error("--cells must be at least 1")
        os.environ["BERTH_KAFKA__CELLS"] = str(args.cells)  # read by this process and the services it starts
    if args.soak is not None:
        _soak_main(args)
        return
    rates = tuple(float(r) for r in args.rates.split(","))
    summary = run(
        rates,
        args.step_s,
        args.nodes,
        keep_logs=args.keep_logs,
        decision_workers=args.decision_workers,
        plot=args.plot,
        secured=args.secured,
    )
    headline = {key: summary[key] for key in RAMP_HEADLINE}
    emit("bench.pipeline", summary, headline=headline, record=args.record)


def _soak_main(args: argparse.Namespace) -> None:
    from .soak import SoakOptions, run_soak
    from .soak_stats import parse_duration

    try:
        duration_s = parse_duration(args.soak)
    except ValueError as exc:
        console.print(f"error: --soak: {exc}")
        raise SystemExit(2) from None
    options = SoakOptions(
        duration_s=duration_s,
        rate=args.rate,
        lifetime_s=args.lifetime_s,
        sample_s=args.sample_s,
        nodes=args.nodes,
        decision_workers=args.decision_workers,
        keep_logs=args.keep_logs,
        json_path=args.json,
        plot=args.plot,
    )
    summary = run_soak(options)
    line = _json_safe({k: v for k, v in summary.items() if k not in ("samples", "ramp_steps")})
    headline = {key: line[key] for key in SOAK_HEADLINE if key in line}
    emit("bench.pipeline", line, headline=headline, record=args.record)
    if not summary["flat"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
