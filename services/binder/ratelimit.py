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
    """``qps`` tokens per second, at most ``burst`` banked. ``qps <= 0`` means unlimited.

    Two classes of callers share the bucket: urgent ones (the default) take their turn in arrival
    order; ``deferrable`` ones wait while any urgent caller is queued for a token (but at most
    ``max_defer_s``, so they are never starved), then queue like the others. The binder makes its
    status reports deferrable: a binding decides where a pod runs and when, a report only says
    why it waits — under a backlog of bindings the report comes later, at the same cost.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_defer_s: float = 30.0,
    ) -> None:
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self.max_defer_s = max_defer_s
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._urgent_queued = 0

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

    async def acquire(self, *, deferrable: bool = False) -> None:
        if deferrable and self.qps > 0:
            give_up = self._clock() + self.max_defer_s
            while self._urgent_queued and self._clock() < give_up:
                await self._sleep(1.0 / self.qps)
        delay = self.reserve()
        if delay <= 0:
            return
        if deferrable:
            await self._sleep(delay)
            return
        self._urgent_queued += 1
        try:
            await self._sleep(delay)
        finally:
            self._urgent_queued -= 1
