"""Client-side rate limiting with QPS and burst, as Kubernetes clients do it.

client-go's default limiter is a token bucket (``--kube-api-qps``/``--kube-api-burst``): up to
``burst`` requests at once, then ``qps`` per second. This one reserves a token per caller and sleeps
until its token is due, so concurrent callers are served in arrival order without a lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` banked. ``qps <= 0`` means unlimited."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token now (the balance may go negative: that is the queue) and return how many
        seconds the caller must wait before using it."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)
