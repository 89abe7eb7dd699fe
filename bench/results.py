"""Every bench's figures, the same way: one JSON object on the last line of standard output, and
(with ``--record``) one row in the results log of ``bench/README.md`` saying which command
produced them, on which machine, when.

A figure means little without the command and the machine: a 2-core VM shared with other work
and a quiet 32-core server differ by an order of magnitude, so the row carries the core count,
memory and the load average at the end of the run next to the figures.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_README = Path(__file__).with_name("README.md")
LOG_HEADING = "## Results log"
LOG_HEADER = "| date (UTC) | command | machine | figures |\n|---|---|---|---|\n"
RECORD_HELP = "append a row (command, machine, date, figures) to the results log of bench/README.md"


def machine() -> str:
    """Cores, memory and the 1-minute load average: what a reader needs to weigh a figure."""
    cores = os.cpu_count() or 0
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages * page_size / 2**30:.0f} GiB"
    except (ValueError, OSError):
        memory = ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.system()} {platform.machine()}, {cores} cores{memory}, load {load:.1f}"


def command_line(module: str, argv: Sequence[str]) -> str:
    """How to run it again: ``python -m <module>`` and the arguments as given (quoted for a shell)."""
    return " ".join(["python", "-m", module, *(shlex.quote(arg) for arg in argv)])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def results_row(command: str, headline: Mapping[str, Any], *, when: datetime, on: str) -> str:
    """One Markdown table row; ``headline`` is the few figures worth a glance (the JSON has the rest)."""
    figures = ", ".join(f"{key} {_cell(value)}" for key, value in headline.items())
    return f"| {when:%Y-%m-%d %H:%M} | `{command}` | {on} | {figures} |\n"


def append_row(row: str, readme: Path = BENCH_README) -> None:
    """Append ``row`` to the table under :data:`LOG_HEADING`, creating the heading and the table at
    the end of ``readme`` if either is missing. Rows stay in the order they were recorded."""
    text = readme.read_text() if readme.exists() else "# Benchmarks\n"
    if LOG_HEADING not in text:
        text = text.rstrip("\n") + f"\n\n{LOG_HEADING}\n\n{LOG_HEADER}"
    head, _, log = text.partition(LOG_HEADING)
    log = log.rstrip("\n") + "\n"
    if "|---|" not in log:
        log += "\n" + LOG_HEADER
    readme.write_text(head + LOG_HEADING + log + row)


def per_policy(policies: Mapping[str, Mapping[str, Any]], figures: Mapping[str, str]) -> dict[str, Any]:
    """Headline figures of a bench that compares policies or schedulers: for each one, the
    ``figures`` (key in its summary -> short label) it has."""
    return {
        f"{name} {label}": summary[key]
        for name, summary in policies.items()
        for key, label in figures.items()
        if key in summary
    }


def emit(
    module: str,
    summary: Mapping[str, Any],
    *,
    headline: Mapping[str, Any],
    argv: Sequence[str] | None = None,
    record: bool = False,
    readme: Path = BENCH_README,
) -> None:
    """Print ``summary`` as the last line of standard output and, if ``record``, log ``headline``
    with the command that produced it. Call it last: anything printed after it breaks the
    "JSON on the last line" contract scripts rely on."""
    if record:
        args = list(sys.argv[1:] if argv is None else argv)
        row = results_row(command_line(module, args), headline, when=datetime.now(UTC), on=machine())
        append_row(row, readme)
        print(f"recorded in {readme}", file=sys.stderr)
    print(json.dumps(summary), flush=True)
