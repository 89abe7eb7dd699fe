"""Which cell (partition of ``berth.scheduler.inputs.v1``) an object belongs to.

A cell is a slice of the cluster decided by one writer: its nodes, the pods that may only land
on them, the pools scaled there. Every producer of decision inputs routes with these functions so
that everything about a node, a pod, a gang or a pool meets in one totally ordered log.

Rules, in order: an explicit ``berth.io/cell`` label (node label; pod label or nodeSelector);
a node pool label ``berth.io/node-pool`` (every node of a pool in one cell); gang members by
their pod group; otherwise a stable hash of the name or UID. The hash is blake2b, not Python's
``hash`` (salted per process) and not Kafka's murmur2 (partition counts change).
"""

from __future__ import annotations

from hashlib import blake2b

from .cluster import NodeInfo, PodInfo

CELL_LABEL = "berth.io/cell"
NODE_POOL_LABEL = "berth.io/node-pool"


def stable_hash(text: str) -> int:
    return int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "big")


def _explicit(value: str | None, cells: int) -> int | None:
    if value is None:
        return None
    try:
        return int(value) % cells
    except ValueError:
        return stable_hash(value) % cells


def cell_of_node(node: NodeInfo, cells: int) -> int:
    explicit = _explicit(node.labels.get(CELL_LABEL), cells)
    if explicit is not None:
        return explicit
    pool = node.labels.get(NODE_POOL_LABEL)
    return stable_hash(f"pool/{pool}" if pool else f"node/{node.name}") % cells


def cell_of_pod(pod: PodInfo, cells: int) -> int:
    """The cell of a pending pod. A bound pod belongs to its node's cell (the router knows it)."""
    explicit = _explicit(pod.node_selector.get(CELL_LABEL) or pod.labels.get(CELL_LABEL), cells)
    if explicit is not None:
        return explicit
    pool = pod.node_selector.get(NODE_POOL_LABEL)
    if pool:
        return stable_hash(f"pool/{pool}") % cells
    if pod.pod_group:
        return stable_hash(f"group/{pod.namespace}/{pod.pod_group}") % cells
    return stable_hash(f"pod/{pod.uid}") % cells


def cell_of_pool(namespace: str, pool: str, cells: int) -> int:
    return stable_hash(f"agentpool/{namespace}/{pool}") % cells


def cell_of_pod_group(namespace: str, name: str, cells: int) -> int:
    return stable_hash(f"group/{namespace}/{name}") % cells
