"""``python -m bench.recovery.inventory_worker REPORT KAFKA``: ``berth inventory run`` as it is, plus
one observer, for :mod:`bench.recovery.inventory`.

It calls the command's own function (``berth.services.inventory.cli.run``: the same topics, app,
faust worker and ``memory://`` store as the deployed service); the one addition is a task on the
app that waits until faust says its table recovery is complete and then writes REPORT, a JSON
object: ``recovered_at`` (``time.time()``), and for each table its key count and a digest of its
sorted keys and values (:func:`table_digest`), so the bench can compare the recovered tables with
the ones it wrote. The service keeps running (the bench then times a new event through it) until
SIGTERM.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PROBE_PREFIX = "probe-"
"""Keys of the nodes the bench sends to time a new event: left out of the digests (the event may
be folded before the observer reads the tables)."""


def table_digest(items: Iterable[tuple[str, bytes]]) -> dict[str, Any]:
    """Key count and SHA-256 of a table's ``(key, value)`` pairs in key order, probe keys left out."""
    digest = hashlib.sha256()
    count = 0
    for key, value in sorted(item for item in items if not item[0].startswith(PROBE_PREFIX)):
        digest.update(key.encode())
        digest.update(b"\0")
        digest.update(value)
        digest.update(b"\0")
        count += 1
    return {"keys": count, "sha256": digest.hexdigest()}


def main() -> None:
    report, kafka = Path(sys.argv[1]), sys.argv[2]
    from berth.services.inventory import app as inventory_app
    from berth.services.inventory import cli

    create_app = inventory_app.create_app

    def create_observed_app(*args: Any, **kwargs: Any) -> Any:
        built = create_app(*args, **kwargs)
        tables = {"pod-routes": built.pod_routes.table, "nodes": built.nodes.table}

        @built.app.task
        async def report_recovery() -> None:
            recovery = built.app.tables.recovery
            while not recovery.completed.is_set():
                await asyncio.sleep(0.02)
            recovered_at = time.time()
            digests = {name: table_digest(table.items()) for name, table in tables.items()}
            report.write_text(json.dumps({"recovered_at": recovered_at, "tables": digests}))

        return built

    inventory_app.create_app = create_observed_app
    # A tick would send every cell a record; the bench wants the probe's output alone.
    cli.run(kafka=kafka, data_dir=report.parent / "inventory-data", store="memory://", tick_seconds=3600.0)


if __name__ == "__main__":
    main()
