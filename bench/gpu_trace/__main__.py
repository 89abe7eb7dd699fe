"""``python -m bench.gpu_trace``: GPU allocation at 130 % demand, ATC'23 protocol.

Progress goes to stderr; a table and, as the very last line, one JSON object go to stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.gpu_trace.policies import DEFAULT_POLICIES as DEFAULT_POLICY_NAMES
from bench.gpu_trace.policies import REGISTRY
from bench.gpu_trace.protocol import DEMAND_PUBLISHED, PUBLISHED_ALLOCATION
from bench.gpu_trace.runner import RunSummary, run_matrix
from bench.gpu_trace.trace import NODE_LISTS, POD_LIST_DEFAULT, TRACE_DIR_ENV, default_data_dir

DEFAULT_POLICIES = ",".join(DEFAULT_POLICY_NAMES)


def parse_seeds(text: str) -> list[int]:
    """``"42-51"``, ``"42,45,50-51"`` -> sorted unique list of ints."""
    seeds: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            seeds.update(range(int(low), int(high) + 1))
        else:
            seeds.add(int(part))
    if not seeds:
        raise typer.BadParameter("no seeds given")
    return sorted(seeds)


def parse_policies(text: str) -> list[str]:
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in REGISTRY]
    if unknown or not names:
        raise typer.BadParameter(f"unknown policies {unknown}; known: {', '.join(REGISTRY)}")
    return list(dict.fromkeys(names))


def render_table(console: Console, results: list[RunSummary], policies: list[str], demand: float) -> None:
    pct = round(demand * 100)
    table = Table(title=f"GPU allocation at {pct} % demand (mean over seeds)", title_justify="left")
    for column in (
        "policy",
        f"alloc @ {pct}%",
        "final",
        "min .. max",
        "published",
        "vs published",
        "failed pods",
        "cpu s/run",
    ):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy in policies:
        runs = [r for r in results if r.policy == policy]
        at = np.array([r.allocation_at_demand for r in runs])
        final = np.array([r.final_allocation for r in runs])
        published = PUBLISHED_ALLOCATION.get(policy) if demand == DEMAND_PUBLISHED else None
        table.add_row(
            policy,
            f"{at.mean():.2%}",
            f"{final.mean():.2%}",
            f"{at.min():.2%} .. {at.max():.2%}",
            f"{published:.2%}" if published is not None else "-",
            f"{(at.mean() - published) * 100:+.2f} pt" if published is not None else "-",
            f"{np.mean([r.failed for r in runs]):.0f} / {np.mean([r.pods for r in runs]):.0f}",
            f"{np.mean([r.elapsed_s for r in runs]):.1f}",
        )
    console.print(table)
    console.print(
        f"alloc @ {pct}% = the artifact's figure: mean allocated GPU milli / capacity over the events whose "
        f"arrived demand rounds to {pct} %; final = after the last pod."
    )


def main(
    policies: Annotated[str, typer.Option(help=f"Comma-separated, from: {', '.join(REGISTRY)}")] = DEFAULT_POLICIES,
    seeds: Annotated[str, typer.Option(help="Seed list/ranges, e.g. 42-51 or 42,44")] = "42-51",
    demand: Annotated[float, typer.Option(help="Requested GPU / cluster GPU capacity")] = DEMAND_PUBLISHED,
    data: Annotated[
        Path | None, typer.Option(help=f"Trace directory (default: ${TRACE_DIR_ENV} or ../shared/data/gpu-v2023)")
    ] = None,
    node_list: Annotated[str, typer.Option(help="gpu: 1,213 GPU nodes (the paper's); all: 1,523 nodes")] = "gpu",
    workers: Annotated[int, typer.Option(help="Worker processes")] = min(2, os.cpu_count() or 1),
) -> None:
    """Reproduce the ATC'23 FGD allocation figures and measure Berth's policy beside them."""
    policy_names = parse_policies(policies)
    seed_list = parse_seeds(seeds)
    data_dir = data or default_data_dir()
    if node_list not in NODE_LISTS:
        raise typer.BadParameter(f"--node-list must be one of {sorted(NODE_LISTS)}")
    if not (data_dir / NODE_LISTS[node_list]).is_file() or not (data_dir / POD_LIST_DEFAULT).is_file():
        raise typer.BadParameter(f"trace files not found in {data_dir}")

    stderr = Console(stderr=True)
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]gpu-trace[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=stderr,
        transient=False,
    ) as progress:
        task = progress.add_task("", total=len(policy_names) * len(seed_list))

        def on_done(summary: RunSummary) -> None:
            progress.update(
                task,
                advance=1,
                description=f"{summary.policy} seed {summary.seed}: {summary.allocation_at_demand:.2%}",
            )

        results = run_matrix(data_dir, node_list, policy_names, seed_list, demand, workers, on_done)
    elapsed = time.perf_counter() - started

    render_table(Console(file=sys.stdout, width=132), results, policy_names, demand)

    def mean_of(policy: str, attribute: str) -> float:
        return round(float(np.mean([getattr(r, attribute) for r in results if r.policy == policy])), 6)

    summary = {
        "benchmark": "gpu-trace-v2023",
        "demand": demand,
        "seeds": seed_list,
        "node_list": node_list,
        "allocation": {p: mean_of(p, "allocation_at_demand") for p in policy_names},
        "allocation_final": {p: mean_of(p, "final_allocation") for p in policy_names},
        "published": dict(PUBLISHED_ALLOCATION) if demand == DEMAND_PUBLISHED else {},
        "elapsed_s": round(elapsed, 1),
    }
    sys.stdout.flush()
    print(json.dumps(summary), flush=True)


def cli() -> None:
    typer.run(main)


if __name__ == "__main__":
    cli()
