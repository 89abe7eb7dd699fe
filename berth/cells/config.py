"""A cell's configuration: the scheduler document (as the operator wrote it) and the pools'
policies, canonically encoded into one document.

The cell announces this document, the audit stores it, and replay rebuilds exactly the same
cell from it (:meth:`CellConfig.from_document`). Its hash signs every decision. Reading the
files it comes from is the services' job; this module only takes values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

from berth.core.config import default_document
from berth.core.engine import Engine
from berth.kube.capacity import SPOT_LABELS, SpotLabel

from .descheduling import DeschedulerSettings
from .pools import PoolPolicy, parse_pools

__all__ = ["CellConfig"]


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class CellConfig:
    scheduler_document: Mapping[str, Any] = field(default_factory=default_document)
    """KubeSchedulerConfiguration-style document; default: the core's built-in profile."""
    pools: Mapping[str, PoolPolicy] = field(default_factory=dict)
    spot_labels: tuple[SpotLabel, ...] = SPOT_LABELS
    """The node labels that mark spot capacity; in the document only when not the providers'
    own, so that the hashes of configurations that never set them stay as they were."""
    descheduler: DeschedulerSettings | None = None
    """Descheduling on the cell's live state (:mod:`.descheduling`); None: none. In the document
    only when set, for the same reason as the spot labels."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools", dict(sorted(self.pools.items())))
        # Fail now, at start-up, on a document the engine cannot run.
        Engine(self.scheduler_document)

    @property
    def document(self) -> str:
        """The canonical document: what the cell announces and replay starts from."""
        document: dict[str, Any] = {
            "scheduler": self.scheduler_document,
            "pools": {key: policy.model_dump(mode="json") for key, policy in self.pools.items()},
        }
        if self.spot_labels != SPOT_LABELS:
            # A list, not a mapping: the canonical encoding sorts keys, and the order is the table's.
            document["spotLabels"] = [[label.key, list(label.spot_values)] for label in self.spot_labels]
        if self.descheduler is not None:
            document["descheduler"] = self.descheduler.to_document()
        return _canonical(document)

    @property
    def hash(self) -> str:
        return sha256(self.document.encode()).hexdigest()

    @property
    def version(self) -> str:
        return self.hash[:12]

    def engine(self) -> Engine:
        """A fresh engine for one cell."""
        return Engine(self.scheduler_document)

    @classmethod
    def from_document(cls, document: str) -> CellConfig:
        """The configuration a cell announced (for replay): the inverse of :attr:`document`."""
        data = json.loads(document)
        labels = data.get("spotLabels")
        spot_labels = (
            tuple(SpotLabel(key, tuple(values)) for key, values in labels) if labels is not None else SPOT_LABELS
        )
        descheduler = data.get("descheduler")
        return cls(
            data["scheduler"],
            parse_pools({"pools": data.get("pools", {})}),
            spot_labels,
            DeschedulerSettings.from_document(descheduler) if descheduler is not None else None,
        )
