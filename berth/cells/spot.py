"""Spot interruptions per pool: counting them in a window, and the state of one pool's move off a
reclaimed node. Pure bookkeeping over event times; the cell decides and records.

Suspension: a pool with ``costOptimization.interruptionThreshold {count, window}`` stops using
spot nodes when its ``count``-th interruption within ``window`` arrives, and uses them again once
a whole ``window`` has passed (event time) since its latest interruption.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from berth.schemas.agentpool import InterruptionThreshold


@dataclass
class SpotHistory:
    """Interruption times of one pool (notice ``issued_at``), oldest first, and since when spot
    is suspended for it (None: spot usable)."""

    times: list[datetime] = field(default_factory=list)
    suspended_since: datetime | None = None

    def record(self, at: datetime, threshold: InterruptionThreshold | None) -> bool:
        """Count an interruption; True when it suspends spot for the pool (it was not before)."""
        self.times.append(at)
        self.times.sort()
        if threshold is None:
            self.times = self.times[-1:]
            return False
        window = timedelta(seconds=threshold.window_seconds)
        self.times = [t for t in self.times if t >= at - window]
        if self.suspended_since is None and len(self.times) >= threshold.count:
            self.suspended_since = at
            return True
        return False

    def quiet_since(self, now: datetime, threshold: InterruptionThreshold | None) -> bool:
        """True when spot was suspended and a whole window has passed without an interruption:
        the caller resumes spot (this clears the suspension)."""
        if self.suspended_since is None:
            return False
        last = self.times[-1] if self.times else self.suspended_since
        window = threshold.window_seconds if threshold is not None else 0.0
        if (now - last).total_seconds() >= window:
            self.suspended_since = None
            return True
        return False

    @property
    def suspended(self) -> bool:
        return self.suspended_since is not None


@dataclass
class PoolMove:
    """A pool's replicas leaving a reclaimed spot node.

    ``olds``: UIDs of the pool's replicas still on the node; ``surge_left``: surge replicas asked
    for and not given back yet; ``replacements``: new replicas bound since the notice that have
    not yet released an old one; ``evicted``: olds whose eviction was asked for.
    """

    node: str
    deadline: datetime
    olds: list[str]
    surge_left: int
    replacements: int = 0
    evicted: set[str] = field(default_factory=set)

    def next_to_evict(self) -> str | None:
        return next((uid for uid in self.olds if uid not in self.evicted), None)

    @property
    def done(self) -> bool:
        return not self.olds and self.surge_left == 0
