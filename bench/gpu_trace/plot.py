"""One PNG per workload variant: GPU allocation against arrived demand, one line per policy.

Headless (matplotlib's Agg backend).  matplotlib is in the optional ``bench`` extra
(``pip install -e '.[bench]'``; ``make install`` installs it).  Each line is the mean over seeds
of the artifact's discrete curve (:func:`bench.gpu_trace.runner.allocation_curve`); the dashed
diagonal is "every arrived GPU allocated".  An inset zooms on the last 30 points of demand,
where the policies separate.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.gpu_trace.runner import RunSummary
from bench.gpu_trace.variants import VARIANTS

_STYLE = {
    "berth-engine": ("#c0392b", "-", 2.2),
    "berth": ("#e67e22", "--", 1.6),
    "fgd": ("#2c3e50", "-", 1.8),
    "bestfit": ("#2980b9", "-", 1.0),
    "gpupacking": ("#27ae60", "-", 1.0),
    "gpuclustering": ("#16a085", ":", 1.0),
    "dotprod": ("#8e44ad", "-", 1.0),
    "random": ("#7f8c8d", "-", 1.0),
}


def mean_curve(results: Sequence[RunSummary]) -> np.ndarray:
    """Mean over runs of their allocation curves (percent), NaN where no run has the bin."""
    width = max(len(r.curve) for r in results)
    stacked = np.full((len(results), width), np.nan)
    for i, r in enumerate(results):
        stacked[i, : len(r.curve)] = r.curve
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins stay NaN
        return np.nanmean(stacked, axis=0) * 100


def plot_variants(
    results: Sequence[RunSummary], policies: Sequence[str], variants: Sequence[str], out_dir: Path, demand: float
) -> list[Path]:
    """Write ``<out_dir>/alloc_<variant>.png`` for each variant; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for variant in variants:
        runs = [r for r in results if r.variant == variant]
        if not runs:
            continue
        seeds = sorted({r.seed for r in runs})
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=80)
        inset = ax.inset_axes((0.52, 0.08, 0.45, 0.45))
        top = round(demand * 100)
        for policy in policies:
            mine = [r for r in runs if r.policy == policy]
            if not mine:
                continue
            curve = mean_curve(mine)
            x = np.arange(curve.size)
            color, line, width = _STYLE.get(policy, (None, "-", 1.0))
            label = f"{policy} ({np.mean([r.allocation_at_demand for r in mine]):.2%})"
            ax.plot(x, curve, line, color=color, linewidth=width, label=label)
            inset.plot(x, curve, line, color=color, linewidth=width)
        ax.plot([0, 100], [0, 100], ":", color="grey", linewidth=0.8)
        inset.set_xlim(top - 30, top)
        low = np.nanmin(
            [
                mean_curve([r for r in runs if r.policy == p])[top - 30]
                for p in policies
                if any(r.policy == p for r in runs)
            ]
        )
        inset.set_ylim(max(0.0, low - 2), 100)
        inset.tick_params(labelsize=7)
        inset.grid(alpha=0.3)
        ax.set_xlim(0, top)
        ax.set_ylim(0, 100)
        ax.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
        ax.set_ylabel("GPU allocated (% of capacity)")
        info = VARIANTS.get(variant)
        subtitle = "" if info is None or info.kind == "default" else f" - {info.measure}: {info.percent:g} %"
        ax.set_title(f"{variant}{subtitle}\nmean of seeds {seeds[0]}-{seeds[-1]} ({len(seeds)})", fontsize=9)
        ax.legend(loc="upper left", fontsize=7, frameon=False)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"alloc_{variant}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def load_runs(paths: Sequence[Path]) -> list[RunSummary]:
    """Runs written by ``python -m bench.gpu_trace --runs-jsonl``; a later line for the same
    (variant, policy, seed) replaces an earlier one."""
    runs: dict[tuple[str, str, int], RunSummary] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                row["curve"] = tuple(float("nan") if v is None else v for v in row.get("curve", ()))
                summary = RunSummary(**row)
                runs[(summary.variant, summary.policy, summary.seed)] = summary
    return list(runs.values())


def main() -> None:
    """``python -m bench.gpu_trace.plot RUNS.jsonl... --out DIR``: one PNG per variant."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--policies", help="comma-separated, in legend order (default: all in the files)")
    parser.add_argument("--demand", type=float, default=1.3)
    args = parser.parse_args()
    runs = load_runs(args.runs)
    policies = args.policies.split(",") if args.policies else list(dict.fromkeys(r.policy for r in runs))
    variants = [v for v in VARIANTS if any(r.variant == v for r in runs)]
    for path in plot_variants(runs, policies, variants, args.out, args.demand):
        print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
