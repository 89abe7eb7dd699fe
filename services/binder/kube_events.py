"""The binder's Kubernetes events (``Scheduled``, ``FailedScheduling``, ``Preempted``), written in
the background as client-go's event broadcaster writes them.

Events are best effort: a failed event is logged and counted, never the outcome of the operation
that wrote it. They take their tokens from a limiter of their own (kube-scheduler, too, writes
events through a client with its own limiter, so that "50 QPS" means 50 bindings per second
rather than 25 bindings and their 25 events).
"""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import Counter

from berth.logs import get_logger
from berth.metrics import labelled

from . import kube_outcomes as k
from . import kube_paths as paths
from .kube_outcomes import Access
from .kube_transport import KubeTransport
from .ratelimit import TokenBucket

log = get_logger(__name__)

EVENTS = Counter(
    "berth_binder_events_total", "Kubernetes events the binder wrote, by reason and result.", ["reason", "result"]
)


class EventWriter:
    """Writes event bodies (:func:`.kube_outcomes.pod_event`) through ``transport`` with tokens of
    ``limiter``, each in a task of the running loop. At most ``max_pending`` events wait; beyond
    that an event is dropped and counted, as the broadcaster drops when its queue is full."""

    def __init__(self, transport: KubeTransport, *, limiter: TokenBucket, max_pending: int = 1000) -> None:
        self._api = transport
        self.limiter = limiter
        self.max_pending = max_pending
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Events queued and not yet written (or failed)."""
        return len(self._pending)

    def write(self, body: dict[str, Any]) -> None:
        """Queue ``body`` and return at once: the operation that wrote it does not wait for the
        event limiter (FailedScheduling events would otherwise slow the bindings down)."""
        if len(self._pending) >= self.max_pending:
            EVENTS.labels(body["reason"], "dropped").inc()
            return
        task = asyncio.get_running_loop().create_task(self._send(body))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait until every event queued so far is written (or failed)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self, timeout_s: float) -> None:
        """Flush for at most ``timeout_s``; events still unwritten then are dropped (logged)."""
        try:
            await asyncio.wait_for(self.flush(), timeout=timeout_s)
        except TimeoutError:
            log.warning("events still unwritten at shutdown; dropped", events=len(self._pending))
            for task in list(self._pending):
                task.cancel()

    async def _send(self, body: dict[str, Any]) -> None:
        reply = await self._api.send("POST", paths.events(body["metadata"]["namespace"]), body, limiter=self.limiter)
        labelled(EVENTS, body["reason"], "written" if reply.ok else "failed").inc()
        if not reply.ok:
            outcome = k.classify(reply, Access("create", "events", "events.k8s.io"))
            log.warning(
                "event not written",
                reason=body["reason"],
                pod=f"{body['metadata']['namespace']}/{body['regarding']['name']}",
                status=reply.status,
                error=outcome.reason,
            )
