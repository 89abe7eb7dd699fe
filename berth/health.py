"""``/livez`` and ``/readyz`` for Kubernetes probes, served on the service's OWN event loop.

Why on the loop: prometheus_client's /metrics answers from a thread of its own, so it keeps
answering while the service's asyncio loop is stuck. :class:`HealthServer` is an aiohttp server on
the loop that does the work; when that loop is stuck it cannot answer at all, and the probe times
out (a failure). A heartbeat task also stamps ``time.monotonic()`` every second: ``/livez`` answers
503 when the last stamp is older than ``stale_after_s``, and also for ``stale_after_s`` after the
heartbeat found a gap longer than that between two stamps. The second rule is what catches a loop
that is blocked only intermittently: once the loop runs again, the heartbeat usually stamps before
a waiting probe is handled, so the probe answered after a long stall still fails. A single stall
costs one or two failed probes (kubelet restarts after ``failureThreshold`` in a row, 3 by
default); a loop that keeps stalling fails them all.

``/readyz`` runs the readiness checks the service registered: async callables returning
``(ok, detail)``, each under a timeout, all at once. The body is kube-apiserver's
(``k8s.io/apiserver/pkg/server/healthz``), except that the reason of a failure is shown rather than
withheld (the health port is not a public endpoint)::

    [+]kafka-group ok
    [-]cells failed: rebuilding cells [2] (1 of 2 taken over)
    readyz check failed

200 and ``ok`` lines when every check passes (``?verbose`` adds each check's detail), 503 when one
fails; ``?exclude=NAME`` skips a check, as kube-apiserver's does. ``/livez`` has the same shape
with the built-in ``loop`` check.

Also here, because several services share them: readiness of an aiokafka consumer in a group
(:class:`ConsumerReadiness`), of a faust worker (:func:`faust_checks`), a wrapper for blocking
checks (:func:`blocking_check`) and the start of the server with a faust app
(:func:`attach_to_faust`). Nothing here imports a service; aiokafka, faust and mode objects are
only used through the objects handed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from berth.logs import get_logger

log = get_logger(__name__)

Check = Callable[[], Awaitable[tuple[bool, str]]]
"""A readiness (or liveness) check: ``(ok, detail)``; an exception counts as a failure."""

DEFAULT_CHECK_TIMEOUT_S = 2.0
"""Per check. Probes should allow a little more (``timeoutSeconds: 3``)."""
DEFAULT_STALE_AFTER_S = 10.0
DEFAULT_MAX_LAG = 10
"""Records a consumer may still be behind the log end it saw at assignment and count as caught up.
Not 0: a transaction's commit marker occupies an offset that no record is read from."""
REASON_LIMIT = 300


@dataclass(frozen=True)
class Probe:
    name: str
    check: Check
    timeout_s: float


@dataclass(frozen=True)
class Outcome:
    name: str
    ok: bool
    detail: str
    excluded: bool = False

    def line(self, *, verbose: bool) -> str:
        if self.excluded:
            return f"[+]{self.name} excluded: ok"
        if not self.ok:
            return f"[-]{self.name} failed: {self.detail or 'no reason given'}"
        return f"[+]{self.name} ok" + (f" ({self.detail})" if verbose and self.detail else "")


def one_line(text: str) -> str:
    """``text`` as one bounded line, for a probe body or a log."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= REASON_LIMIT else flat[: REASON_LIMIT - 1] + "…"


class HealthServer:
    """The probes of one service. Register checks, then ``await start(port)`` on the service's loop.

    ``stale_after_s``: /livez fails when the heartbeat (every ``heartbeat_s``) is older than this.
    ``check_timeout_s``: the default timeout of each check.
    """

    def __init__(
        self,
        service: str,
        *,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        heartbeat_s: float = 1.0,
        check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
        host: str = "0.0.0.0",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.stale_after_s = stale_after_s
        self.heartbeat_s = heartbeat_s
        self.check_timeout_s = check_timeout_s
        self.host = host
        self._clock = clock
        self._readiness: list[Probe] = []
        self._liveness: list[Probe] = [Probe("loop", self._loop_check, check_timeout_s)]
        self._beat: float | None = None
        self._stall: tuple[float, float] | None = None
        """(longest recent gap between two stamps, when it ended) once a gap exceeded the limit."""
        self._heartbeat: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # --- registration ---------------------------------------------------------------------------

    def add_readiness(self, name: str, check: Check, *, timeout_s: float | None = None) -> None:
        self._readiness.append(Probe(name, check, timeout_s or self.check_timeout_s))

    def add_liveness(self, name: str, check: Check, *, timeout_s: float | None = None) -> None:
        self._liveness.append(Probe(name, check, timeout_s or self.check_timeout_s))

    @property
    def readiness_checks(self) -> list[str]:
        return [probe.name for probe in self._readiness]

    # --- the heartbeat --------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        """Stamp the clock every ``heartbeat_s`` on the running loop (done by :meth:`start`)."""
        if self._heartbeat is None or self._heartbeat.done():
            self._beat = self._clock()
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._beat_forever(), name=f"{self.service} heartbeat"
            )

    async def _beat_forever(self) -> None:
        while True:
            now = self._clock()
            if self._beat is not None and now - self._beat > self.stale_after_s:
                self._stall = (now - self._beat, now)
            self._beat = now
            await asyncio.sleep(self.heartbeat_s)

    async def _loop_check(self) -> tuple[bool, str]:
        if self._beat is None or self._heartbeat is None:
            return False, "heartbeat not started"
        if self._heartbeat.done():
            return False, "heartbeat task ended"
        now = self._clock()
        age = now - self._beat
        if age > self.stale_after_s:
            return False, (
                f"event loop heartbeat {age:.1f} s old (limit {self.stale_after_s:g} s): the loop was blocked"
            )
        if self._stall is not None and now - self._stall[1] <= self.stale_after_s:
            gap, ended = self._stall
            return False, (
                f"the event loop was blocked for {gap:.1f} s until {now - ended:.1f} s ago "
                f"(limit {self.stale_after_s:g} s)"
            )
        return True, f"heartbeat {age:.1f} s ago"

    # --- running the checks ---------------------------------------------------------------------

    async def run_checks(self, probes: Iterable[Probe], exclude: Iterable[str] = ()) -> list[Outcome]:
        excluded = set(exclude)
        chosen = list(probes)

        async def run(probe: Probe) -> Outcome:
            if probe.name in excluded:
                return Outcome(probe.name, True, "", excluded=True)
            try:
                ok, detail = await asyncio.wait_for(probe.check(), probe.timeout_s)
            except TimeoutError:
                return Outcome(probe.name, False, f"no answer within {probe.timeout_s:g} s")
            except Exception as exc:
                return Outcome(probe.name, False, one_line(f"{type(exc).__name__}: {exc}"))
            return Outcome(probe.name, bool(ok), one_line(detail))

        return list(await asyncio.gather(*(run(probe) for probe in chosen)))

    async def livez(self, exclude: Iterable[str] = ()) -> list[Outcome]:
        return await self.run_checks(self._liveness, exclude)

    async def readyz(self, exclude: Iterable[str] = ()) -> list[Outcome]:
        return await self.run_checks(self._readiness, exclude)

    @staticmethod
    def render(kind: str, outcomes: list[Outcome], *, verbose: bool = False) -> tuple[int, str]:
        """(HTTP status, body) in kube-apiserver's shape; see the module docstring."""
        ok = all(outcome.ok for outcome in outcomes)
        lines = [outcome.line(verbose=verbose) for outcome in outcomes]
        lines.append(f"{kind} check {'passed' if ok else 'failed'}")
        return (200 if ok else 503), "\n".join(lines) + "\n"

    async def _handle(self, request: web.Request, kind: str) -> web.Response:
        exclude = [name for value in request.query.getall("exclude", []) for name in value.split(",") if name]
        outcomes = await (self.livez(exclude) if kind == "livez" else self.readyz(exclude))
        status, body = self.render(kind, outcomes, verbose="verbose" in request.query)
        if status != 200:
            log.info(f"{kind} failed", service=self.service, failed={o.name: o.detail for o in outcomes if not o.ok})
        return web.Response(status=status, text=body, headers={"X-Content-Type-Options": "nosniff"})

    async def _livez(self, request: web.Request) -> web.Response:
        return await self._handle(request, "livez")

    async def _readyz(self, request: web.Request) -> web.Response:
        return await self._handle(request, "readyz")

    # --- serving --------------------------------------------------------------------------------

    async def start(self, port: int) -> int:
        """Serve /livez and /readyz on ``port`` (0: a free one) on the running loop; returns the port."""
        app = web.Application()
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, port, reuse_address=True)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        self.start_heartbeat()
        log.info(
            "health endpoints listening",
            service=self.service,
            port=self.port,
            host=self.host,
            readiness_checks=self.readiness_checks,
        )
        return self.port

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@contextlib.asynccontextmanager
async def serving(health: HealthServer, port: int | None) -> AsyncIterator[HealthServer]:
    """Serve ``health`` on ``port`` for the duration of the block; ``None`` serves nothing."""
    if port is None:
        yield health
        return
    await health.start(port)
    try:
        yield health
    finally:
        await health.stop()


def attach_to_faust(app: Any, health: HealthServer, port: int | None) -> None:
    """Serve ``health`` on faust ``app``'s loop, from the app's start (before its table recovery,
    so /livez answers during a long one) until it stops: as a mode service the app depends on,
    added before the app's own so that it starts first and stops last."""
    if port is None:
        return
    from mode import Service

    class HealthService(Service):
        async def on_start(self) -> None:
            await health.start(port)

        async def on_stop(self) -> None:
            await health.stop()

    app.add_dependency(HealthService())


def blocking_check(function: Callable[[], tuple[bool, str]]) -> Check:
    """A check out of a blocking ``function`` (a database query, a synchronous HTTP client).

    It runs on a thread of its own, one call at a time: while a call is still hanging (after the
    probe's timeout gave up on it), later probes fail at once instead of piling up threads."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="health-check")
    running: list[tuple[Future[tuple[bool, str]], float]] = []

    async def check() -> tuple[bool, str]:
        if running and not running[0][0].done():
            return False, f"the previous attempt has not returned for {time.monotonic() - running[0][1]:.0f} s"
        future = pool.submit(function)
        running[:] = [(future, time.monotonic())]
        return await asyncio.wrap_future(future)

    return check


# --- Kafka consumers in a group -------------------------------------------------------------------


def group_assignment(consumer: Any) -> set[Any] | None:
    """The partitions the group gave this aiokafka ``consumer``: None until the first assignment
    arrived (not started, or still joining), an empty set for a member the group left idle.

    aiokafka's public ``assignment()`` is empty in both cases; only its subscription state tells
    them apart (``assignment`` is None until the coordinator hands one over)."""
    state = getattr(consumer, "_subscription", None)
    subscription = getattr(state, "subscription", None)
    if subscription is None or getattr(subscription, "assignment", None) is None:
        return None
    return set(consumer.assignment())


def describe_partitions(partitions: Iterable[Any], limit: int = 6) -> str:
    names = sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


class ConsumerReadiness:
    """Readiness of one aiokafka consumer in a consumer group:

    - not ready until the group has assigned it partitions (joining, or Kafka unreachable);
    - ready with no partitions at all: the group has more members than partitions and left this
      one idle, a warm standby that takes partitions over when another member goes away (killing
      it would not help anything);
    - with partitions and ``max_lag`` set: ready once it has *caught up*, i.e. its position on
      every assigned partition is within ``max_lag`` records of the log end (last stable offset
      with read_committed) that the first check after the assignment saw. Once caught up it stays
      ready until its assignment changes: falling behind under load is not a reason to stop it.
      ``max_lag`` None: assigned is enough.
    """

    def __init__(self, consumer: Any, *, group: str, max_lag: int | None = DEFAULT_MAX_LAG) -> None:
        self.consumer = consumer
        self.group = group
        self.max_lag = max_lag
        self._targets: dict[Any, int] = {}
        self._targets_for: frozenset[Any] | None = None
        self._caught_up_for: frozenset[Any] | None = None

    async def __call__(self) -> tuple[bool, str]:
        assigned = group_assignment(self.consumer)
        if assigned is None:
            return False, f"waiting for consumer group {self.group} to assign partitions"
        if not assigned:
            return True, (
                f"no partitions assigned: a standby member of {self.group} (the group has more members than partitions)"
            )
        key = frozenset(assigned)
        summary = f"{len(key)} partition(s) of {self.group} assigned"
        if self.max_lag is None or key == self._caught_up_for:
            return True, summary
        if key != self._targets_for:
            self._targets = dict(await self.consumer.end_offsets(list(key)))
            self._targets_for = key
        behind: dict[Any, int] = {}
        for tp in key:
            lag = self._targets.get(tp, 0) - await self.consumer.position(tp)
            if lag > self.max_lag:
                behind[tp] = lag
        if behind:
            worst = sorted(behind.items(), key=lambda item: -item[1])[:3]
            return False, (
                f"catching up: {len(behind)} of {len(key)} partition(s) more than {self.max_lag} "
                f"records behind the log end seen at assignment ("
                + ", ".join(f"{tp.topic}[{tp.partition}] {lag}" for tp, lag in worst)
                + ")"
            )
        self._caught_up_for = key
        return True, summary + ", caught up"


# --- faust workers ---------------------------------------------------------------------------------


def faust_checks(app: Any) -> list[tuple[str, Check]]:
    """Readiness of a faust worker, as two checks:

    - ``kafka-group``: the app's consumer group has assigned it partitions and is not in the middle
      of a rebalance; a worker that came out of a rebalance with none (more workers than
      partitions) is an idle standby, ready;
    - ``tables``: the recovery of its tables from their changelogs has completed (faust processes
      nothing before), and none is under way after a later rebalance.
    """

    async def kafka_group() -> tuple[bool, str]:
        recovery = app.tables.recovery
        if not recovery.completed.is_set():
            return False, "waiting for the consumer group to assign partitions (and the tables to recover)"
        if app.rebalancing:
            return False, "consumer group rebalancing"
        assigned = app.consumer.assignment()
        if not assigned:
            return True, "no partitions assigned: a standby member (the group has more members than partitions)"
        return True, f"{len(app.assignor.assigned_actives())} active partition(s) assigned"

    async def tables() -> tuple[bool, str]:
        recovery = app.tables.recovery
        if not recovery.completed.is_set():
            return False, "table recovery has not completed yet"
        if app.in_recovery:
            return False, "recovering tables from their changelogs after a rebalance"
        return True, f"{len(app.tables)} table(s) recovered"

    return [("kafka-group", kafka_group), ("tables", tables)]


def serve_faust_health(app: Any, service: str, port: int | None) -> HealthServer:
    """A faust worker's readiness, served on faust's own loop from the app's start until it
    stops (``port`` None: not served):

    - ``kafka-group``: the app's consumer group has assigned this worker partitions and is not
      rebalancing; a worker left with none (more workers than partitions) is a warm standby and
      ready — it takes partitions over when another worker goes away;
    - ``tables``: the recovery of the app's tables from their changelogs has completed (faust
      processes no event before), and no recovery is under way after a later rebalance.

    The server starts before the tables recover, so that /livez answers during a long recovery."""
    health = HealthServer(service)
    for name, check in faust_checks(app):
        health.add_readiness(name, check)
    attach_to_faust(app, health, port)
    return health
