"""The pipeline bench's picture (matplotlib, headless; ``pip install -e '.[bench]'``): pods offered
and placed per second over the run, and the p50 / p99 latency of the pods published in each second,
with the step boundaries and the 1 s latency goal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def per_second(
    published: Mapping[str, float], placed: Mapping[str, float], uids: Sequence[str], start: float
) -> tuple[list[int], list[int], list[int], list[float | None], list[float | None]]:
    """``(seconds, offered, placed, p50_ms, p99_ms)`` in one-second bins from ``start``: pods
    published and placed in each second, and the latency percentiles of the pods published in it
    (None where none was published; a pod never placed counts as infinitely late)."""
    end = max([published[u] for u in uids] + [placed[u] for u in uids if u in placed], default=start)
    bins = int(end - start) + 1
    offered, done = [0] * bins, [0] * bins
    latencies: list[list[float]] = [[] for _ in range(bins)]
    for uid in uids:
        second = int(published[uid] - start)
        offered[second] += 1
        if uid in placed:
            done[int(placed[uid] - start)] += 1
            latencies[second].append((placed[uid] - published[uid]) * 1000)
        else:
            latencies[second].append(float("inf"))
    p50 = [_pct(values, 0.50) for values in latencies]
    p99 = [_pct(values, 0.99) for values in latencies]
    return list(range(bins)), offered, done, p50, p99


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def plot_timeline(
    published: Mapping[str, float],
    placed: Mapping[str, float],
    uids: Sequence[str],
    step_starts: Sequence[tuple[float, float]],
    path: Path,
    title: str,
) -> Path:
    """Write the PNG to ``path``; ``step_starts``: (monotonic start, offered rate) of each step."""
    try:
        import matplotlib
    except ImportError as exc:
        raise SystemExit("error: --plot needs matplotlib: pip install -e '.[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = min(published[u] for u in uids)
    seconds, offered, done, p50, p99 = per_second(published, placed, uids, start)
    figure, (rate_axis, latency_axis) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    rate_axis.plot(seconds, offered, label="offered (published)", color="tab:gray", drawstyle="steps-post")
    rate_axis.plot(seconds, done, label="placed", color="tab:blue", drawstyle="steps-post")
    rate_axis.set_ylabel("pods / s")
    latency_axis.plot(
        seconds, [v if v is not None and v != float("inf") else None for v in p50], label="p50", color="tab:green"
    )
    latency_axis.plot(
        seconds, [v if v is not None and v != float("inf") else None for v in p99], label="p99", color="tab:red"
    )
    latency_axis.axhline(1000, color="black", linestyle="--", linewidth=0.8, label="1 s goal")
    latency_axis.set_yscale("log")
    latency_axis.set_ylabel("publish → placement (ms)")
    latency_axis.set_xlabel("seconds since the first step")
    for at, rate in step_starts:
        for axis in (rate_axis, latency_axis):
            axis.axvline(at - start, color="tab:gray", linewidth=0.5, alpha=0.5)
        rate_axis.annotate(
            f"{rate:g}/s", (at - start, 1), xycoords=("data", "axes fraction"), fontsize=7, va="top", ha="left"
        )
    rate_axis.legend(loc="upper left", fontsize=8)
    latency_axis.legend(loc="upper left", fontsize=8)
    rate_axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
