"""``python -m berth.devstack up|status|down|fetch``: the dev stack without the full CLI.

Exit status: 0 on success; 1 when a service cannot start or stop; for ``status``, 1 when no
healthy stack is recorded.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from berth.devstack import stack
from berth.devstack.cache import ensure_kafka_jars
from berth.devstack.procs import DevStackError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m berth.devstack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start Kafka and Postgres in the background; print env lines")
    commands.add_parser("status", help="show the recorded background stack")
    commands.add_parser("down", help="stop the recorded background stack")
    commands.add_parser("fetch", help="download Kafka's jars into the cache (for CI warm-up)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            stack.up()
        elif args.command == "status":
            return 0 if stack.status().healthy else 1
        elif args.command == "down":
            stack.down()
        elif args.command == "fetch":
            print(ensure_kafka_jars())
    except DevStackError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
