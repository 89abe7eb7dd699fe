"""Decisions: the value the core returns for one scheduling attempt of one pod.

A :class:`Decision` is self-describing and small even at 5,000 nodes:

- ``rejections``: one :class:`RejectionGroup` per distinct (plugin, code, reasons) with the number
  of nodes it rejected — exactly the histogram behind kube's FitError message;
- ``rejection_runs``: which node got which group, as run lengths over the cluster's nodes in
  ascending name order (``(group index or -1 for feasible, run length)``); with the node list of
  the snapshot (same ``snapshot_hash``) :meth:`Decision.node_reasons` expands it per node;
- ``top_scores``: the best ``N`` feasible nodes (configurable, default 10) with per-plugin
  weighted scores and totals, best first.

Hashes make it auditable: ``snapshot_hash`` (the ClusterState before the decision),
``config_hash`` (the resolved configuration), ``pod_hash`` (the pod as given), and
``decision_hash`` = sha256 of the canonical JSON of everything else. Equal inputs give
byte-identical :meth:`Decision.to_json` output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from berth.core.hashing import canonical_json, sha256_hex

__all__ = ["Decision", "DecisionStatus", "NodeScore", "RejectionGroup"]

DecisionStatus = Literal["placed", "unschedulable", "preempting", "held", "error"]
"""``placed``: assume it on ``node``; ``unschedulable``: no node fits (``message`` says why);
``preempting``: it fits on ``nominated_node`` once ``victims`` are evicted (part 2);
``held``: a Permit plugin asked to wait (gangs) — it holds ``node`` once assumed;
``error``: a plugin reported an internal error (``message``)."""


@dataclass(frozen=True, slots=True)
class RejectionGroup:
    """Nodes rejected by the same plugin with the same status."""

    plugin: str
    code: str
    """``Unschedulable`` | ``UnschedulableAndUnresolvable`` | ``Error`` (kube's names)."""
    reasons: tuple[str, ...]
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "code": self.code, "reasons": list(self.reasons),
                "count": self.count}


@dataclass(frozen=True, slots=True)
class NodeScore:
    """A feasible node's weighted score per plugin (``plugin → normalised score × weight``)."""

    node: str
    total: int
    scores: tuple[tuple[str, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "total": self.total, "scores": dict(self.scores)}


@dataclass(frozen=True)
class Decision:
    pod_uid: str
    pod: str
    """``namespace/name``."""
    profile: str
    status: DecisionStatus
    node: str | None = None
    gpu_devices: tuple[int, ...] = ()
    gpu_milli: int | None = None
    message: str = ""
    nodes_total: int = 0
    feasible_nodes: int = 0
    rejections: tuple[RejectionGroup, ...] = ()
    rejection_runs: tuple[tuple[int, int], ...] = ()
    top_scores: tuple[NodeScore, ...] = ()
    nominated_node: str | None = None
    victims: tuple[str, ...] = ()
    """UIDs of pods to evict before ``nominated_node`` can take the pod (preemption)."""
    pod_hash: str = ""
    snapshot_hash: str = ""
    config_hash: str = ""
    decision_hash: str = field(default="", compare=False)

    @property
    def placed(self) -> bool:
        return self.status == "placed"

    def payload(self) -> dict[str, Any]:
        """Plain data of the decision without its own hash (what the hash covers)."""
        return {
            "pod_uid": self.pod_uid,
            "pod": self.pod,
            "profile": self.profile,
            "status": self.status,
            "node": self.node,
            "gpu_devices": list(self.gpu_devices),
            "gpu_milli": self.gpu_milli,
            "message": self.message,
            "nodes_total": self.nodes_total,
            "feasible_nodes": self.feasible_nodes,
            "rejections": [group.to_dict() for group in self.rejections],
            "rejection_runs": [list(run) for run in self.rejection_runs],
            "top_scores": [score.to_dict() for score in self.top_scores],
            "nominated_node": self.nominated_node,
            "victims": list(self.victims),
            "pod_hash": self.pod_hash,
            "snapshot_hash": self.snapshot_hash,
            "config_hash": self.config_hash,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.payload(), "decision_hash": self.decision_hash}

    def to_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys), including ``decision_hash``."""
        return canonical_json(self.to_dict())

    def sealed(self) -> Decision:
        """This decision with ``decision_hash`` computed over :meth:`payload`."""
        from dataclasses import replace

        return replace(self, decision_hash=sha256_hex(canonical_json(self.payload())))

    def node_reasons(self, node_names: Sequence[str]) -> Iterator[tuple[str, RejectionGroup | None]]:
        """``(node, group)`` for every node (None: feasible), given the sorted node names of the
        snapshot the decision was made on."""
        names = iter(node_names)
        for group_index, length in self.rejection_runs:
            group = None if group_index < 0 else self.rejections[group_index]
            for _ in range(length):
                yield next(names), group

    def reason_counts(self) -> Mapping[str, int]:
        """kube's reason histogram: each node counts once per reason it has."""
        counts: dict[str, int] = {}
        for group in self.rejections:
            for reason in group.reasons:
                counts[reason] = counts.get(reason, 0) + group.count
        return counts
