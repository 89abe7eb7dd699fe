"""The soak's arithmetic, without I/O: reading ``/proc``, per-group consumer lag, and whether a
series stays flat (the least-squares slope over the run's second half against a threshold).

Thresholds, and why:

* **RSS: 20 MiB/hour.** A service growing that fast would go from its ~100–300 MiB to a 1 GiB
  container limit in under two days, which is a leak worth stopping a release for; and it is about
  the finest slope a 15-minute half-run can tell from allocator noise: a single 3 MiB step of the
  heap in the middle of the window fits a least-squares slope of 1.5 × 3 MiB / 0.25 h = 18 MiB/h.
* **Lag: 1 % of the group's input rate** (records/min, the slope of the end offsets of the
  partitions it consumes), and at least 60 records/min. A group that commits after batches of
  hundreds of records has a lag that jumps by a batch between samples; a slope below 1 % of what
  it reads is within that noise, while a consumer that cannot keep up at half the maximum rate
  falls behind by a sizeable share of its input. The floor keeps an idle group's noise from
  turning into a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RSS_THRESHOLD_MIB_PER_H = 20.0
LAG_THRESHOLD_SHARE_OF_INPUT = 0.01
LAG_THRESHOLD_FLOOR_PER_MIN = 60.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in ``30m``, ``20s``, ``1.5h`` or a bare number of seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 30m, 20s, 1h)")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if seconds <= 0:
        raise ValueError(f"a duration must be positive: {text!r}")
    return seconds


def rss_kib(status_text: str) -> int:
    """``VmRSS`` of a ``/proc/<pid>/status`` text, in KiB (0 for a zombie, which has none)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def parent_pid(stat_text: str) -> int:
    """The parent pid in a ``/proc/<pid>/stat`` line. The command name (2nd field) is in
    parentheses and may hold spaces and ``)``, so the fields are counted after its last ``)``."""
    return int(stat_text.rpartition(")")[2].split()[1])


def process_tree(root: int, parents: Mapping[int, int]) -> set[int]:
    """``root`` and its descendants, given ``{pid: parent pid}`` of every process."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def tree_rss_mib(roots: Mapping[str, int], proc: Path = Path("/proc")) -> dict[str, float]:
    """RSS in MiB of each named process with all its descendants (a service's worker processes,
    Postgres's backends); a process that is gone counts 0."""
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = parent_pid((entry / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue  # it exited while we looked
    found: dict[str, float] = {}
    for name, root in roots.items():
        total = 0
        for pid in process_tree(root, parents):
            try:
                total += rss_kib((proc / str(pid) / "status").read_text())
            except OSError:
                continue
        found[name] = total / 1024
    return found


def group_lag(committed: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int]) -> int:
    """Records a consumer group has not committed yet: the sum over the partitions it has
    committed on of ``end − committed`` (never negative: an end read before the commit)."""
    return sum(max(0, ends.get(tp, offset) - offset) for tp, offset in committed.items())


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Slope of the least-squares line through the points (0 for fewer than two distinct x)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var


def second_half(times_s: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The samples taken in the second half of the span of ``times_s`` (the first half is warm-up:
    caches and pools fill, the JIT-less interpreter still allocates its steady-state objects)."""
    if not times_s:
        return [], []
    middle = (times_s[0] + times_s[-1]) / 2
    kept = [(t, v) for t, v in zip(times_s, values, strict=True) if t >= middle]
    return [t for t, _ in kept], [v for _, v in kept]


@dataclass(frozen=True)
class Verdict:
    """Whether one series stayed flat: its first and last sample, the second half's slope (per
    ``unit``), the threshold it is held to, and the answer."""

    series: str
    unit: str
    start: float
    end: float
    slope: float
    threshold: float
    flat: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "series": self.series,
            "unit": self.unit,
            "start": round(self.start, 1),
            "end": round(self.end, 1),
            "slope": round(self.slope, 2),
            "threshold": round(self.threshold, 2),
            "flat": self.flat,
        }


def soak_rate(steps: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """(half the ramp's highest sustained rate, that rate). A step is sustained when it kept up
    with what it offered; a step that fell behind reports how fast a backlog drained for a few
    seconds, not a rate the pipeline holds (on this machine the first such step's "achieved" rate
    was 1.4 times the last sustained one, and a soak at half of it left the inventory 20,000
    records behind). Without a sustained step, the highest achieved rate is all there is."""
    kept_up = [float(s["achieved_pods_per_s"]) for s in steps if s.get("sustained")]
    peak = max(kept_up) if kept_up else max(float(s["achieved_pods_per_s"]) for s in steps)
    return round(peak / 2, 1), peak


def rss_verdict(
    name: str, times_s: Sequence[float], rss_mib: Sequence[float], threshold: float = RSS_THRESHOLD_MIB_PER_H
) -> Verdict:
    """Flat when the RSS grows by at most ``threshold`` MiB/hour over the second half."""
    xs, ys = second_half(times_s, rss_mib)
    slope = least_squares_slope(xs, ys) * 3600
    return Verdict(name, "MiB/h", rss_mib[0], rss_mib[-1], slope, threshold, slope <= threshold)


def lag_verdict(
    group: str,
    times_s: Sequence[float],
    lag: Sequence[float],
    end_offsets: Sequence[float],
    share: float = LAG_THRESHOLD_SHARE_OF_INPUT,
    floor_per_min: float = LAG_THRESHOLD_FLOOR_PER_MIN,
) -> Verdict:
    """Flat when the lag grows by at most ``share`` of the group's input (the slope of
    ``end_offsets``, the summed end offsets of its partitions) per minute, or ``floor_per_min``."""
    xs, ys = second_half(times_s, lag)
    slope = least_squares_slope(xs, ys) * 60
    input_xs, input_ys = second_half(times_s, end_offsets)
    input_per_min = least_squares_slope(input_xs, input_ys) * 60
    threshold = max(floor_per_min, share * input_per_min)
    return Verdict(group, "records/min", lag[0], lag[-1], slope, threshold, slope <= threshold)
