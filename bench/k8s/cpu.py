"""CPU seconds of every process a run starts, by component, read from ``/proc``.

Both schedulers run on the same cores as the control plane and the bench's own clients, so the
machine's CPU is what limits pods/s here; splitting it by process shows where each scheduler's
pods cost it (the bench's process creates the pods and watches them, the same work for both).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.pipeline.soak_stats import parent_pid, process_tree

BERTH_SERVICES = ("ingest", "inventory", "token-lag", "decision", "binder", "audit")


def component_of(cmdline: Sequence[str]) -> str | None:
    """What a process is, from its command line: a control-plane binary, Kafka, Postgres, a Berth
    service, kube-scheduler; None for anything else (a shell, a helper)."""
    if not cmdline:
        return None
    program = Path(cmdline[0]).name
    if program in ("kube-apiserver", "etcd", "kube-scheduler"):
        return program
    if program == "java" and any("kafka" in part for part in cmdline):
        return "kafka"
    if program in ("postgres", "postmaster") or cmdline[0].startswith("postgres:"):
        return "postgres"
    for index, part in enumerate(cmdline[:-1]):
        if Path(part).name == "berth" and cmdline[index + 1] in BERTH_SERVICES:
            return cmdline[index + 1]
    return None


def cpu_seconds(stat_text: str) -> float:
    """User + system CPU seconds in a ``/proc/<pid>/stat`` line (fields 14 and 15)."""
    fields = stat_text.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_component(root: int, proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds used so far by ``root`` (the bench, as ``"bench"``) and each of its descendants
    that :func:`component_of` names, added up per component. Processes that have exited are not
    counted: take two readings around a run in which the components stay up."""
    parents: dict[int, int] = {}
    stats: dict[int, str] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = parent_pid(stat)
                stats[int(entry.name)] = stat
            except (OSError, IndexError, ValueError):
                continue  # it exited while we looked
    totals: dict[str, float] = {}
    for pid in process_tree(root, parents):
        if pid == root:
            name: str | None = "bench"
        else:
            try:
                name = component_of((proc / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0"))
            except OSError:
                continue
        if name is not None and pid in stats:
            totals[name] = totals.get(name, 0.0) + cpu_seconds(stats[pid])
    return totals


def ms_per_pod(before: Mapping[str, float], after: Mapping[str, float], pods: int) -> dict[str, float]:
    """CPU milliseconds per pod of each component between two readings, largest first."""
    if pods <= 0:
        return {}
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    return {name: round(1000 * seconds / pods, 2) for name, seconds in sorted(used.items(), key=lambda i: -i[1])}


class CpuSampler:
    """Reads :func:`cpu_by_component` every ``interval_s`` in a thread, so that a run's CPU can be
    taken up to the moment its last pod was bound rather than to the end of the quiet period
    that tells the bench the run is over (idle CPU would be charged to the pods otherwise)."""

    def __init__(self, root: int, interval_s: float = 1.0) -> None:
        self.root = root
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self.samples.append((time.monotonic(), cpu_by_component(self.root)))
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), cpu_by_component(self.root)))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append((time.monotonic(), cpu_by_component(self.root)))

    def used_until(self, moment: float) -> tuple[dict[str, float], dict[str, float]]:
        """The first reading and the first one taken at or after ``moment`` (the last if none)."""
        after = next((reading for at, reading in self.samples if at >= moment), self.samples[-1][1])
        return self.samples[0][1], after
