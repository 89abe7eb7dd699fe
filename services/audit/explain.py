"""``berth audit explain``: why a pod went where it went, or why it is pending, from Postgres."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from .models import CommandResultRow, CommandRow, DecisionRow


@dataclass(frozen=True)
class Explanation:
    subject: str
    decisions: list[DecisionRow]
    commands: dict[str, list[CommandRow]]
    results: dict[str, CommandResultRow]


def explain(engine: Engine, subject: str) -> Explanation:
    """Every decision about ``subject`` (``namespace/name``), oldest first, with commands and results."""
    with engine.connect() as connection:
        decisions = [
            row
            for row in connection.execute(
                select(DecisionRow)
                .where(DecisionRow.subject == subject)
                .order_by(DecisionRow.event_time, DecisionRow.input_offset, DecisionRow.decision_id)
            )
        ]
        ids = [row.decision_id for row in decisions]
        commands: dict[str, list[Any]] = {}
        results: dict[str, Any] = {}
        if ids:
            for row in connection.execute(select(CommandRow).where(CommandRow.decision_id.in_(ids))):
                commands.setdefault(row.decision_id, []).append(row)
            command_ids = [c.command_id for rows in commands.values() for c in rows]
            if command_ids:
                for row in connection.execute(
                    select(CommandResultRow).where(CommandResultRow.command_id.in_(command_ids))
                ):
                    results[row.command_id] = row
    return Explanation(subject, decisions, commands, results)


def render(explanation: Explanation, console: Any, *, top: int = 5) -> None:
    """Print an explanation for people: the latest decision in full, earlier ones in a line."""
    from rich.table import Table

    if not explanation.decisions:
        console.print(
            f"No decision about {explanation.subject} is recorded. Is the pod's "
            "schedulerName 'berth', and is the audit service running?"
        )
        return
    *earlier, latest = explanation.decisions
    if len(earlier) > 3:
        console.print(f"[dim]… {len(earlier) - 3} earlier decision(s)[/]")
    for row in earlier[-3:]:
        console.print(
            f"[dim]{row.event_time:%Y-%m-%d %H:%M:%S} {row.outcome}"
            f"{' on ' + row.node if row.node else ''}: {row.message or ''}[/]"
        )
    where = f" on [bold]{latest.node}[/]" if latest.node else ""
    gpus = f", GPU devices {latest.gpu_devices}" if latest.gpu_devices else ""
    console.print(
        f"{explanation.subject}: [bold]{latest.outcome}[/]{where}{gpus} "
        f"at {latest.event_time:%Y-%m-%d %H:%M:%S} (decision {latest.decision_id[:12]}, "
        f"config {latest.config_version}, input {latest.input_topic}[{latest.input_partition}]"
        f"@{latest.input_offset})"
    )
    if latest.message:
        console.print(f"  {latest.message}")
    for command in explanation.commands.get(latest.decision_id, []):
        result = explanation.results.get(command.command_id)
        status = (
            f"{result.status}{': ' + result.reason if result and result.reason else ''}" if result else "no result yet"
        )
        console.print(f"  command {command.command_type.rsplit('.', 2)[-2]} → {status}")
    feasible = sorted((v for v in latest.verdicts if v.get("reason") is None), key=lambda v: -(v.get("total") or 0))[
        :top
    ]
    if feasible:
        # Plugins as rows, nodes as columns: plugin names are long, node columns are few.
        plugins = sorted({name for v in feasible for name in v.get("scores", {})})
        table = Table(title=f"scores of the best {len(feasible)} feasible node(s), weighted")
        table.add_column("plugin", no_wrap=True)
        for verdict in feasible:
            table.add_column(verdict["node"], justify="right", no_wrap=True)
        for plugin in plugins:
            table.add_row(plugin, *(str(v.get("scores", {}).get(plugin, "")) for v in feasible))
        table.add_row("[bold]total[/]", *(f"[bold]{v.get('total', '')}[/]" for v in feasible))
        console.print(table)
    excluded = [v for v in latest.verdicts if v.get("reason")]
    if excluded:
        table = Table(title="nodes filtered out")
        table.add_column("node", no_wrap=True)
        table.add_column("reason")
        for verdict in excluded[: top * 4]:
            table.add_row(verdict["node"], verdict["reason"])
        if len(excluded) > top * 4:
            table.add_row("…", f"{len(excluded) - top * 4} more")
        console.print(table)
