"""The soak's picture (matplotlib, headless; ``pip install -e '.[bench]'``): the RSS of each
process tree and each consumer group's lag over the run, the second half (where the slopes are
fitted) shaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_soak(summary: dict[str, Any], path: Path) -> Path:
    """Write the PNG of a :func:`~.soak.run_soak` summary to ``path``."""
    try:
        import matplotlib
    except ImportError as exc:
        raise SystemExit("error: --plot needs matplotlib: pip install -e '.[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = summary["samples"]
    minutes = [s["t_s"] / 60 for s in samples]
    figure, (rss_axis, lag_axis) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for verdict in summary["rss"]:
        name = verdict["series"]
        style = "-" if verdict["berth_service"] else ":"
        label = f"{name} ({verdict['slope']:+.1f} MiB/h)"
        rss_axis.plot(minutes, [s["rss_mib"][name] for s in samples], style, label=label)
    rss_axis.set_ylabel("RSS (MiB)")
    for verdict in summary["lag"]:
        group = verdict["series"]
        points = [(s["t_s"] / 60, s["lag"][group]) for s in samples if group in s["lag"]]
        lag_axis.plot(
            [t for t, _ in points],
            [max(v, 0.5) for _, v in points],
            label=f"{group} ({verdict['slope']:+.1f}/min)",
        )
    lag_axis.set_yscale("log")
    lag_axis.set_ylabel("consumer lag (records)")
    lag_axis.set_xlabel("minutes of soak")
    half = minutes[-1] / 2 if minutes else 0
    for axis in (rss_axis, lag_axis):
        axis.axvspan(half, minutes[-1] if minutes else 0, color="tab:gray", alpha=0.08)
        axis.legend(loc="upper left", fontsize=7, ncol=2)
    load = summary["load1"]
    rss_axis.set_title(
        f"Berth pipeline soak: {summary['rate_pods_per_s']:g} pods/s, {summary['nodes']:,} nodes, "
        f"{summary['cpus']} CPUs, load {load['min']}–{load['max']} (second half shaded)"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
