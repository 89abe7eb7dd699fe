"""What other installed distributions add to Berth, found through entry points by name.

The product imports nothing of its development tooling (the berth-dev distribution); berth-dev
declares what it adds under these entry-point groups in its own metadata:

- ``berth.cli_plugins``: commands of ``berth``. The entry point's name is the command; its object
  is a Typer (a command group, such as ``berth dev``) or a function (one command, ``berth demo``).
- ``berth.binder_backends``: cluster backends of ``berth binder run --backend NAME``. The object
  makes the backend; ``sim``'s is called as ``(sim_url, *, timeout_s=...)``.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

CLI_PLUGINS = "berth.cli_plugins"
BINDER_BACKENDS = "berth.binder_backends"

INSTALL_DEV_TOOLING = "install berth-dev (`pip install -e ./dev` in a checkout of Berth; `make install` does)"
"""How to get the development tooling, for messages that say something needs it."""


@cache
def _registered(group: str) -> dict[str, EntryPoint]:
    # Read once per process: scanning every installed distribution's metadata takes milliseconds.
    found: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=group):
        found.setdefault(entry_point.name, entry_point)
    return found


def plugin_names(group: str) -> list[str]:
    """The names registered under entry-point ``group``, sorted."""
    return sorted(_registered(group))


def load_plugin(group: str, name: str) -> Any | None:
    """The object that entry point ``name`` of ``group`` refers to (imported now), or None when no
    installed distribution registers that name."""
    entry_point = _registered(group).get(name)
    return entry_point.load() if entry_point is not None else None
