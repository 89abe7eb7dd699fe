"""List and watch one resource, publishing what changed; relist on 410 Gone so nothing is lost.

One :class:`ResourceWatcher` per resource (and namespace, when ingest is limited to some). The
cycle is the informer's (client-go's reflector):

1. list, paginated (``limit``/``continue``), and remember the list's ``resourceVersion``;
   publish the difference between the list and ``known`` (what was published before: deletions
   for objects that disappeared while we were away, observations for new or changed ones);
2. watch from that ``resourceVersion`` with ``allowWatchBookmarks`` and ``timeoutSeconds``,
   publishing each event's steps and advancing the resourceVersion (bookmarks advance it too);
3. when the server ends the watch, watch again from where we are; on ``410 Gone`` (HTTP status,
   or an ERROR event with code 410: the version was compacted away) go back to 1.

Errors talking to the apiserver are retried with exponential backoff and jitter (tenacity), for
ever: ingest has nothing better to do. A failure to publish is NOT retried here: it propagates so
that the service ends the leadership term and rebuilds ``known`` from Kafka (what downstream
really has), instead of guessing which events got through.

The official client is synchronous: lists run in ``asyncio.to_thread``, and each watch stream is
read by a thread that hands lines to the event loop through a queue; cancelling the watcher shuts
the stream's socket down, which ends that thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import urllib3
from berth.schemas._base import utc_now
from tenacity import AsyncRetrying, retry_if_exception_type, stop_never, wait_exponential, wait_random

from berth.kube.capacity import SPOT_LABELS, SpotLabel
from berth.logs import get_logger
from berth.metrics import PENDING_PODS, labelled

from .kubeapi import PATHS, ApiException, KubeApi, close_stream, lines
from .metrics import RELISTS, UNCONVERTIBLE, WATCH_EVENTS, WATCH_LAG
from .translate import (
    DEFAULT_SCHEDULER_NAMES,
    Observation,
    Removal,
    Translation,
    is_gated,
    last_write_time,
    relist_steps,
    remember,
    watch_steps,
)

log = get_logger(__name__)

Publish = Callable[[Sequence[Observation | Removal]], Awaitable[None]]
"""Sends events and returns once Kafka has all of them; raises :class:`PublishError` otherwise."""


class Gone(Exception):
    """The apiserver no longer has the requested resourceVersion (410): relist."""


class WatchError(Exception):
    """An ERROR event other than 410, or a line that is not a watch event."""


class PublishError(Exception):
    """Events could not be published; ends the leadership term (see the module docstring)."""


_END = object()
_RETRYABLE = (ApiException, urllib3.exceptions.HTTPError, OSError, WatchError, ValueError)


class ResourceWatcher:
    """Keeps Kafka in line with one resource (``namespace`` None: all namespaces).

    ``known`` is what was published for this resource and scope (key → last observation; see
    :mod:`.translate`); the watcher updates it as it publishes. ``resource_version`` is where the
    next watch resumes (None: list first); both persist across :meth:`run` calls, so cancelling
    and running again resumes like a dropped connection would.
    """

    def __init__(
        self,
        api: KubeApi,
        resource: str,
        publish: Publish,
        *,
        namespace: str | None = None,
        known: dict[str, Observation] | None = None,
        scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES,
        spot_labels: Sequence[SpotLabel] = SPOT_LABELS,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        max_backoff_s: float = 30.0,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.api = api
        self.resource = resource
        self.path = PATHS[resource].collection(namespace)
        self.namespace = namespace
        self.publish = publish
        self.known: dict[str, Observation] = known if known is not None else {}
        self.scheduler_names = scheduler_names
        self.spot_labels = spot_labels
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self.resource_version: str | None = None
        self.lists = 0
        self.synced = asyncio.Event()
        """Set once the first list has been published."""
        self.gated: set[str] = set()
        """UIDs of our pods waiting on scheduling gates (pods only): never published, counted."""
        self._log = log.bind(resource=resource, namespace=namespace or "*")

    async def run(self) -> None:
        """List, then watch for ever (until cancelled); see the module docstring."""
        while True:
            # A fresh retrier per cycle: the backoff grows over consecutive failures only, and a
            # cycle that ends normally (the server's watch timeout) starts the count again.
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(_RETRYABLE),
                stop=stop_never,
                reraise=True,
                wait=wait_exponential(multiplier=0.2, max=self.max_backoff_s) + wait_random(0, 0.5),
                before_sleep=self._before_retry,
            ):
                with attempt:
                    await self.cycle()

    async def cycle(self) -> None:
        """One list (if needed) and one watch until the server ends it (or 410)."""
        if self.resource_version is None:
            await self.relist()
        try:
            await self.watch_once(self.resource_version or "")
        except Gone as exc:
            self._log.info("resourceVersion gone; relisting", resource_version=self.resource_version, reason=str(exc))
            self.resource_version = None

    def _before_retry(self, state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        status = getattr(exc, "status", None)
        if status == 404:
            self._log.warning(
                "resource not served; is its CustomResourceDefinition applied? "
                "(kubectl apply -f deploy/helm/berth/crds/)",
                path=self.path,
            )
        else:
            self._log.warning(
                "apiserver error; retrying",
                error=f"{type(exc).__name__}: {exc}"[:500],
                status=status,
                attempt=state.attempt_number,
            )

    # --- list -------------------------------------------------------------------------------

    async def relist(self) -> None:
        """List everything (paginated) and publish the difference to ``known``."""
        items, version = await self._list_all()
        if self.lists:
            RELISTS.labels(self.resource).inc()
        self.lists += 1
        translation = relist_steps(
            self.known,
            self.resource,
            items,
            observed_at=self.clock(),
            scheduler_names=self.scheduler_names,
            spot_labels=self.spot_labels,
        )
        await self._apply(translation)
        if self.resource == "pods":
            self.gated = {str(_uid(item)) for item in items if is_gated(item, self.scheduler_names)}
            self._report_gated()
        self.resource_version = version
        self.synced.set()
        self._log.info("listed", objects=len(items), published=len(translation.steps), resource_version=version)

    async def _list_all(self) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", str(self.page_size))]
            if token:
                query.append(("continue", token))
            try:
                page = await asyncio.to_thread(self.api.get, self.path, query)
            except ApiException as exc:
                if exc.status == 410 and token:
                    # The continue token expired mid-list: a consistent list must start over.
                    items, token = [], None
                    continue
                raise
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    # --- watch ------------------------------------------------------------------------------

    async def watch_once(self, resource_version: str) -> None:
        """Watch from ``resource_version`` until the server closes the stream; raises :class:`Gone`."""
        query = [("allowWatchBookmarks", "true"), ("timeoutSeconds", str(self.watch_timeout_s))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        try:
            response = await asyncio.to_thread(
                self.api.open_watch, self.path, query, read_timeout_s=self.watch_timeout_s + 30
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(f"HTTP 410: {exc.body or exc.reason}") from exc
            raise
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def pump() -> None:
            # Unbounded hand-over: the thread never blocks on the loop, so it always notices the
            # socket being shut down. Bursts are bounded by what the apiserver sends.
            def hand(item: Any) -> None:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, item)
                except RuntimeError:
                    pass  # the loop is closed: nobody is listening any more

            try:
                for line in lines(response):
                    hand(line)
                hand(_END)
            except BaseException as exc:
                hand(exc)

        reader = threading.Thread(target=pump, name=f"watch-{self.resource}", daemon=True)
        reader.start()
        try:
            while True:
                batch = [await queue.get()]
                while not queue.empty() and len(batch) < 1000:
                    batch.append(queue.get_nowait())
                finished = await self._handle(batch)
                if finished:
                    return
        finally:
            close_stream(response)  # unblocks the reader thread if it is still reading

    async def _handle(self, batch: list[Any]) -> bool:
        """Translate and publish a batch of lines; True when the stream has ended."""
        steps = []
        problems: list[str] = []
        ended = False
        version = self.resource_version
        # Steps are computed one event at a time against ``known`` updated as we go (an object
        # may change twice in one batch), then published together.
        for item in batch:
            if item is _END:
                ended = True
                break
            if isinstance(item, BaseException):
                if isinstance(item, (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError)):
                    ended = True  # the connection dropped: watch again from where we are
                    break
                raise item
            event = json.loads(item)
            kind = event.get("type")
            obj = event.get("object") or {}
            if not isinstance(kind, str) or not isinstance(obj, dict):
                raise WatchError(f"not a watch event: {item[:200]!r}")
            labelled(WATCH_EVENTS, self.resource, kind).inc()
            if kind == "ERROR":
                await self._flush(steps, version)
                code = obj.get("code")
                if code == 410:
                    raise Gone(str(obj.get("message", "")))
                raise WatchError(f"watch ERROR {code}: {obj.get('message', obj)}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version or "")
            if kind == "BOOKMARK":
                continue
            now = self.clock()
            written = last_write_time(obj)
            if written is not None:
                labelled(WATCH_LAG, self.resource).set(max(0.0, (now - written).total_seconds()))
            translation = watch_steps(
                self.known,
                self.resource,
                kind,
                obj,
                observed_at=now,
                scheduler_names=self.scheduler_names,
                spot_labels=self.spot_labels,
            )
            if self.resource == "pods":
                if kind != "DELETED" and is_gated(obj, self.scheduler_names):
                    self.gated.add(str(_uid(obj)))
                else:
                    self.gated.discard(str(_uid(obj)))
            self._report(translation)
            remember(self.known, translation.steps)
            steps.extend(translation.steps)
            problems.extend(translation.problems)
        await self._flush(steps, version)
        if self.resource == "pods":
            self._report_gated()
        return ended

    def _report_gated(self) -> None:
        PENDING_PODS.labels("gated").set(len(self.gated))

    async def _flush(self, steps: list[Any], version: str | None) -> None:
        if steps:
            await self.publish([step.event for step in steps])
            steps.clear()
        self.resource_version = version

    async def _apply(self, translation: Translation) -> None:
        self._report(translation)
        remember(self.known, translation.steps)
        if translation.steps:
            await self.publish([step.event for step in translation.steps])

    def _report(self, translation: Translation) -> None:
        for problem in translation.problems:
            UNCONVERTIBLE.labels(self.resource).inc()
            self._log.warning("object not converted; treated as absent", problem=problem)
        for note in translation.notes:
            self._log.debug("conversion note", note=note)


def _uid(obj: dict[str, Any]) -> object:
    return (obj.get("metadata") or {}).get("uid")
