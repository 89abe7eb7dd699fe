"""``berth demo``: Berth's main job on the local stack, start to finish, with nothing left behind.

1. Start Kafka 3.9.1 and Postgres 15 (:mod:`berth_dev.devstack`), migrate the audit store, create
   the topics.
2. Start every service as its own process (:mod:`berth_dev.supervisor`): inventory, token-lag,
   decision, binder, audit, and the cluster simulator playing the generated demo workload —
   ≥ 100 GPU nodes, ≥ 1,000 pods (whole, multi-GPU, fractional, MIG, CPU-only, gangs, pods that
   fit nowhere), spot notices and queue-lag bursts for two inference pools.
3. Midway, publish a malformed record: it must land in the dead-letter topic while the rest
   carries on.
4. When every pod is bound or known unschedulable and the audit has caught up, replay every
   decision from Postgres alone and count mismatches.
5. Print a summary and, as the very last line, one JSON object; stop everything.

The summary accounts for every pod, each in exactly one row (:func:`pod_fates`): the pods of the
workload plus the pool replicas the simulated cluster created are placed by Berth (then still
running, finished, evicted, gone with their node or scaled away), running from the start
(``spec.nodeName``), unschedulable at the end (grouped by reason), deleted while still pending
(a pool scaled down), refused by the API server, or — only while the run is going — pending
without a verdict or not arrived yet. The cluster simulator's ``/status`` ledger is the source.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from berth.services.audit import db
from berth.services.audit.models import DecisionRow
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import func, select

from berth.bus import ensure_topics
from berth.core.messages import parse_fit_error
from berth.settings import BerthSettings, DatabaseSettings
from berth_dev.devstack.procs import free_ports
from berth_dev.devstack.stack import DevStack
from berth_dev.supervisor import ServiceFailed, Supervisor

console = Console(stderr=True)
DEFAULT_SPEED = 20.0
"""Simulated seconds per real second: the 700 s demo timeline plays in about 35 s."""


def _recorded_stack() -> dict[str, str] | None:
    """The endpoints of a running `berth dev up` stack, if there is one that answers."""
    from berth_dev.devstack import stack as devstack

    state = devstack.status(quiet=True)
    if not state.healthy:
        return None
    env = state.env
    engine = db.make_engine(DatabaseSettings(url=env["BERTH_DATABASE_URL"]))
    try:
        db.upgrade(DatabaseSettings(url=env["BERTH_DATABASE_URL"]))
        with engine.connect() as connection:
            if connection.scalar(select(func.count()).select_from(DecisionRow)):
                raise ServiceFailed(
                    "the running dev stack already holds a demo run; for a fresh one: "
                    "berth dev down && berth dev up (or stop it to let the demo start its own)"
                )
    finally:
        engine.dispose()
    return env


def run_demo(
    *, speed: float = DEFAULT_SPEED, seed: int = 1, timeout_s: float = 900.0, keep_logs: Path | None = None
) -> dict[str, Any]:
    """Run the demo; returns the summary printed as the last line.

    With a `berth dev up` stack running, the demo uses it and leaves it up (so that
    ``berth audit explain`` can answer questions about the run); otherwise it starts its own
    Kafka and Postgres and stops them at the end.
    """
    started = time.monotonic()
    with TemporaryDirectory(prefix="berth-demo-") as scratch:
        work = keep_logs or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        existing = _recorded_stack()
        stack = None
        if existing is None:
            with console.status("starting Kafka 3.9.1 (KRaft) and Postgres 15 …"):
                stack = DevStack().start()
        try:
            env = existing or stack.env()  # type: ignore[union-attr]  # a stack was started when there is none
            console.print(
                f"[green]✓[/] Kafka at {env['BERTH_KAFKA_BOOTSTRAP']}, Postgres at "
                f"{DatabaseSettings(url=env['BERTH_DATABASE_URL']).redacted_url()}"
            )
            os.environ.update(env)
            settings = BerthSettings()
            db.upgrade(settings.database)
            asyncio.run(ensure_topics(settings.kafka))
            console.print("[green]✓[/] audit store migrated, topics created")
            summary = _run_pipeline(settings, env, work, speed=speed, seed=seed, timeout_s=timeout_s)
        finally:
            if stack is not None:
                with console.status("stopping Kafka and Postgres …"):
                    stack.stop()
            console.print(
                "[green]✓[/] stopped everything the demo started"
                + ("; the dev stack stays up" if existing else "")
                + (f"; service logs in {work}" if keep_logs else "")
            )
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    return summary


def _run_pipeline(
    settings: BerthSettings, env: dict[str, str], work: Path, *, speed: float, seed: int, timeout_s: float
) -> dict[str, Any]:
    from berth_dev.workloads import from_documents, generated_documents, write_documents, write_pools_file

    documents = generated_documents(f"demo:{seed}")
    workload, pools = work / "demo-workload.yaml", work / "pools.yaml"
    write_documents(documents, workload)
    write_pools_file(from_documents(documents, name="demo"), pools)
    [sim_port] = free_ports(1)
    sim_url = f"http://127.0.0.1:{sim_port}"
    with Supervisor(work / "logs", {**env, "BERTH_LOG_LEVEL": "info"}) as services:
        with console.status("starting the services …"):
            services.start("audit")
            services.start("inventory")
            services.start("token-lag", ["run", "--pools", str(pools)])
            services.start("decision", ["run", "--pools", str(pools)])
            services.start("binder", ["run", "--backend", "sim", "--sim-url", sim_url])
            services.start(
                "cluster-sim",
                ["run", "--workload", str(workload), "--speed", str(speed), "--port", str(sim_port), "--no-progress"],
            )
        console.print(
            "[green]✓[/] services running: "
            + ", ".join(f"{name} (pid {service.pid})" for name, service in services.services.items())
        )
        status = _follow(services, sim_url, timeout_s=timeout_s, malformed_at=0.5)
        # The cluster stands still (binder first: with no cluster to bind to it would fail
        # commands and the cell would place those pods again), so the pipeline drains.
        services.services["binder"].stop()
        services.services["cluster-sim"].stop()
        decisions = _wait_for_audit(settings)
        with console.status("replaying every decision from Postgres alone …"):
            report = _replay(settings)
        dead_letters = asyncio.run(_count_dead_letters(settings))
    fates = pod_fates(status["pods"])
    summary = {
        "pods": fates.total,
        "placed": fates.counts["placed"],
        "unschedulable": fates.counts["unschedulable"],
        "pods_by_fate": fates.counts,
        "decisions_audited": decisions,
        "replay_mismatches": len(report.mismatches),
        "overcommitted_binds": status["overcommitted_binds"],
        "spot_notices": status["spot_notices"],
        "pool_scale_events": status["api"]["scales"],
        "dead_lettered": dead_letters,
    }
    _print_summary(summary, status, report, fates)
    return summary


# --- what became of every pod ----------------------------------------------------------------------

FATES = {
    "placed": "placed by Berth",
    "running_from_start": "running from the start (spec.nodeName, no scheduler)",
    "unschedulable": "unschedulable at the end",
    "deleted_while_pending": "deleted while pending, never placed",
    "refused": "refused by the API server at creation",
    "undecided": "pending, no verdict yet",
    "other_scheduler": "pending for another scheduler",
    "not_arrived": "not arrived yet",
}
"""The rows of the pod account: each pod in exactly one."""

PLACED_THEN = {
    "running": "still running at the end",
    "finished": "finished (their run time was over)",
    "evicted": "evicted on Berth's command (preemption, spot drain)",
    "node removed": "deleted with their node (spot reclaim, node removal)",
    "scaled down": "removed by a pool scale-down",
    "deleted": "deleted through the API",
}
WITHDRAWN = {
    "scaled down": "removed by a pool scale-down",
    "finished": "finished",
    "evicted": "evicted on Berth's command",
    "node removed": "deleted with their node",
    "deleted": "deleted through the API",
}
VERDICT = {
    "unschedulable": "after an unschedulable verdict",
    "undecided": "before any verdict",
    "other scheduler": "(another scheduler's)",
}
TOP_REASONS = 5


@dataclass(frozen=True)
class PodFates:
    """Every pod of the run in exactly one row of ``counts``; ``details`` splits some rows
    (``placed``, ``unschedulable``, ``deleted_while_pending``) into sub-rows that add up to them."""

    total: int
    workload: int
    replicas: int
    counts: dict[str, int]
    details: dict[str, list[tuple[str, int]]]

    @property
    def decidable(self) -> int:
        """What Berth has to decide now: the pods it placed and the pending pods of its scheduler."""
        return self.counts["placed"] + self.counts["unschedulable"] + self.counts["undecided"]

    @property
    def decided(self) -> int:
        return self.counts["placed"] + self.counts["unschedulable"]


def reason_class(message: str) -> str:
    """A pod's unschedulable message, reduced to a row: for kube's ``0/N nodes are available``
    the reason most nodes gave (ties by name), for a gang the gang's situation."""
    parts = parse_fit_error(message)
    if parts is not None:
        if parts.reasons:
            reason, _ = max(parts.reasons.items(), key=lambda item: (item[1], item[0]))
            return reason
        return parts.prefilter_message or message
    histogram = re.match(r"0/\d+ nodes are available: (.+?)\.(?: |$)", message)
    if histogram is not None:  # kube's wording, written by another hand: read it leniently
        entries = [re.fullmatch(r"(\d+) (.+)", entry) for entry in histogram.group(1).split(", ")]
        counted = [(int(entry.group(1)), entry.group(2)) for entry in entries if entry is not None]
        if counted:
            return max(counted)[1]
    if re.match(r"pod group \S+ did not fit as a whole", message):
        return "gang did not fit as a whole (fewer than minMember placeable)"
    if re.match(r"pod group \S+ has \d+ pending pods, fewer than minMember", message):
        return "gang waiting for members (fewer pending than minMember)"
    if re.match(r'pod group "\S+" not found', message):
        return "PodGroup not found"
    return message or "(no message)"


def pod_fates(pods: dict[str, Any]) -> PodFates:
    """The pod account from the cluster simulator's ``/status`` ``pods`` (its ledger)."""
    ledger = pods["ledger"]
    pending = ledger["pending"]
    replicas = ledger["created"] - pods["arrived"]
    withdrawn = ledger["deleted_while_pending"]
    counts = {
        "placed": ledger["placed"],
        "running_from_start": ledger["created_bound"],
        "unschedulable": pending["unschedulable"],
        "deleted_while_pending": sum(sum(by.values()) for by in withdrawn.values()),
        "refused": pods["refused"],
        "undecided": pending["undecided"],
        "other_scheduler": pending["other scheduler"],
        "not_arrived": pods["workload"] - pods["arrived"] - pods["refused"],
    }
    reasons: dict[str, int] = {}
    for message, count in ledger["unschedulable_reasons"].items():
        row = reason_class(message)
        reasons[row] = reasons.get(row, 0) + count
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    if len(ranked) > TOP_REASONS:
        ranked = [*ranked[: TOP_REASONS - 1], ("other reasons", sum(n for _, n in ranked[TOP_REASONS - 1 :]))]
    details = {
        "placed": [
            (PLACED_THEN.get(cause, cause), n)
            for cause, n in sorted(
                ledger["placed_then"].items(),
                key=lambda item: list(PLACED_THEN).index(item[0]) if item[0] in PLACED_THEN else len(PLACED_THEN),
            )
            if n
        ],
        "unschedulable": ranked,
        "deleted_while_pending": [
            (f"{WITHDRAWN.get(cause, cause)} {VERDICT.get(stage, stage)}", n)
            for cause, by in sorted(withdrawn.items())
            for stage, n in sorted(by.items())
            if n
        ],
    }
    return PodFates(
        total=pods["workload"] + replicas, workload=pods["workload"], replicas=replicas, counts=counts, details=details
    )


def _status(sim_url: str) -> dict[str, Any] | None:
    """The simulator's /status, or None while its API is not listening yet."""
    try:
        with urllib.request.urlopen(f"{sim_url}/status", timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


def _follow(services: Supervisor, sim_url: str, *, timeout_s: float, malformed_at: float) -> dict[str, Any]:
    """Show progress until every pod is decided; inject one malformed record on the way."""
    deadline = time.monotonic() + timeout_s
    injected = False
    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=16),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        arrived = progress.add_task("pods arrived", total=None, detail="")
        decided = progress.add_task("pods decided", total=None, detail="")
        while True:
            services.check_alive()
            if time.monotonic() > deadline:
                raise ServiceFailed(f"the demo did not finish within {timeout_s:.0f} s")
            status = _status(sim_url)
            if status is None:
                time.sleep(0.5)
                continue
            pods = status["pods"]
            fates = pod_fates(pods)
            # Arrived: the workload's pods (the pools' replicas are created by the cluster itself).
            progress.update(
                arrived,
                completed=pods["arrived"] + pods["refused"],
                total=pods["workload"],
                detail=f"sim {status['sim_seconds']:.0f}s, +{fates.replicas} replicas",
            )
            # Decided: of what Berth has to decide (the pods it placed and those pending for it),
            # how many are placed or known unschedulable. Pods deleted while pending leave it.
            counts = fates.counts
            progress.update(
                decided,
                completed=fates.decided,
                total=fates.decidable,
                detail=f"placed {counts['placed']}, unschedulable {counts['unschedulable']}",
            )
            if not injected and pods["arrived"] >= malformed_at * pods["workload"]:
                asyncio.run(_publish_malformed())
                injected = True
            if status["all_decided"]:
                return status
            time.sleep(0.5)


async def _publish_malformed() -> None:
    """A pod event a buggy producer might send: no CloudEvents headers, a negative request."""
    from aiokafka import AIOKafkaProducer
    from berth.schemas.topics import PODS

    kafka = BerthSettings().kafka
    producer = AIOKafkaProducer(**kafka.client_options())
    await producer.start()
    try:
        await producer.send_and_wait(kafka.names.topic(PODS), b'{"pod": {"requests": {"cpu": -1}}}', key=b"broken")
    finally:
        await producer.stop()
    console.print("[yellow]![/] published a malformed pod record (it must be dead-lettered)")


async def _count_dead_letters(settings: BerthSettings) -> int:
    from berth.schemas.topics import DEAD_LETTER

    from berth.bus import EventConsumer

    count = 0
    async with EventConsumer(settings.kafka, [DEAD_LETTER], group_id=None, name="demo-dlq") as consumer:
        async for _ in consumer.events(idle_timeout_s=2):
            count += 1
    return count


async def _kafka_counts(settings: BerthSettings) -> tuple[int, int]:
    """(decision inputs, decision records) committed to Kafka: what the audit must hold."""
    from berth.schemas import DecisionRecord
    from berth.schemas.topics import DECISION_INPUTS, DECISIONS

    from berth.bus import EventConsumer

    inputs = decisions = 0
    async with EventConsumer(
        settings.kafka, [DECISION_INPUTS, DECISIONS], group_id=None, name="demo-count"
    ) as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            if item.topic == settings.kafka.names.topic(DECISION_INPUTS):
                inputs += 1
            elif isinstance(item.event, DecisionRecord):
                decisions += 1
    return inputs, decisions


def _wait_for_audit(settings: BerthSettings, *, timeout_s: float = 120.0) -> int:
    """Wait until Postgres holds every decision input and decision record Kafka holds: replay
    compares the two, so starting it earlier reports mismatches that are only lag."""
    from berth.services.audit.models import InputRow

    engine = db.make_engine(settings.database)
    deadline = time.monotonic() + timeout_s
    try:
        with console.status("waiting for the pipeline to drain and the audit store to catch up …"):
            # Quiet means: Kafka's counts did not move between two looks, and Postgres holds them
            # all. (One input can yield many decisions in one transaction; an audit caught half
            # way through them, or a decision service still draining, reads as replay mismatches.)
            previous = None
            while True:
                counts = asyncio.run(_kafka_counts(settings))
                with engine.connect() as connection:
                    inputs = connection.scalar(select(func.count()).select_from(InputRow)) or 0
                    decisions = connection.scalar(select(func.count()).select_from(DecisionRow)) or 0
                caught_up = inputs >= counts[0] and decisions >= counts[1]
                if (caught_up and counts == previous) or time.monotonic() > deadline:
                    return decisions
                previous = counts
                time.sleep(1.0)
    finally:
        engine.dispose()


def _replay(settings: BerthSettings) -> Any:
    from berth.services.audit.replay import replay

    engine = db.make_engine(settings.database)
    try:
        return replay(engine)
    finally:
        engine.dispose()


def pod_rows(fates: PodFates) -> list[tuple[str, int, int]]:
    """The pod account as table rows ``(label, pods, depth)``: depth 0 rows add up to the total
    (the first row), depth 1 rows to the row above them. Empty rows are left out."""
    rows = [(f"pods: {fates.workload:,} in the workload + {fates.replicas:,} pool replicas", fates.total, 0)]
    for key, label in FATES.items():
        if fates.counts[key]:
            rows.append((label, fates.counts[key], 1))
            rows += [(sub, n, 2) for sub, n in fates.details.get(key, [])]
    return rows


def _print_summary(summary: dict[str, Any], status: dict[str, Any], report: Any, fates: PodFates) -> None:
    table = Table(title="Berth demo", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows: list[tuple[str, Any]] = [("nodes (GPU nodes carry 8 devices)", status["nodes"])]
    rows += [
        (("  " * depth + ("└ " if depth == 2 else "")) + escape(label), f"{count:,}")
        for label, count, depth in pod_rows(fates)
    ]
    if sum(fates.counts.values()) != fates.total:
        rows.append(("[red]pods not accounted for[/]", fates.total - sum(fates.counts.values())))
    rows += [
        ("spot notices → nodes cordoned", summary["spot_notices"]),
        ("pool scale commands applied", summary["pool_scale_events"]),
        ("decisions in the audit store", summary["decisions_audited"]),
        ("replayed from Postgres", f"{report.compared} compared, {len(report.mismatches)} mismatched"),
        ("records dead-lettered", summary["dead_lettered"]),
        ("overcommitted binds (must be 0)", summary["overcommitted_binds"]),
    ]
    for label, value in rows:
        table.add_row(label, str(value))
    console.print(table)
    for mismatch in report.mismatches[:20]:
        console.print(
            f"[red]replay mismatch[/] {mismatch.kind} {mismatch.cell} {escape(mismatch.subject)} "
            f"({mismatch.decision_id[:12]}): recorded {escape(repr(mismatch.recorded))} "
            f"replayed {escape(repr(mismatch.replayed))}"
        )
    console.print("Ask why: [bold]berth audit explain NAMESPACE/POD[/] (with the stack up: berth dev up)")


def main(speed: float = DEFAULT_SPEED, keep_logs: Path | None = None) -> None:
    summary = run_demo(speed=speed, keep_logs=keep_logs)
    print(json.dumps(summary))
