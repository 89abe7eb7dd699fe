"""Memory snapshots from inside a running Berth service, for finding what grows in a soak.

Put this directory first on ``PYTHONPATH`` and set ``BERTH_MEMTRACE_DIR``; every Python process
started with that environment imports this module at start-up, and the one running
``berth <BERTH_MEMTRACE_SERVICE>`` (default ``decision``) starts :mod:`tracemalloc` and writes a
snapshot every ``BERTH_MEMTRACE_EVERY_S`` seconds (default 150) to
``<dir>/<pid>-<n>.snap``, with a line per snapshot in ``<dir>/<pid>.log`` (VmRSS and the traced
total). ``python -m bench.pipeline.memtrace A.snap B.snap`` shows what grew from A to B.

Tracing slows the process two- to threefold: soak at a rate the traced service keeps up with
(a service that falls behind holds a backlog, which then looks like growth).
"""

from __future__ import annotations

import os
import sys


def _start(directory: str) -> None:
    import itertools
    import threading
    import time
    import tracemalloc

    tracemalloc.start(int(os.environ.get("BERTH_MEMTRACE_FRAMES", "6")))
    every_s = float(os.environ.get("BERTH_MEMTRACE_EVERY_S", "150"))

    def write_snapshots() -> None:
        for index in itertools.count():
            time.sleep(every_s)
            tracemalloc.take_snapshot().dump(os.path.join(directory, f"{os.getpid()}-{index:03d}.snap"))
            with open("/proc/self/status") as status:
                rss = next((line.split(":", 1)[1].strip() for line in status if line.startswith("VmRSS")), "?")
            traced_mib = tracemalloc.get_traced_memory()[0] / 2**20
            with open(os.path.join(directory, f"{os.getpid()}.log"), "a") as log:
                log.write(f"{index} {time.time():.0f} rss={rss} traced={traced_mib:.1f}MiB\n")

    threading.Thread(target=write_snapshots, daemon=True, name="berth-memtrace").start()


_directory = os.environ.get("BERTH_MEMTRACE_DIR")
if _directory and sys.argv[1:2] == [os.environ.get("BERTH_MEMTRACE_SERVICE", "decision")]:
    _start(_directory)
