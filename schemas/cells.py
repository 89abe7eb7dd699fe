"""Which cell (partition of ``berth.scheduler.inputs.v1``) an object belongs to.

A cell is a slice of the cluster decided by one writer: its nodes, the pods that may only land
on them, the pools scaled there. Every producer of decision inputs routes with these functions so
that everything about a node, a pod, a gang or a pool meets in one totally ordered log.

Rules, in order: an explicit ``berth.io/cell`` label (node label; pod label or nodeSelector);
a node pool label ``berth.io/node-pool`` (every node of a pool in one cell); gang members by
their pod group; replicas of an AgentPool with their pool (:func:`agent_pool_of`: the pool's
lag, its replicas and so the nodes they run on meet in one cell, which scales the pool and moves
its replicas off reclaimed spot nodes); otherwise a stable hash of the name or UID. The hash is
blake2b, not Python's ``hash`` (salted per process) and not Kafka's murmur2 (partition counts
change). A pod placed by these rules is *pinned* to its cell; any other pending pod starts in its
hashed cell and moves on to the next while the cells tried have no room for it.
"""

from __future__ import annotations

from hashlib import blake2b

from .cluster import NodeInfo, PodInfo

CELL_LABEL = "berth.io/cell"
NODE_POOL_LABEL = "berth.io/node-pool"
AGENT_POOL_LABEL = "berth.io/agent-pool"
"""Label of an AgentPool's replica pods (value: the pool's name), for replicas without an owner
reference to their pool."""


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
    pinned = pinned_cell(pod, cells)
    return pinned if pinned is not None else stable_hash(f"pod/{pod.uid}") % cells


def pinned_cell(pod: PodInfo, cells: int) -> int | None:
    """The cell a pending pod must be decided in, by the rules above; None when the pod is only
    hashed to a cell: such a pod may be placed in any cell, and is handed from cell to cell
    until one has room for it (:class:`~berth.schemas.scheduler.PodRouted`)."""
    explicit = _explicit(pod.node_selector.get(CELL_LABEL) or pod.labels.get(CELL_LABEL), cells)
    if explicit is not None:
        return explicit
    pool = pod.node_selector.get(NODE_POOL_LABEL)
    if pool:
        return stable_hash(f"pool/{pool}") % cells
    if pod.pod_group:
        return cell_of_pod_group(pod.namespace, pod.pod_group, cells)
    agent_pool = agent_pool_of(pod)
    if agent_pool is not None:
        namespace, name = agent_pool.split("/", 1)
        return cell_of_pool(namespace, name, cells)
    return None


def agent_pool_of(pod: PodInfo) -> str | None:
    """``namespace/name`` of the AgentPool a pod is a replica of: its controller owner reference
    of kind AgentPool, else its ``berth.io/agent-pool`` label; None for other pods."""
    owner = pod.owner
    if owner is not None and owner.kind == "AgentPool" and owner.name:
        return f"{pod.namespace}/{owner.name}"
    name = pod.labels.get(AGENT_POOL_LABEL)
    return f"{pod.namespace}/{name}" if name else None


def cell_of_pool(namespace: str, pool: str, cells: int) -> int:
    return stable_hash(f"agentpool/{namespace}/{pool}") % cells


def cell_of_pod_group(namespace: str, name: str, cells: int) -> int:
    return stable_hash(f"group/{namespace}/{name}") % cells
