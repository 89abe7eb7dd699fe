"""``python -m bench.recovery.token_lag_worker REPORT KAFKA``: ``berth token-lag run`` as it is, plus
the observer of :mod:`bench.recovery.inventory_worker` (REPORT: when faust's table recovery
completed, and the key count and digest of the ``pools`` table), for :mod:`bench.recovery.token_lag`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.recovery.inventory_worker import table_digest


def main() -> None:
    report, kafka = Path(sys.argv[1]), sys.argv[2]
    from berth.services.token_lag import app as token_lag_app
    from berth.services.token_lag import cli

    create_app = token_lag_app.create_app

    def create_observed_app(*args: Any, **kwargs: Any) -> Any:
        built = create_app(*args, **kwargs)

        @built.app.task
        async def report_recovery() -> None:
            recovery = built.app.tables.recovery
            while not recovery.completed.is_set():
                await asyncio.sleep(0.02)
            recovered_at = time.time()
            digests = {"pools": table_digest(built.pools.table.items())}
            report.write_text(json.dumps({"recovered_at": recovered_at, "tables": digests}))

        return built

    token_lag_app.create_app = create_observed_app
    cli.run(kafka=kafka, data_dir=report.parent / "token-lag-data", store="memory://")


if __name__ == "__main__":
    main()
