"""Simulated time: seconds since the start of the run, mapped to wall time by a speed factor.

With a speed factor, simulated seconds pass ``speed`` times faster than real ones. Without one
(``speed=None``, "as fast as possible"), time stands still until the player moves it to the next
scheduled happening. Event timestamps are ``start + simulated seconds``: at speed 1 they are wall
time; faster, they run ahead of it, consistently for every event the simulator publishes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


class SimClock:
    def __init__(
        self,
        speed: float | None = 1.0,
        *,
        start: datetime | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be positive (or None for as fast as possible), got {speed}")
        self.speed = speed
        self.start = start or datetime.now(UTC)
        self._monotonic = monotonic
        self._origin = monotonic()
        self._virtual = 0.0

    def seconds(self) -> float:
        """Simulated seconds since the start."""
        if self.speed is None:
            return self._virtual
        return (self._monotonic() - self._origin) * self.speed

    def now(self) -> datetime:
        return self.at(self.seconds())

    def at(self, sim_seconds: float) -> datetime:
        return self.start + timedelta(seconds=sim_seconds)

    async def wait_until(self, sim_seconds: float, interrupt: asyncio.Event) -> bool:
        """Wait until simulated time ``sim_seconds``; return False early if ``interrupt`` is set
        (something earlier was scheduled meanwhile). As fast as possible: jump there at once."""
        if self.speed is None:
            self._virtual = max(self._virtual, sim_seconds)
            return True
        delay = (sim_seconds - self.seconds()) / self.speed
        if delay <= 0:
            return True
        try:
            await asyncio.wait_for(interrupt.wait(), timeout=delay)
        except TimeoutError:
            return True
        return False
