"""Decisions: the value the core returns for one scheduling attempt of one pod.

A :class:`Decision` is self-describing and small even at 5,000 nodes:

- ``rejections``: one :class:`RejectionGroup` per distinct (plugin, code, reasons) with the number
  of nodes it rejected — exactly the histogram behind kube's FitError message;
- ``node_groups``: which node got which group — per node of the snapshot in ascending name
  order, its group index, packed one byte per node (two, little-endian, when there are 255
  groups or more: ``node_group_width``) with the all-ones value for "feasible", base64-encoded;
  empty when no node was rejected. About 6.7 KB at 5,000 nodes whatever the pattern of
  rejections; with the snapshot's node list (same ``snapshot_hash``)
  :meth:`Decision.node_reasons` expands it per node;
- ``top_scores``: the best ``N`` feasible nodes (configurable, default 10) with per-plugin
  weighted scores and totals, best first.

Hashes make it auditable: ``snapshot_hash`` (the ClusterState before the decision),
``config_hash`` (the resolved configuration), ``pod_hash`` (the pod as given), and
``decision_hash`` = sha256 of the canonical JSON of everything else. Equal inputs give
byte-identical :meth:`Decision.to_json` output.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from berth.core.hashing import canonical_json, sha256_hex

__all__ = ["Decision", "DecisionStatus", "NodeScore", "RejectionGroup", "pack_node_groups"]

DecisionStatus = Literal["placed", "unschedulable", "preempting", "held", "error"]
"""``placed``: assume it on ``node``; ``unschedulable``: no node fits (``message`` says why);
``preempting``: it fits on ``nominated_node`` once ``victims`` are evicted;
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
        return {"plugin": self.plugin, "code": self.code, "reasons": list(self.reasons), "count": self.count}


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
    node_groups: str = ""
    node_group_width: int = 1
    top_scores: tuple[NodeScore, ...] = ()
    nominated_node: str | None = None
    victims: tuple[str, ...] = ()
    """UIDs of pods to evict before ``nominated_node`` can take the pod (preemption)."""
    pod_hash: str = ""
    snapshot_hash: str = ""
    config_hash: str = ""
    _decision_hash: str = field(default="", compare=False, repr=False)

    @property
    def decision_hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`payload`, computed on first read (the
        decision is frozen, so it cannot change after): a scheduling cycle does not pay for
        hashing a decision nobody records."""
        if not self._decision_hash:
            object.__setattr__(self, "_decision_hash", sha256_hex(canonical_json(self.payload())))
        return self._decision_hash

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
            "node_groups": self.node_groups,
            "node_group_width": self.node_group_width,
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
        """This decision, sealed: ``decision_hash`` covers :meth:`payload` (computed lazily, on
        first read, with the same bytes an eager seal would hash)."""
        return self

    def group_indices(self) -> npt.NDArray[np.int64]:
        """Per node (ascending name order): its rejection group index, or -1 if feasible."""
        if not self.node_groups:
            return np.full(self.nodes_total, -1, dtype=np.int64)
        dtype = np.uint8 if self.node_group_width == 1 else np.dtype("<u2")
        raw = np.frombuffer(base64.b64decode(self.node_groups), dtype=dtype).astype(np.int64)
        return np.where(raw == np.iinfo(dtype).max, -1, raw)

    def node_reasons(self, node_names: Sequence[str]) -> Iterator[tuple[str, RejectionGroup | None]]:
        """``(node, group)`` for every node (None: feasible), given the sorted node names of the
        snapshot the decision was made on."""
        for name, index in zip(node_names, self.group_indices().tolist(), strict=True):
            yield name, (None if index < 0 else self.rejections[index])

    def reason_counts(self) -> Mapping[str, int]:
        """kube's reason histogram: each node counts once per reason it has."""
        counts: dict[str, int] = {}
        for group in self.rejections:
            for reason in group.reasons:
                counts[reason] = counts.get(reason, 0) + group.count
        return counts


def pack_node_groups(codes: npt.NDArray[np.integer[Any]], groups: int) -> tuple[str, int]:
    """``(node_groups, node_group_width)`` for per-node group indices (-1: feasible)."""
    if codes.size == 0 or not (codes >= 0).any():
        return "", 1
    width = 1 if groups < 255 else 2
    dtype = np.uint8 if width == 1 else np.dtype("<u2")
    # The unsigned cast wraps -1 to the dtype's maximum, the "feasible" marker; group indices
    # stay below it.
    packed = codes.astype(dtype)
    return base64.b64encode(packed.tobytes()).decode("ascii"), width
