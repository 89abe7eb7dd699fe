"""The cell's view of its nodes: as observed, and as the engine must see them.

A node is shown to the engine as unschedulable while the cell cordoned it (a spot reclaim) or
while victims of a preemption still run there, whatever a stale observation says: until the
victims are really gone, what they hold beyond the preemptor's share must not go to anyone else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from berth.core.engine import Engine
from berth.schemas import NodeInfo

__all__ = ["NodeBook", "effective", "forget_node", "observe_node", "release_reservations", "reserve", "show"]


@dataclass
class NodeBook:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    """Nodes the cell cordoned (spot notices), kept unschedulable in the engine."""
    reserving: dict[str, set[str]] = field(default_factory=dict)
    """node → preemption victims still running there."""


def effective(book: NodeBook, node: Any) -> Any:
    """``node`` as the engine must see it (see the module docstring)."""
    if (node.name in book.cordoned or node.name in book.reserving) and not node.unschedulable:
        return node.model_copy(update={"unschedulable": True})
    return node


def show(book: NodeBook, engine: Engine, name: str) -> None:
    """Tell the engine how ``name`` stands now (a no-op for a node not observed)."""
    if name in book.nodes:
        engine.upsert_node(effective(book, book.nodes[name]))


def observe_node(book: NodeBook, engine: Engine, node: NodeInfo) -> None:
    book.nodes[node.name] = node
    engine.upsert_node(effective(book, node))


def forget_node(book: NodeBook, engine: Engine, name: str) -> None:
    book.nodes.pop(name, None)
    book.cordoned.discard(name)
    engine.remove_node(name)


def reserve(book: NodeBook, node: str, victim: str) -> None:
    book.reserving.setdefault(node, set()).add(victim)


def release_reservations(book: NodeBook, engine: Engine, gone: set[str]) -> None:
    """Victims in ``gone`` have left: a node none of whose victims remain takes pods again."""
    for name in sorted(book.reserving):
        victims = book.reserving[name]
        victims -= gone
        if not victims:
            del book.reserving[name]
            show(book, engine, name)
