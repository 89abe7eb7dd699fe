"""bench.results: the JSON last line and the results log's rows (command, machine, date, figures)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.results import LOG_HEADER, LOG_HEADING, append_row, command_line, emit, machine, per_policy, results_row


def test_a_row_names_the_command_the_machine_and_the_figures() -> None:
    row = results_row(
        command_line("bench.engine", ["--case", "gpu mixed"]),
        {"pods_per_s": 1754.4, "p50_us": 512.25, "note": "a|b"},
        when=datetime(2026, 11, 26, 13, 5, tzinfo=UTC),
        on="Linux x86_64, 2 cores",
    )
    assert row == (
        "| 2026-11-26 13:05 | `python -m bench.engine --case 'gpu mixed'` | Linux x86_64, 2 cores | "
        "pods_per_s 1,754, p50_us 512.2, note a\\|b |\n"
    )


def test_the_log_is_created_once_and_rows_keep_their_order(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nThe index.\n")
    append_row("| first |\n", readme)
    append_row("| second |\n", readme)
    text = readme.read_text()
    assert text.startswith("# Benchmarks\n\nThe index.\n")
    assert text.count(LOG_HEADING) == 1 and text.count(LOG_HEADER) == 1
    assert text.endswith("| first |\n| second |\n")


def test_emit_prints_the_summary_last_and_records_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    emit("bench.x", {"a": 1}, headline={"a": 1}, argv=["--n", "3"], readme=readme)
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"a": 1}
    assert not readme.exists()
    emit("bench.x", {"a": 2}, headline={"a": 2}, argv=["--n", "3"], record=True, readme=readme)
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"a": 2}
    [row] = [line for line in readme.read_text().splitlines() if "bench.x" in line]
    assert "`python -m bench.x --n 3`" in row and "cores" in row and row.endswith("| a 2 |")


def test_per_policy_headline_skips_missing_figures() -> None:
    policies = {"berth": {"slo": 4, "gpu_h": 13.8}, "keda": {"slo": 7}}
    assert per_policy(policies, {"slo": "SLO-min", "gpu_h": "GPU-h"}) == {
        "berth SLO-min": 4,
        "berth GPU-h": 13.8,
        "keda SLO-min": 7,
    }


def test_machine_says_cores_and_load() -> None:
    assert " cores" in machine() and "load " in machine()
