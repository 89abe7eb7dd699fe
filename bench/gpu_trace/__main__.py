"""``python -m bench.gpu_trace``: GPU allocation at 130 % demand, ATC'23 protocol.

Progress goes to stderr; a table and, as the very last line, one JSON object go to stdout.
"""

from __future__ import annotations

import dataclasses
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
from bench.gpu_trace.variants import VARIANTS
from bench.results import RECORD_HELP, emit

DEFAULT_POLICIES = ",".join(DEFAULT_POLICY_NAMES)

HEADLINE_POLICIES = ("berth-engine", "fgd", "bestfit")
"""Whose mean allocation at the demand makes the row of the results log (the JSON has every policy)."""


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


def parse_variants(text: str) -> list[str]:
    """``"cpu200,gpushare60"``, a kind (``"cpu"``: all its variants) or ``"all"``."""
    names: list[str] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        if part == "all":
            names.extend(VARIANTS)
        elif part in VARIANTS:
            names.append(part)
        elif any(v.kind == part for v in VARIANTS.values()):
            names.extend(n for n, v in VARIANTS.items() if v.kind == part)
        else:
            raise typer.BadParameter(
                f"unknown variant {part!r}; known: all, {', '.join(VARIANTS)} "
                "or a kind (cpu, gpushare, multigpu, gpuspec)"
            )
    if not names:
        raise typer.BadParameter("no variant given")
    return list(dict.fromkeys(names))


def paired_vs(results: list[RunSummary], policy: str, baseline: str, attribute: str) -> np.ndarray | None:
    """Per seed, ``policy`` minus ``baseline`` (same pods), in points; None if either is missing."""
    mine = {r.seed: getattr(r, attribute) for r in results if r.policy == policy}
    theirs = {r.seed: getattr(r, attribute) for r in results if r.policy == baseline}
    seeds = sorted(set(mine) & set(theirs))
    if not seeds or policy == baseline:
        return None
    return np.array([(mine[s] - theirs[s]) * 100 for s in seeds])


def render_table(
    console: Console, results: list[RunSummary], policies: list[str], demand: float, variant: str = "default"
) -> None:
    pct = round(demand * 100)
    published_ok = demand == DEMAND_PUBLISHED and variant == "default"
    table = Table(title=f"{variant}: GPU allocation at {pct} % demand (mean over seeds)", title_justify="left")
    for column in (
        "policy",
        f"alloc @ {pct}%",
        "final",
        "min .. max",
        "@ 100%",
        "vs fgd (min)",
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
        at100 = np.array([r.allocation_at_100 for r in runs])
        published = PUBLISHED_ALLOCATION.get(policy) if published_ok else None
        vs = paired_vs(results, policy, "fgd", "allocation_at_demand")
        table.add_row(
            policy,
            f"{at.mean():.2%}",
            f"{final.mean():.2%}",
            f"{at.min():.2%} .. {at.max():.2%}",
            f"{at100.mean():.2%}",
            f"{vs.mean():+.2f} ({vs.min():+.2f}) pt" if vs is not None else "-",
            f"{published:.2%}" if published is not None else "-",
            f"{(at.mean() - published) * 100:+.2f} pt" if published is not None else "-",
            f"{np.mean([r.failed for r in runs]):.0f} / {np.mean([r.pods for r in runs]):.0f}",
            f"{np.mean([r.elapsed_s for r in runs]):.1f}",
        )
    console.print(table)
    console.print(
        f"alloc @ {pct}% = the artifact's figure: mean allocated GPU milli / capacity over the events whose "
        f"arrived demand rounds to {pct} %; final = after the last pod; @ 100% = the same at 100 % (the bin "
        "of the paper's variant figures); vs fgd = mean (and worst) per-seed difference, same pods."
    )


def render_matrix(
    console: Console, results: list[RunSummary], policies: list[str], variants: list[str], demand: float
) -> None:
    """Policy x variant: mean +- standard deviation over seeds at ``demand``."""
    pct = round(demand * 100)
    table = Table(title=f"GPU allocation at {pct} % demand, mean +- std over seeds", title_justify="left")
    table.add_column("variant", justify="left")
    for policy in policies:
        table.add_column(policy, justify="right")
    for variant in variants:
        cells = []
        for policy in policies:
            at = np.array([r.allocation_at_demand for r in results if r.variant == variant and r.policy == policy])
            cells.append(f"{at.mean():.2%} +- {at.std() * 100:.2f}")
        table.add_row(variant, *cells)
    console.print(table)


def main(
    policies: Annotated[str, typer.Option(help=f"Comma-separated, from: {', '.join(REGISTRY)}")] = DEFAULT_POLICIES,
    seeds: Annotated[str, typer.Option(help="Seed list/ranges, e.g. 42-51 or 42,44")] = "42-51",
    demand: Annotated[float, typer.Option(help="Requested GPU / cluster GPU capacity")] = DEMAND_PUBLISHED,
    data: Annotated[
        Path | None, typer.Option(help=f"Trace directory (default: ${TRACE_DIR_ENV} or ../shared/data/gpu-v2023)")
    ] = None,
    node_list: Annotated[str, typer.Option(help="gpu: 1,213 GPU nodes (the paper's); all: 1,523 nodes")] = "gpu",
    workers: Annotated[int, typer.Option(help="Worker processes")] = min(2, os.cpu_count() or 1),
    variant: Annotated[
        str,
        typer.Option(
            help=f"Workload variant(s) of the trace, comma-separated: {', '.join(VARIANTS)}; a kind "
            "(cpu, gpushare, multigpu, gpuspec) for all of its; all"
        ),
    ] = "default",
    plot_dir: Annotated[
        Path | None, typer.Option(help="Write one PNG per variant there: allocation against arrived demand per policy")
    ] = None,
    runs_jsonl: Annotated[
        Path | None,
        typer.Option(
            help="Append every finished run (policy, variant, seed, figures, curve) to this JSON-lines file "
            "as it ends; `python -m bench.gpu_trace.plot` re-plots from such files"
        ),
    ] = None,
    record: Annotated[bool, typer.Option("--record", help=RECORD_HELP)] = False,
) -> None:
    """Reproduce the ATC'23 FGD allocation figures and measure Berth's policy beside them."""
    policy_names = parse_policies(policies)
    seed_list = parse_seeds(seeds)
    variant_names = parse_variants(variant)
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
        task = progress.add_task("", total=len(variant_names) * len(policy_names) * len(seed_list))

        def on_done(summary: RunSummary) -> None:
            if runs_jsonl is not None:
                with runs_jsonl.open("a") as out:
                    out.write(json.dumps(dataclasses.asdict(summary)) + "\n")
            progress.update(
                task,
                advance=1,
                description=f"{summary.variant} {summary.policy} seed {summary.seed}: "
                f"{summary.allocation_at_demand:.2%}",
            )

        results = run_matrix(
            data_dir, node_list, policy_names, seed_list, demand, workers, on_done, variants=variant_names
        )
    elapsed = time.perf_counter() - started

    stdout = Console(file=sys.stdout, width=160)
    for name in variant_names:
        render_table(stdout, [r for r in results if r.variant == name], policy_names, demand, name)
    if len(variant_names) > 1:
        render_matrix(stdout, results, policy_names, variant_names, demand)
    if plot_dir is not None:
        from bench.gpu_trace.plot import plot_variants  # matplotlib: the optional `bench` extra

        for path in plot_variants(results, policy_names, variant_names, plot_dir, demand):
            stderr.print(f"wrote {path}")

    def stats(name: str, policy: str, attribute: str) -> float:
        values = [getattr(r, attribute) for r in results if r.policy == policy and r.variant == name]
        return round(float(np.mean(values)), 6)

    def spread(name: str, policy: str) -> float:
        values = [r.allocation_at_demand for r in results if r.policy == policy and r.variant == name]
        return round(float(np.std(values)), 6)

    by_variant = {
        name: {
            "allocation": {p: stats(name, p, "allocation_at_demand") for p in policy_names},
            "allocation_std": {p: spread(name, p) for p in policy_names},
            "allocation_100": {p: stats(name, p, "allocation_at_100") for p in policy_names},
            "allocation_final": {p: stats(name, p, "final_allocation") for p in policy_names},
        }
        for name in variant_names
    }
    summary: dict[str, object] = {
        "benchmark": "gpu-trace-v2023",
        "demand": demand,
        "seeds": seed_list,
        "node_list": node_list,
        "variants": variant_names,
    }
    if len(variant_names) == 1:
        summary.update(by_variant[variant_names[0]])
    else:
        summary["by_variant"] = by_variant
    summary["published"] = (
        dict(PUBLISHED_ALLOCATION) if demand == DEMAND_PUBLISHED and variant_names == ["default"] else {}
    )
    summary["elapsed_s"] = round(elapsed, 1)
    sys.stdout.flush()
    headline = {
        f"{name} {policy} %": round(100 * figures["allocation"][policy], 2)
        for name, figures in by_variant.items()
        for policy in policy_names
        if policy in HEADLINE_POLICIES
    }
    emit("bench.gpu_trace", summary, headline=headline, record=record)


def cli() -> None:
    typer.run(main)


if __name__ == "__main__":
    cli()
