"""Decision cells: a pure fold of one cell's ordered inputs into decisions and commands.

The decision service runs cells on Kafka; the auditor replays them from Postgres. Same inputs,
same configuration → the same decisions, byte for byte.
"""

from .cell import Cell, CellDecision
from .config import CellConfig
from .pools import PoolPolicy

__all__ = ["Cell", "CellConfig", "CellDecision", "PoolPolicy"]
