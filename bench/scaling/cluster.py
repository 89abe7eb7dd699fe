"""The simulated GPU cluster: on-demand and spot nodes with prices, spot interruptions, placement.

Every policy runs on the same cluster with the same interruption schedule. Nodes exist from the
start (no provisioning delay); a reclaimed spot node is gone until ``spot_return_s`` after its
deadline, when a fresh spot node of the same name takes its place (the capacity provider
replacing it).

Prices are per GPU-hour; see README.md for where the defaults come from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

AWS_SPOT_NOTICE_S = 120.0
GCP_SPOT_NOTICE_S = 30.0


@dataclass(frozen=True)
class ClusterShape:
    on_demand_nodes: int = 4
    spot_nodes: int = 4
    gpus_per_node: int = 8
    on_demand_usd_per_gpu_hour: float = 3.90
    spot_usd_per_gpu_hour: float = 2.25
    interruptions: int = 6
    """Spot interruptions in the day, half with AWS's 120 s notice and half with GCP's 30 s."""
    spot_return_s: float = 600.0


@dataclass(frozen=True)
class Interruption:
    """At ``notice_at`` the cloud announces it reclaims a spot node at ``notice_at + notice_s``.

    Which node is decided when the notice fires (see :func:`pick_victim`), so that every policy
    loses a node that matters to it.
    """

    notice_at: float
    notice_s: float

    @property
    def deadline(self) -> float:
        return self.notice_at + self.notice_s


class Node:
    """A node's mutable state in one run."""

    __slots__ = ("name", "spot", "gpus", "used", "usd_per_gpu_hour", "cordoned", "available", "reclaim_at")

    def __init__(self, name: str, spot: bool, gpus: int, usd_per_gpu_hour: float) -> None:
        self.name = name
        self.spot = spot
        self.gpus = gpus
        self.used = 0
        self.usd_per_gpu_hour = usd_per_gpu_hour
        self.cordoned = False
        self.available = True
        self.reclaim_at: float | None = None

    @property
    def free(self) -> int:
        return self.gpus - self.used if self.available else 0


def build_nodes(shape: ClusterShape) -> list[Node]:
    """On-demand nodes ``od-0..`` then spot nodes ``spot-0..``, in name order within each kind."""
    nodes = [
        Node(f"od-{i}", False, shape.gpus_per_node, shape.on_demand_usd_per_gpu_hour)
        for i in range(shape.on_demand_nodes)
    ]
    nodes += [
        Node(f"spot-{i}", True, shape.gpus_per_node, shape.spot_usd_per_gpu_hour) for i in range(shape.spot_nodes)
    ]
    return nodes


def draw_interruptions(seed: int, shape: ClusterShape, duration_s: int) -> tuple[Interruption, ...]:
    """Seeded notice times spread over the day (at least 30 min apart, so each is its own event);
    notice lengths alternate 120 s / 30 s in a seeded order. A stream of its own (seed + 1), so
    changing the traffic shape does not move the interruptions."""
    if shape.interruptions == 0 or shape.spot_nodes == 0:
        return ()
    rng = np.random.Generator(np.random.PCG64(seed + 1))
    gap = 1800.0
    times: list[float] = []
    for _ in range(shape.interruptions * 500):
        if len(times) == shape.interruptions:
            break
        at = float(np.round(rng.uniform(gap, duration_s - gap)))
        if all(abs(at - other) >= gap for other in times):
            times.append(at)
    notices = [AWS_SPOT_NOTICE_S if i % 2 == 0 else GCP_SPOT_NOTICE_S for i in range(len(times))]
    rng.shuffle(notices)
    return tuple(Interruption(at, n) for at, n in zip(sorted(times), notices, strict=True))


def pick_victim(nodes: list[Node], replicas_per_node: dict[str, int]) -> Node | None:
    """The available, not yet doomed spot node holding most of the pool's replicas (ties by name):
    the worst case for the pool, decided the same way for every policy."""
    candidates = [n for n in nodes if n.spot and n.available and n.reclaim_at is None]
    if not candidates:
        return None
    return min(candidates, key=lambda n: (-replicas_per_node.get(n.name, 0), n.name))


def choose_node(nodes: list[Node], gpus: int, capacity: str = "any") -> Node | None:
    """Where a new replica goes: a schedulable node (available, not cordoned, not doomed by a
    notice) with ``gpus`` free. ``capacity`` ``"any"``: cheapest kind first (spot, as a
    cost-aware provisioner such as Karpenter prefers); ``"on-demand"`` / ``"spot"``: only that
    kind (a required node affinity on ``karpenter.sh/capacity-type``). Within a kind the fullest
    node first (bin packing), then by name. None when nothing fits (the replica stays pending)."""
    fits = [
        n
        for n in nodes
        if n.available and not n.cordoned and n.free >= gpus and (capacity == "any" or n.spot == (capacity == "spot"))
    ]
    if not fits:
        return None
    return min(fits, key=lambda n: (0 if n.spot else 1, n.free, n.name))


def probe(nodes: list[Node], gpus: int, count: int, capacity: str) -> list[Node]:
    """Where up to ``count`` more replicas would go now, as :func:`choose_node` would place them
    one after another; nodes doomed by a notice are left out. Changes nothing."""
    free = {n.name: n.free for n in nodes if n.reclaim_at is None}
    chosen: list[Node] = []
    for _ in range(count):
        fits = [
            n
            for n in nodes
            if n.name in free
            and not n.cordoned
            and free[n.name] >= gpus
            and (capacity == "any" or n.spot == (capacity == "spot"))
        ]
        if not fits:
            break
        node = min(fits, key=lambda n: (0 if n.spot else 1, free[n.name], n.name))
        free[node.name] -= gpus
        chosen.append(node)
    return chosen
