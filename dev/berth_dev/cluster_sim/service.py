"""The cluster simulator process: the API, the workload player, the decision watcher, progress.

Start-up order matters and is: topics exist → producer → decision watcher positioned at the end
of the decisions topic → API listening → starting cluster published → pods begin to arrive.
So a binder can connect as soon as the API answers, and no verdict about our pods is missed.

``/status`` (and the JSON summary printed on stdout at exit) report: simulated seconds, whether
the workload has been fully played, pod counts (arrived of the workload's total, pending, bound,
unschedulable, undecided, deleted, refused) with ``ledger``, what became of every pod created
(:meth:`~.state.ClusterState.ledger`), API counters, overcommitted binds and published events.
``all_decided`` is true once the workload is played and no pending pod of Berth's scheduler is
waiting for a verdict; it is only meaningful with the decision watcher on (without it, a pod
that cannot be placed stays undecided forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web
from berth.schemas.topics import DECISIONS
from prometheus_client import Gauge
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from berth.bus import EventProducer, ensure_topics
from berth.lifecycle import stop_on_signals
from berth.logs import get_logger
from berth.settings import BerthSettings
from berth_dev.workloads import Workload

from .api import make_app
from .clock import SimClock
from .decisions import DecisionWatcher
from .outbox import KafkaOutbox
from .player import WorkloadPlayer
from .state import ClusterState, PodRecord

log = get_logger(__name__)
SOURCE = "berth/cluster-sim"
PODS_GAUGE = Gauge("berth_sim_pods", "Pods in the simulated cluster, by state.", ["state"])


@dataclass(frozen=True)
class SimOptions:
    host: str = "127.0.0.1"
    port: int = 8470
    speed: float | None = 1.0
    """Simulated seconds per real second; None: as fast as possible."""
    watch_decisions: bool = True
    exit_when_decided: bool = False
    timeout_s: float | None = None
    """Stop after this many real seconds, decided or not."""
    progress: bool = True


class Simulator:
    """One run of the simulator; :meth:`status` is what ``/status`` answers."""

    def __init__(self, settings: BerthSettings, workload: Workload, options: SimOptions) -> None:
        self.settings = settings
        self.workload = workload
        self.options = options
        self.clock = SimClock(options.speed)
        self.state = ClusterState(workload.policies)
        self.producer = EventProducer(settings.kafka, source=SOURCE, linger_ms=5)
        self.outbox = KafkaOutbox(self.producer)
        self.player = WorkloadPlayer(workload, self.state, self.outbox, self.clock)
        self.watcher = DecisionWatcher(settings.kafka, self.state) if options.watch_decisions else None
        self.url = ""
        self.state.overcommit_listeners.append(self._overcommitted)
        self._started = time.monotonic()

    def _overcommitted(self, record: PodRecord, problem: str) -> None:
        log.warning(
            "overcommitted bind", pod=record.pod.key, pod_uid=record.pod.uid, node=record.pod.node_name, problem=problem
        )

    def status(self) -> dict[str, Any]:
        counts = self.state.counts()
        counters = asdict(self.state.counters)
        played = self.player.played
        return {
            "workload": self.workload.name,
            "sim_seconds": round(self.clock.seconds(), 3),
            "elapsed_seconds": round(time.monotonic() - self._started, 3),
            "played": played,
            "all_decided": played and counts["undecided"] == 0 and self.watcher is not None,
            "watching_decisions": self.watcher is not None,
            "decisions_seen": self.watcher.seen if self.watcher else 0,
            "nodes": counts["nodes"],
            "pods": {
                "workload": len(self.workload.pods),
                "arrived": self.player.arrived,
                "refused": self.player.refused,
                "created": counters["pods_created"],
                "pending": counts["pending"],
                "bound": counts["bound"],
                "unschedulable": counts["unschedulable"],
                "undecided": counts["undecided"],
                "undecided_uids": sorted(r.pod.uid for r in self.state.undecided()),
                "deleted": counters["pods_deleted"],
                "bound_total": counters["pods_bound"],
                "ledger": self.state.ledger(),
            },
            "api": {k: counters[k] for k in ("bind_conflicts", "evictions", "cordons", "scales")},
            "nodes_removed": counters["nodes_removed"],
            "spot_notices": self.player.spot_notices_sent,
            "overcommitted_binds": counters["overcommitted_binds"],
            "events_published": self.outbox.published,
        }

    async def run(self, stop: asyncio.Event | None = None) -> dict[str, Any]:
        """Run until stopped (or decided / timed out, per the options); returns the last status."""
        stop = stop or stop_on_signals()
        await ensure_topics(self.settings.kafka)
        await self.producer.start()
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(self.outbox.run(), name="outbox")]
        runner: web.AppRunner | None = None
        try:
            if self.watcher is not None:
                await self.watcher.start(await self.producer.raw.partitions_for(self.producer.names.topic(DECISIONS)))
                tasks.append(asyncio.create_task(self.watcher.run(), name="decisions"))
            runner = web.AppRunner(make_app(self.state, self.outbox, self.clock, self.status), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, self.options.host, self.options.port)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://{self.options.host}:{port}"
            # stdout carries only this line and the final summary: `export $(...)`-friendly.
            print(f"BERTH_SIM_URL={self.url}", flush=True)
            log.info(
                "cluster simulator listening",
                url=self.url,
                workload=self.workload.name,
                speed=self.options.speed or "max",
            )
            await self.player.setup()
            tasks.append(asyncio.create_task(self.player.run(), name="player"))
            await self._watch(stop, tasks)
        finally:
            self.player.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.outbox.drain(), timeout=10)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if runner is not None:
                await runner.cleanup()
            await self.producer.stop()
        return self.status()

    async def _watch(self, stop: asyncio.Event, tasks: list[asyncio.Task[Any]]) -> None:
        """Report progress until stopped, decided (if asked) or timed out; fail if a task died."""
        with _progress(self.options.progress) as progress:
            arrivals = progress.add_task("pods arrived", total=len(self.workload.pods) or None, stats="")
            while not stop.is_set():
                for task in tasks:
                    if task.done():
                        task.result()  # raises what killed it
                        raise RuntimeError(f"{task.get_name()} stopped unexpectedly")
                status = self.status()
                pods = status["pods"]
                for kind in ("pending", "bound", "unschedulable", "undecided"):
                    PODS_GAUGE.labels(kind).set(pods[kind])
                progress.update(
                    arrivals,
                    completed=pods["arrived"],
                    stats=(
                        f"t={status['sim_seconds']:.0f}s bound {pods['bound']} pending {pods['pending']} "
                        f"unschedulable {pods['unschedulable']} deleted {pods['deleted']}"
                    ),
                )
                if self.options.exit_when_decided and status["all_decided"]:
                    log.info("every pod decided", **{k: v for k, v in pods.items()})
                    return
                if self.options.timeout_s is not None and status["elapsed_seconds"] >= self.options.timeout_s:
                    log.warning("timed out", elapsed_s=status["elapsed_seconds"], undecided=pods["undecided"])
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.25)


@contextlib.contextmanager
def _progress(enabled: bool) -> Any:
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
        transient=False,
    )
    with progress:
        yield progress


def print_summary(status: dict[str, Any]) -> None:
    print(json.dumps(status, sort_keys=True), file=sys.stdout, flush=True)
