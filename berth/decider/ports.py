"""What the decision cell needs from the placement engine (berth.core), as a port.

The engine owns the cluster snapshot of the cell: nodes, pods holding capacity (bound or assumed),
policies. The cell owns the queues, in-flight commands and the decision records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from berth.schemas import NodeInfo, NodeVerdict, PodInfo, PodRouted, PolicyObserved, RejectedNodes


@dataclass(frozen=True)
class Placement:
    pod: PodInfo
    node: str
    gpu_devices: tuple[int, ...] = ()
    gpu_milli: int | None = None


@dataclass(frozen=True)
class EngineOutcome:
    """The engine's answer for one pod or one gang.

    ``placements`` non-empty means every pod of the request fits and the engine has already
    ASSUMED them (they hold capacity until ``remove_pod``). Otherwise ``message`` is the
    kube-style reason and nothing was assumed. ``victims`` (``namespace/name``) must be evicted
    first for the placement to hold (preemption); they were removed from the snapshot.
    """

    placements: tuple[Placement, ...] = ()
    message: str = ""
    verdicts: tuple[NodeVerdict, ...] = ()
    victims: tuple[PodInfo, ...] = ()
    nominated_node: str | None = None
    rejected: RejectedNodes | None = None
    """For a pod not placed: the nodes that rejected it and why (what ``message`` counts)."""

    @property
    def placed(self) -> bool:
        return bool(self.placements)


class PlacementEngine(Protocol):
    """Contract for the engine behind the cell. Every method is deterministic; ``upsert_*`` and
    ``remove_*`` are idempotent (the same call twice leaves the same snapshot)."""

    config_hash: str
    config_version: str
    config_document: str
    profile: str

    def upsert_node(self, node: NodeInfo) -> None: ...

    def remove_node(self, name: str) -> None: ...

    def upsert_bound_pod(self, pod: PodInfo) -> None:
        """A pod holding capacity on ``pod.node_name`` (devices ``pod.gpu_devices``). Replaces an
        assumed placement of the same UID."""
        ...

    def remove_pod(self, uid: str) -> None:
        """Release whatever the pod holds, bound or assumed. Unknown UIDs are ignored."""
        ...

    def upsert_policy(self, event: PolicyObserved) -> None: ...

    def remove_policy(self, kind: str, namespace: str, name: str) -> None: ...

    def snapshot_hash(self) -> str:
        """A digest of the current snapshot (order-independent, cheap)."""
        ...

    def place(self, pods: Sequence[PodInfo], *, min_member: int | None = None,
              preempt: bool = True) -> EngineOutcome:
        """Try to place one pod, or a gang (all of ``pods``, at least ``min_member``) atomically.
        ``preempt=False``: a pod that would need victims is not placed (one pod only)."""
        ...

    def probe_placements(self, pods: Sequence[PodInfo]) -> tuple[str, ...]:
        """Nodes where ``pods`` would go, placed one after the other (copies of one pod allowed),
        without preemption and without changing the snapshot; stops at the first misfit."""
        ...

    def place_scored(self, pod: PodInfo, extra_scores: Sequence[tuple[str, int]]) -> EngineOutcome:
        """Like ``place`` for one pod, with extra Score plugins (name, weight) and no preemption."""
        ...


@dataclass
class PendingPod:
    pod: PodInfo
    sequence: int
    """Arrival order in the cell (input offset): the queue's tie-breaker after priority."""
    last_message: str | None = None
    attempts: int = 0
    in_flight: str | None = field(default=None)
    """The command id of the placement awaiting its result, if any."""
    routed: PodRouted | None = None
    """How the inventory routed the pod here when it may go to other cells (None: pinned here)."""
    ticks_rested: int = 0
    """:class:`~berth.schemas.CellTick` s seen while resting here at the end of its round."""
    shape: str = ""
    """A digest of everything about the pod that scheduling looks at (not its identity): two
    pods of one shape fit, or fail, the same way on the same snapshot."""
