"""``python -m bench.engine --case scheduling-basic|node-affinity|constraints|gpu-mixed``: engine throughput.

``python -m bench.engine --kube-perf [--repeat 3]``: kube-scheduler's own benchmark
(scheduler_perf, built from the Go module proxy on first use: 10+ minutes) next to the engine on the
same node and pod shapes (see bench/engine/kube_perf.py and bench/engine/README.md).

Prints a readable summary, then as the LAST line one JSON object with the figures
(``case, nodes, pods, pods_per_s, p50_us, p99_us, peak_rss_mib``, plus case extras). Progress
goes to stderr. Not a timed test: run it by hand or from CI's bench job.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.results import RECORD_HELP, emit

HEADLINE = ("nodes", "pods", "pods_per_s", "p50_us", "p99_us", "peak_rss_mib")
"""The figures of a case worth a row in the results log (the JSON line has them all)."""


def _scheduling_basic(args: argparse.Namespace) -> dict[str, Any]:
    from bench.engine import scheduling_basic

    return scheduling_basic.run(
        nodes=args.nodes or scheduling_basic.NODES,
        pods=args.pods or scheduling_basic.PODS,
        init_pods=scheduling_basic.INIT_PODS if args.init_pods is None else args.init_pods,
    )


def _gpu_mixed(args: argparse.Namespace) -> dict[str, Any]:
    # Part 2's case (GPU devices, fractions, MIG, locality); it owns its figures.
    from bench.engine import gpu_mixed

    result = gpu_mixed.run(args.nodes or gpu_mixed.NODES, args.pods or gpu_mixed.PODS)
    if "pods_per_s" not in result and "pods_per_second" in result:
        result["pods_per_s"] = result["pods_per_second"]
    if "peak_rss_mib" not in result and "max_rss_mib" in result:
        result["peak_rss_mib"] = result["max_rss_mib"]
    return result


def _constraints(args: argparse.Namespace) -> dict[str, Any]:
    from bench.engine import constraints

    return constraints.run(nodes=args.nodes or constraints.NODES, pods=args.pods or constraints.PODS)


def _node_affinity(args: argparse.Namespace) -> dict[str, Any]:
    from bench.engine import node_affinity

    return node_affinity.run(
        nodes=args.nodes or node_affinity.NODES,
        pods=args.pods or node_affinity.PODS,
        init_pods=node_affinity.INIT_PODS if args.init_pods is None else args.init_pods,
    )


CASES = {
    "scheduling-basic": _scheduling_basic,
    "gpu-mixed": _gpu_mixed,
    "constraints": _constraints,
    "node-affinity": _node_affinity,
}


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if "--kube-perf" in args_in:  # kube-scheduler's scheduler_perf next to the engine: own options
        from bench.engine import kube_perf

        return kube_perf.cli([arg for arg in args_in if arg != "--kube-perf"])
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=sorted(CASES), default="scheduling-basic")
    parser.add_argument("--nodes", type=int, default=None, help="override the case's node count")
    parser.add_argument("--pods", type=int, default=None, help="override the pods to place")
    parser.add_argument(
        "--init-pods", type=int, default=None, help="scheduling-basic: pods placed before timing (default 1000)"
    )
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    args = parser.parse_args(argv)
    result = CASES[args.case](args)
    width = max(len(key) for key in result)
    print(f"bench.engine {args.case}")
    for key, value in result.items():
        print(f"  {key:<{width}}  {value}")
    headline = {key: result[key] for key in HEADLINE if key in result}
    emit("bench.engine", result, headline={"case": args.case, **headline}, argv=args_in, record=args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
