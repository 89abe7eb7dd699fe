"""``python -m berth_dev.devstack up|status|down|fetch|build-kubernetes|nodes``: the dev stack without the full CLI.

Exit status: 0 on success; 1 when a service cannot start or stop; for ``status``, 1 when no
healthy stack is recorded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from berth_dev.devstack import stack
from berth_dev.devstack.cache import ensure_kafka_jars
from berth_dev.devstack.procs import DevStackError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m berth_dev.devstack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start Kafka and Postgres in the background; print env lines")
    up.add_argument(
        "--with-kubernetes",
        action="store_true",
        help="also etcd + kube-apiserver (built on first use: many minutes) and BERTH_KUBECONFIG",
    )
    commands.add_parser("status", help="show the recorded background stack")
    commands.add_parser("down", help="stop the recorded background stack")
    commands.add_parser("fetch", help="download Kafka's jars into the cache (for CI warm-up)")
    build = commands.add_parser(
        "build-kubernetes", help="build kube-apiserver, kube-scheduler and etcd into the cache (slow the first time)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even if the cache says it is complete")
    nodes = commands.add_parser("nodes", help="create fake GPU nodes (Node objects, no kubelet) in the dev cluster")
    nodes.add_argument("count", type=int)
    nodes.add_argument("--gpus", type=int, default=8)
    nodes.add_argument("--product", default="NVIDIA-H100-80GB-HBM3")
    nodes.add_argument("--prefix", default="gpu-")
    nodes.add_argument("--zones", default="zone-a,zone-b,zone-c", help="comma-separated, assigned round-robin")
    nodes.add_argument("--spot-fraction", type=float, default=0.0)
    nodes.add_argument("--taint", action="append", default=[], help="key=value:Effect (repeatable)")
    nodes.add_argument("--start", type=int, default=0, help="number of the first node (to add a further batch)")
    nodes.add_argument(
        "--kubeconfig", type=Path, help="default: $BERTH_KUBECONFIG, else the cluster of `up --with-kubernetes`"
    )
    nodes.add_argument("--delete", action="store_true", help="delete all fake nodes instead (count is ignored)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            stack.up(with_kubernetes=args.with_kubernetes)
        elif args.command == "build-kubernetes":
            from berth_dev.devstack.gobuild import ensure_kubernetes_binaries

            binaries = ensure_kubernetes_binaries(force=args.force)
            for path in (binaries.kube_apiserver, binaries.kube_scheduler, binaries.etcd):
                print(path)
        elif args.command == "nodes":
            return _nodes(args)
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


def _nodes(args: argparse.Namespace) -> int:
    import time

    started = time.monotonic()
    if args.delete:
        deleted = stack.fake_nodes(0, kubeconfig=args.kubeconfig, delete=True)
        print(f"deleted {deleted} fake nodes", file=sys.stderr)
        return 0
    names = stack.fake_nodes(
        args.count,
        kubeconfig=args.kubeconfig,
        gpus=args.gpus,
        product=args.product,
        prefix=args.prefix,
        zones=[z for z in args.zones.split(",") if z],
        spot_fraction=args.spot_fraction,
        taints=args.taint,
        start=args.start,
    )
    print(
        f"{len(names)} fake nodes ready in {time.monotonic() - started:.1f} s"
        + (f" ({names[0]} … {names[-1]})" if names else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
