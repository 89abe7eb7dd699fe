"""``python -m bench.pipeline.memtrace A.snap B.snap [--by lineno|traceback] [--top N]``: what
grew between two tracemalloc snapshots written by this package's ``sitecustomize``."""

from __future__ import annotations

import argparse
import tracemalloc


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline.memtrace", description=__doc__)
    parser.add_argument("before", help="the earlier snapshot")
    parser.add_argument("after", help="the later snapshot")
    parser.add_argument("--by", choices=("lineno", "traceback"), default="lineno", help="group by (default lineno)")
    parser.add_argument("--top", type=int, default=25, help="rows to show (default 25)")
    args = parser.parse_args()
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before = tracemalloc.Snapshot.load(args.before).filter_traces(ignore)
    after = tracemalloc.Snapshot.load(args.after).filter_traces(ignore)
    for stat in after.compare_to(before, args.by)[: args.top]:
        print(f"{stat.size_diff / 2**20:+9.2f} MiB {stat.count_diff:+9,d} blocks")
        for line in stat.traceback.format(limit=1 if args.by == "lineno" else None):
            print(f"    {line}")


if __name__ == "__main__":
    main()
