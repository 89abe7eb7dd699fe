"""Decision records: what every fold of a cell writes for the audit, signed and reproducible.

A record's id is derived from where its input sits in the cell's log (topic, partition, offset)
and what it is about, so reprocessing an input after a crash yields the same ids and the audit
writes nothing twice; its hash covers every other field, canonically encoded, so a replay that
decides differently is caught.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from hashlib import blake2b
from typing import Any

from berth.schemas import DecisionRecord, InputPosition, NodeVerdict

__all__ = ["CellDecision", "Recorder", "digest"]


@dataclass(frozen=True)
class CellDecision:
    """A decision record and the commands it issues (possibly none)."""

    record: DecisionRecord
    commands: tuple[Any, ...] = ()


def digest(*parts: object, size: int = 16) -> str:
    """A short stable id of ``parts`` (joined by a unit separator)."""
    return blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=size).hexdigest()


class Recorder:
    """Makes the signed records of one cell; knows the cell's name and its engine's
    configuration, and asks the engine for the snapshot hash when the caller has none."""

    def __init__(self, cell: int, engine: Any, config_hash: str, config_version: str) -> None:
        self.cell = cell
        self.cell_name = f"cell-{cell}"
        self.engine = engine
        self.config_hash = config_hash
        self.config_version = config_version

    def record(
        self,
        position: InputPosition,
        subject: str,
        outcome: str,
        now: datetime,
        *,
        node: str | None = None,
        gpu_devices: Iterable[int] = (),
        message: str = "",
        verdicts: Iterable[NodeVerdict] = (),
        snapshot: str | None = None,
        part: str | None = None,
        pods: Iterable[str] = (),
    ) -> DecisionRecord:
        """A signed record: ``decision_hash`` covers every other field, canonically encoded.
        ``snapshot`` is the engine's snapshot hash before the decision (default: now); ``part``
        tells apart two decisions about one subject from one input (e.g. a pool's spot
        suspension and its surge)."""
        ident: tuple[object, ...] = (self.cell_name, position.topic, position.partition, position.offset, subject)
        decision_id = digest(*ident, *((part,) if part is not None else ()))
        fields: dict[str, Any] = {
            "decision_id": decision_id,
            "cell": self.cell_name,
            "input": position,
            "subject": subject,
            "outcome": outcome,
            "node": node,
            "gpu_devices": tuple(gpu_devices),
            "message": message,
            "verdicts": tuple(verdicts),
            "pods": tuple(pods),
            "config_version": self.config_version,
            "snapshot_hash": snapshot or self.engine.snapshot_hash(),
            "config_hash": self.config_hash,
            "event_time": now,
        }
        unsigned = DecisionRecord(decision_hash="-", **fields)
        # An empty ``pods`` stays out of the signed form, so that records made before the field
        # existed keep their hashes when a newer auditor replays them.
        excluded = {"decision_hash"} if unsigned.pods else {"decision_hash", "pods"}
        canonical = json.dumps(
            unsigned.model_dump(mode="json", exclude=excluded), sort_keys=True, separators=(",", ":")
        )
        return unsigned.model_copy(update={"decision_hash": digest(canonical, size=32)})
