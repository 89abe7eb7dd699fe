"""The decision cell: a pure fold of one cell's ordered inputs into decisions and commands.

The decision service runs it on Kafka; the auditor replays it from Postgres. Same inputs, same
configuration → the same decisions, byte for byte (DESIGN §3, §5).
"""

from .cell import CellDecider, CellDecision
from .ports import EngineOutcome, PlacementEngine
from .pools import PoolPolicy

__all__ = ["CellDecider", "CellDecision", "EngineOutcome", "PlacementEngine", "PoolPolicy"]
