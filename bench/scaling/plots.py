"""Pictures of a scaling run (matplotlib, headless Agg backend; ``pip install -e '.[bench]'``).

* ``replicas.png``: the demand (tokens/s arriving, per minute) and, per policy, the replicas it
  asked for and the replicas serving, against the replicas the demand needs at full throughput;
* ``ttft.png``: per policy, the p50 / p95 / p99 TTFT of each minute against the SLO.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .sim import RunResult
from .workload import Workload

COLOURS = {
    "berth": "#1f77b4",
    "keda": "#d62728",
    "dynamo": "#2ca02c",
    "static": "#7f7f7f",
    "berth-nolead": "#9467bd",
    "berth (kafka)": "#ff7f0e",
}


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SystemExit("error: --plot-dir needs matplotlib: pip install -e '.[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def demand_per_minute(workload: Workload) -> np.ndarray:
    """Tokens/s arriving, averaged over each minute of the run."""
    minutes = max(1, workload.shape.duration_s // 60)
    index = np.minimum((workload.arrivals // 60).astype(np.int64), minutes - 1)
    return np.bincount(index, weights=workload.tokens.astype(float), minlength=minutes) / 60.0


def plot_replicas(
    workload: Workload, results: dict[str, RunResult], tokens_per_replica: float, path: Path, title: str
) -> Path:
    plt = _pyplot()
    names = list(results)
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(10, 1.9 * (len(names) + 1)), sharex=True)
    demand = demand_per_minute(workload)
    minutes = np.arange(demand.size) + 0.5
    axes[0].plot(minutes, demand / 1000.0, color="black", lw=1.2)
    axes[0].set_ylabel("demand\nk tokens/s")
    axes[0].set_title(title, fontsize=10, loc="left")
    needed = demand / tokens_per_replica
    for ax, name in zip(axes[1:], names, strict=True):
        r = results[name]
        t = np.arange(len(r.second_target)) / 60.0
        ax.step(t, r.second_target, where="post", color=COLOURS.get(name, "C0"), lw=1.3, label="asked for")
        ax.plot(t, r.second_ready, color=COLOURS.get(name, "C0"), lw=0.8, alpha=0.5, label="serving")
        ax.plot(minutes, needed, color="black", lw=0.8, ls=":", label="needed at 100 %")
        ax.set_ylabel(f"{name}\nreplicas")
        ax.set_ylim(bottom=0)
        ax.text(
            0.995,
            0.92,
            f"{r.slo_violation_minutes} SLO-violation min, {r.gpu_hours:.1f} GPU-h",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=8,
        )
    axes[1].legend(loc="upper left", fontsize=7, ncol=3, frameon=False)
    axes[-1].set_xlabel("minute of the run")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def plot_ttft(results: dict[str, RunResult], slo_s: float, path: Path, title: str) -> Path:
    plt = _pyplot()
    names = [n for n in results if results[n].minute_ttft]
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 1.8 * len(names)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        r = results[name]
        p = np.array(r.minute_ttft)
        minutes = np.arange(len(p)) + 1
        colour = COLOURS.get(name, "C0")
        ax.fill_between(
            minutes, np.maximum(p[:, 0], 1e-3), np.maximum(p[:, 2], 1e-3), color=colour, alpha=0.15, step="pre", lw=0
        )
        ax.step(minutes, np.maximum(p[:, 0], 1e-3), color=colour, lw=0.8, label="p50")
        ax.step(minutes, np.maximum(p[:, 1], 1e-3), color=colour, lw=1.4, label="p95 (the SLO's)")
        ax.step(minutes, np.maximum(p[:, 2], 1e-3), color=colour, lw=0.8, ls="--", label="p99")
        ax.axhline(slo_s, color="black", lw=0.9, ls=":", label=f"SLO {slo_s:g} s")
        ax.set_yscale("log")
        ax.set_ylabel(f"{name}\nTTFT s")
        ax.text(
            0.995,
            0.92,
            f"{r.slo_violation_minutes} SLO-violation min",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=8,
        )
    axes[0, 0].set_title(title, fontsize=10, loc="left")
    axes[0, 0].legend(loc="upper left", fontsize=7, ncol=4, frameon=False)
    axes[-1, 0].set_xlabel("minute of the run")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def plot_kafka(pure: RunResult, kafka: RunResult, path: Path, tolerance_s: float) -> Path:
    """The replicas Berth asked for: the pure simulation against the run through Kafka."""
    plt = _pyplot()
    fig, ax = plt.subplots(1, 1, figsize=(10, 2.6))
    t = np.arange(len(pure.second_target)) / 60.0
    ax.step(t, pure.second_target, where="post", color=COLOURS["berth"], lw=2.2, alpha=0.6, label="pure simulation")
    tk = np.arange(len(kafka.second_target)) / 60.0
    ax.step(
        tk,
        kafka.second_target,
        where="post",
        color=COLOURS["berth (kafka)"],
        lw=1.1,
        label="through Kafka (token-lag → decision → binder → cluster-sim)",
    )
    ax.set_ylabel("replicas asked for")
    ax.set_xlabel("minute of the run")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Berth's replicas, pure vs through Kafka (tolerance ±{tolerance_s:.0f} s)", fontsize=10, loc="left")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
