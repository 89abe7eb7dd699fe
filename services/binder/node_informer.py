"""Which nodes exist, from one LIST and a WATCH of node metadata, as client-go's informers keep it.

The apiserver accepts a binding to a node that does not exist (the pod is then stranded), so the
binder checks the node first. A ``GET`` per binding costs one request of the client's rate budget
for every pod; kube-scheduler reads its nodes from an informer cache instead. This module is that
cache for the binder:

- :class:`NodeCache` is the pure part: a fold of a LIST and WATCH events onto the set of node
  names, plus the names it saw deleted (so that a binding to a deleted node is refused without a
  request);
- :class:`NodeInformer` is the thin I/O part: a daemon thread that LISTs nodes (metadata only,
  ``PartialObjectMetadataList``, in pages), then WATCHes from the list's resourceVersion, watches
  again from the last version seen whenever the server ends a watch, and LISTs again on
  ``410 Gone`` (HTTP status, or an ``ERROR`` event with code 410: the version was compacted away).
  Every LIST page and every WATCH it opens takes a token from the limiter it is given, as client-go
  informers share their client's rate limiter; the events of a watch cost nothing.

While the informer has not listed yet (start-up) or when RBAC denies ``list``/``watch`` on nodes,
:meth:`NodeCache.knows` answers None and the backend falls back to a ``GET`` of the node.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge

from berth.logs import get_logger

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = get_logger(__name__)

NODE_LISTS = Counter(
    "berth_binder_node_lists_total",
    "Full LISTs of nodes by the binder's node informer (the first one, then one per "
    "410 Gone or broken watch that cannot resume).",
)
NODES_CACHED = Gauge("berth_binder_nodes_cached", "Nodes the binder's node informer knows to exist.")

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
"""Accept headers asking for node metadata only (no status: a node's status is most of its bytes)."""

LIST_PAGE = 500
WATCH_TIMEOUT_S = 300
"""The server ends a watch after this long (client-go picks 5-10 minutes); we then watch again."""


class Gone(Exception):
    """The server no longer has the resourceVersion we asked to watch from (410): list again."""


class NodeCache:
    """The names of the nodes that exist, as of ``resource_version``.

    Contract: before the first :meth:`replace`, :meth:`knows` answers None for every name (not
    synced: ask the apiserver). After it, True for a node listed or added and not deleted since,
    False for a node seen deleted (until it is added again), None for a name never seen — a node
    created after the last event the watch delivered. Deleted names are remembered up to
    ``remember_deleted`` (the oldest forgotten first). Safe to read from another thread than the
    one folding events in: every update is a single dict or set operation, or the replacement of a
    whole set.
    """

    def __init__(self, remember_deleted: int = 10_000) -> None:
        self.resource_version = ""
        self.synced = False
        self._names: set[str] = set()
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self._remember_deleted = remember_deleted

    def __len__(self) -> int:
        return len(self._names)

    def knows(self, name: str) -> bool | None:
        if not self.synced:
            return None
        if name in self._names:
            return True
        if name in self._deleted:
            return False
        return None

    def replace(self, names: Iterable[str], resource_version: str) -> None:
        """After a full LIST: exactly ``names`` exist. Names that were known and are not listed any
        more count as deleted."""
        listed = set(names)
        for name in self._names - listed:
            self._forget(name)
        for name in listed:
            self._deleted.pop(name, None)
        self._names = listed
        self.resource_version = resource_version
        self.synced = True

    def apply(self, event_type: str, name: str, resource_version: str) -> None:
        """One watch event: ``ADDED``/``MODIFIED`` (exists), ``DELETED``, or ``BOOKMARK`` (only
        moves the version). Raises ValueError for any other type."""
        if event_type in ("ADDED", "MODIFIED"):
            self._names.add(name)
            self._deleted.pop(name, None)
        elif event_type == "DELETED":
            self._names.discard(name)
            self._forget(name)
        elif event_type != "BOOKMARK":
            raise ValueError(f"not a watch event type: {event_type!r}")
        if resource_version:
            self.resource_version = resource_version

    def _forget(self, name: str) -> None:
        self._deleted[name] = None
        self._deleted.move_to_end(name)
        if len(self._deleted) > self._remember_deleted:
            self._deleted.popitem(last=False)


def watch_events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Decode a watch stream (one JSON event per line, lines split anywhere across chunks)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if pending.strip():
        yield json.loads(pending)


def fold_event(cache: NodeCache, event: dict[str, Any]) -> None:
    """Apply one decoded watch event to ``cache``; raises :class:`Gone` for an ``ERROR`` event
    with code 410 and RuntimeError for any other ``ERROR``."""
    kind = event.get("type")
    obj = event.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise Gone(obj.get("message") or "410 Gone")
        raise RuntimeError(f"watch error: {obj.get('message') or obj}")
    metadata = obj.get("metadata") or {}
    cache.apply(str(kind), metadata.get("name", ""), metadata.get("resourceVersion", ""))


class NodeInformer:
    """Keeps a :class:`NodeCache` current from a thread; see the module docstring.

    ``take_token`` blocks until the rate limiter allows one more request (called from the
    informer's thread). ``watch_timeout_s`` is the server-side length of one watch. Errors other
    than 410 are retried after a pause growing from ``retry_s`` to 30 s; a 403 stops the informer
    (the backend then checks nodes with a GET), logged with the RBAC rule to grant. ``core`` stands
    in for ``CoreV1Api(api_client)`` (its ``list_node``, answering urllib3-like responses).
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        take_token: Callable[[], None],
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        request_timeout_s: float = 60.0,
        retry_s: float = 1.0,
        core: Any = None,
    ) -> None:
        from kubernetes.client import CoreV1Api

        self.cache = NodeCache()
        self.lists = 0
        """Full LISTs done (the first one included)."""
        self.requests = 0
        """Requests sent (LIST pages and WATCHes), each after a token."""
        self.forbidden = False
        self._core = core if core is not None else CoreV1Api(api_client)  # ``core``: a fake, in unit tests
        self._take_token = take_token
        self._watch_timeout_s = watch_timeout_s
        self._request_timeout_s = request_timeout_s
        self._retry_s = retry_s
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="node-informer", daemon=True)

    def start(self) -> NodeInformer:
        self._thread.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        """Block until the first LIST is in the cache (True), or ``timeout`` seconds (False)."""
        return self._synced.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks the thread's read of the watch stream
            except Exception:
                pass
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    # -- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        pause = self._retry_s
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                pause = self._retry_s
            except Gone as exc:
                log.info("node watch expired; listing nodes again", reason=str(exc))
                need_list = True
            except ApiException as exc:
                if exc.status == 410:
                    need_list = True
                    continue
                if exc.status == 403:
                    self.forbidden = True
                    log.error(
                        "the binder may not list and watch nodes; checking each node with a GET before "
                        'binding instead. Grant its account verbs "list" and "watch" on resource '
                        '"nodes" (the binder ClusterRole in deploy/helm/berth/templates/rbac.yaml)',
                        status=exc.status,
                    )
                    return
                log.warning("node informer request failed; retrying", status=exc.status, wait_s=pause)
                self._stopping.wait(pause)
                pause = min(30.0, pause * 2)
            except (HTTPError, OSError, ValueError, RuntimeError) as exc:
                if self._stopping.is_set():
                    return
                log.warning("node watch broken; retrying", error=f"{type(exc).__name__}: {exc}", wait_s=pause)
                self._stopping.wait(pause)
                pause = min(30.0, pause * 2)

    def _list(self) -> None:
        names: list[str] = []
        token: str | None = None
        version = ""
        while True:
            self._take_token()
            self.requests += 1
            response = self._core.list_node(
                limit=LIST_PAGE,
                _continue=token,
                _preload_content=False,
                _request_timeout=self._request_timeout_s,
                _headers={"Accept": METADATA_LIST},
            )
            try:
                document = json.loads(response.data)
            finally:
                response.release_conn()
            names.extend(item["metadata"]["name"] for item in document.get("items") or ())
            metadata = document.get("metadata") or {}
            version = metadata.get("resourceVersion") or version
            token = metadata.get("continue") or None
            if token is None:
                break
        self.cache.replace(names, version)
        self.lists += 1
        NODE_LISTS.inc()
        NODES_CACHED.set(len(self.cache))
        self._synced.set()
        log.info("nodes listed", nodes=len(names), resource_version=version)

    def _watch(self) -> None:
        self._take_token()
        self.requests += 1
        response = self._core.list_node(
            watch=True,
            resource_version=self.cache.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s,
            _preload_content=False,
            _request_timeout=(self._request_timeout_s, self._watch_timeout_s + 30),
            _headers={"Accept": METADATA_WATCH},
        )
        self._response = response
        try:
            for event in watch_events(response.stream(65536)):
                fold_event(self.cache, event)
                NODES_CACHED.set(len(self.cache))
                if self._stopping.is_set():
                    return
        finally:
            self._response = None
            response.release_conn()
