"""Kubernetes as a :class:`~.ports.ClusterBackend`, with the official ``kubernetes`` client.

The client is synchronous: each request runs on a thread of a pool of our own (as many threads as
the ApiClient has pooled connections, sized for ``--max-in-flight``; asyncio's default executor
would cap it at a handful on a small machine). Every request first takes a token from the
binder's limiter, so ``--qps``/``--burst`` bound the API rate as client-go's flags do, read-backs
included (``meters_requests``) — except events, which take theirs from ``event_limiter``:
kube-scheduler, too, writes events through a client of their own with its own limiter, so that
"50 QPS" means 50 bindings per second rather than 25 bindings and their 25 events. Bodies and
the reading of answers are pure functions in :mod:`.kube_outcomes`, the threads, tokens and
request metrics are :mod:`.kube_transport`'s; this module decides what to send.

Requests, per operation:

- ``bind``: the node must exist (the apiserver binds to a node that does not exist, leaving the
  pod stranded). A node informer (:mod:`.node_informer`: one ``LIST`` and a ``WATCH`` of node
  metadata, started by :meth:`KubeBackend.start`) answers that without a request; only a node it
  has not seen yet (created moments ago, or the informer not synced or not allowed to list) costs
  a ``GET nodes/{node}`` (remembered for ``node_ttl_s``; skipped, with an error logged once, when
  RBAC denies reading nodes). Then ``POST pods/{name}/binding`` with the pod UID as
  precondition — ``create_namespaced_pod_binding``, the pod's subresource, as kube-scheduler
  does; the client's ``create_namespaced_binding`` posts to the namespace's legacy ``bindings``
  collection, which ignores the UID (kube 1.34). Both decode a Binding from the answer, which is
  a Status, and raise (kubernetes-client/python #825): called with ``_preload_content=False``.
  On 201 a ``Scheduled`` event; on 409 ``GET pods/{name}`` to tell our own earlier binding
  (applied) from a real conflict.
- ``evict``: ``POST pods/{name}/eviction`` (policy/v1, UID precondition).
- ``nominate``: ``PATCH pods/{name}/status`` ``nominatedNodeName``.
- ``report_unschedulable`` (its requests are deferrable: they wait while bindings are queued for
  a token): one ``PATCH pods/{name}/status`` (JSON patch) whose ``test``
  operations are the preconditions — the pod's UID, no ``spec.nodeName`` (a pod bound meanwhile is
  never marked unschedulable), and its conditions as this backend last left them (none, for a pod
  it never reported) — and a ``FailedScheduling`` event. When a test fails (422) or the pod is
  new to this backend after a restart: ``GET pods/{name}`` and a strategic-merge ``PATCH`` at that
  resourceVersion (re-read and retried on 409), which also notices "already reported".
- ``scale``: the scale subresource of AgentPool (berth.io/v1alpha1), else Deployment, else
  StatefulSet (the kind found is remembered per pool).
- ``cordon``: ``PATCH nodes/{name}`` ``spec.unschedulable``.

Events are best effort and written in the background (:meth:`KubeBackend._event`): a failed
event is logged and counted, never the operation's outcome; :meth:`KubeBackend.flush_events`
waits for them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from berth.schemas import PodPlacement
from prometheus_client import Counter

from berth.logs import get_logger

from . import kube_outcomes as k
from .kube_outcomes import Access, Reply
from .kube_transport import KubeTransport
from .node_informer import NodeInformer
from .ports import KeepIf, Outcome, Preemptor
from .ratelimit import TokenBucket

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = get_logger(__name__)

V = TypeVar("V")

NODE_CHECKS = Counter(
    "berth_binder_node_checks_total",
    "Checks that a node exists before a binding, by how they were answered: cache (the node "
    "informer), get (a GET of the node), unchecked (RBAC denies reading nodes).",
    ["source"],
)
EVENTS = Counter(
    "berth_binder_events_total", "Kubernetes events the binder wrote, by reason and result.", ["reason", "result"]
)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
STATUS_PATCH_ATTEMPTS = 3
"""A status patch at a stale resourceVersion is read again and retried this often (pods change
often while pending: other controllers patch them too)."""


def load_api_client(kubeconfig: str | None = None, context: str | None = None, *, pool_size: int = 32) -> ApiClient:
    """An ApiClient from ``kubeconfig`` (``context`` in it), else in-cluster configuration when
    running in a pod (``KUBERNETES_SERVICE_HOST`` set), else ``$KUBECONFIG`` or ``~/.kube/config``.
    ``pool_size``: connections kept per host — as many as requests in flight."""
    from kubernetes.client import ApiClient, Configuration
    from kubernetes.config import load_incluster_config, load_kube_config

    configuration = Configuration()
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        load_incluster_config(client_configuration=configuration)
    else:
        load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
        )
    configuration.connection_pool_maxsize = pool_size
    return ApiClient(configuration)


def _default_instance() -> str:
    return f"berth-binder-{socket.gethostname()}"


def _remember(table: OrderedDict[str, V], key: str, value: V, *, limit: int) -> None:
    """Set ``key`` as ``table``'s most recent entry, forgetting the oldest beyond ``limit``."""
    table[key] = value
    table.move_to_end(key)
    if len(table) > limit:
        table.popitem(last=False)


class KubeBackend:
    """The port on ``api_client``; see the module docstring. Owns the client (closed by :meth:`close`)."""

    meters_requests = True

    def __init__(
        self,
        api_client: ApiClient,
        *,
        limiter: TokenBucket,
        event_limiter: TokenBucket | None = None,
        workers: int = 32,
        timeout_s: float = 10.0,
        node_ttl_s: float = 30.0,
        instance: str | None = None,
        node_informer: bool = True,
        sync_timeout_s: float = 30.0,
        max_pending_events: int = 1000,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi, EventsV1Api

        self.api_client = api_client
        self.limiter = limiter
        self.event_limiter = event_limiter or limiter
        self.timeout_s = timeout_s
        self.node_ttl_s = node_ttl_s
        self.instance = instance or _default_instance()
        self._clock = clock
        self._monotonic = monotonic
        self._core = CoreV1Api(api_client)
        self._apps = AppsV1Api(api_client)
        self._custom = CustomObjectsApi(api_client)
        self._events = EventsV1Api(api_client)
        self._api = KubeTransport(api_client, limiter=limiter, workers=workers, timeout_s=timeout_s)
        self._check_nodes = True
        self._nodes_seen: OrderedDict[str, float] = OrderedDict()
        """Nodes that existed, by name → when we last saw them (monotonic seconds)."""
        self._pool_kinds: OrderedDict[str, str] = OrderedDict()
        """``namespace/pool`` → the kind whose scale subresource worked last time."""
        self._reported: OrderedDict[str, k.ReportedCondition] = OrderedDict()
        """``namespace/name`` → the PodScheduled=False condition our last status patch left on the pod."""
        self._nominated: OrderedDict[str, str] = OrderedDict()
        """pod UID → the node we nominated it for (cleared once it binds there or elsewhere)."""
        self._victims_marked: OrderedDict[str, str] = OrderedDict()
        """victim ``namespace/name/uid`` → its preemptor's UID: marked once, however often the
        eviction is retried (a disruption budget may hold it back)."""
        self.max_pending_events = max_pending_events
        self._pending_events: set[asyncio.Task[None]] = set()
        self._use_informer = node_informer
        self._sync_timeout_s = sync_timeout_s
        self.informer: NodeInformer | None = None
        self.informer_requests = 0
        """Main-limiter tokens the node informer took (its LIST pages and WATCHes)."""

    async def _read_pod(self, namespace: str, name: str) -> Reply:
        return await self._api.send("GET", self._core.read_namespaced_pod, name, namespace)

    def _event(self, body: dict[str, Any]) -> None:
        """Write an event in the background, as client-go's event broadcaster does: the operation
        does not wait for the event limiter (FailedScheduling events would otherwise slow the
        bindings down). At most ``max_pending_events`` wait; beyond that an event is dropped and
        counted, as the broadcaster drops when its queue is full."""
        if len(self._pending_events) >= self.max_pending_events:
            EVENTS.labels(body["reason"], "dropped").inc()
            return
        task = asyncio.get_running_loop().create_task(self._write_event(body))
        self._pending_events.add(task)
        task.add_done_callback(self._pending_events.discard)

    async def flush_events(self) -> None:
        """Wait until every event queued so far is written (or failed)."""
        while self._pending_events:
            await asyncio.gather(*list(self._pending_events), return_exceptions=True)

    async def _write_event(self, body: dict[str, Any]) -> None:
        reply = await self._api.send(
            "POST",
            self._events.create_namespaced_event,
            body["metadata"]["namespace"],
            body,
            limiter=self.event_limiter,
        )
        EVENTS.labels(body["reason"], "written" if reply.ok else "failed").inc()
        if not reply.ok:
            outcome = k.classify(reply, Access("create", "events", "events.k8s.io"))
            log.warning(
                "event not written",
                reason=body["reason"],
                pod=f"{body['metadata']['namespace']}/{body['regarding']['name']}",
                status=reply.status,
                error=outcome.reason,
            )

    # -- nodes ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the node informer and wait (up to ``sync_timeout_s``) for its first LIST, so that
        bindings do not each GET their node meanwhile. Idempotent; also called by the first binding."""
        if not self._use_informer or self.informer is not None:
            return
        loop = asyncio.get_running_loop()

        async def informer_token() -> None:
            self.informer_requests += 1
            await self.limiter.acquire()

        def take_token() -> None:  # on the informer's thread: the token comes from the loop's limiter
            # Bounded: a loop that stopped meanwhile must not hold the thread (TimeoutError is
            # retried by the informer, or ends it when it is being stopped).
            asyncio.run_coroutine_threadsafe(informer_token(), loop).result(timeout=120)

        self.informer = NodeInformer(self.api_client, take_token=take_token).start()
        synced = await self._api.run_blocking(self.informer.wait_synced, self._sync_timeout_s)
        if not synced:
            log.warning(
                "node informer not synced yet; checking nodes with a GET until it is",
                timeout_s=self._sync_timeout_s,
                forbidden=self.informer.forbidden,
            )

    async def _node_exists(self, node: str) -> Outcome:
        """applied if ``node`` exists, conflict if it does not: from the node informer's cache when it
        knows the name, else from a GET (a positive answer remembered for ``node_ttl_s``)."""
        if self._use_informer and self.informer is None:
            await self.start()
        known = self.informer.cache.knows(node) if self.informer is not None else None
        if known is not None:
            NODE_CHECKS.labels("cache").inc()
            # The apiserver's own words for a node that is not there, so that reasons read the same.
            return Outcome.applied() if known else Outcome.conflict(f'nodes "{node}" not found')
        if not self._check_nodes:
            NODE_CHECKS.labels("unchecked").inc()
            return Outcome.applied()
        seen = self._nodes_seen.get(node)
        now = self._monotonic()
        if seen is not None and now - seen < self.node_ttl_s:
            NODE_CHECKS.labels("cache").inc()
            return Outcome.applied()
        NODE_CHECKS.labels("get").inc()
        reply = await self._api.send("GET", self._core.read_node, node)
        outcome = k.classify(reply, Access("get", "nodes"))
        if reply.status == 403:
            # A safety net, not a necessity (kube-scheduler binds without it): without the right
            # to read nodes, bind as kube-scheduler does rather than fail every binding.
            self._check_nodes = False
            log.error("cannot check that nodes exist before binding; binding without the check", reason=outcome.reason)
            return Outcome.applied()
        if outcome.is_applied:
            _remember(self._nodes_seen, node, now, limit=100_000)
        else:
            self._nodes_seen.pop(node, None)
        return outcome

    # -- the port ---------------------------------------------------------------------------------

    async def check_bind(self, placement: PodPlacement) -> Outcome:
        reply = await self._read_pod(placement.namespace, placement.name)
        if not reply.ok:
            return k.classify(reply, Access("get", "pods"))
        if reply.body is None:
            return Outcome.retryable(f"unreadable pod {placement.namespace}/{placement.name}: {reply.message}")
        pod_outcome = k.bindable(reply.body, placement)
        if not pod_outcome.is_applied or pod_outcome.reason == "already bound":
            return pod_outcome
        node = await self._node_exists(placement.node)
        return pod_outcome if node.is_applied else node

    async def bind(self, placement: PodPlacement) -> Outcome:
        node = await self._node_exists(placement.node)
        if not node.is_applied:
            return node
        reply = await self._api.send(
            "POST",
            self._core.create_namespaced_pod_binding,
            placement.name,
            placement.namespace,
            k.binding_body(placement),
        )
        if reply.ok:
            self._reported.pop(f"{placement.namespace}/{placement.name}", None)
            self._event(k.scheduled_event(placement, now=self._clock(), instance=self.instance))
            if self._nominated.pop(placement.pod_uid, placement.node) != placement.node:
                # Nominated for another node by a preemption that did not happen: say it no more.
                await self._api.send(
                    "PATCH",
                    self._core.patch_namespaced_pod_status,
                    placement.name,
                    placement.namespace,
                    k.clear_nomination_patch(placement.pod_uid),
                    deferrable=True,
                    _content_type=STRATEGIC_PATCH,
                )
            return Outcome.applied()
        outcome = k.classify(reply, Access("create", "pods/binding"))
        if reply.status != 409:
            return outcome
        current = await self._read_pod(placement.namespace, placement.name)
        if current.status == 404:
            return k.bind_conflict(None, placement, outcome)
        if not current.ok or current.body is None:
            # Cannot tell ours from theirs without the pod: ask again later.
            return Outcome.retryable(f"{outcome.reason}; reading the pod back: {current.message}")
        return k.bind_conflict(current.body, placement, outcome)

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        preemptor: Preemptor | None = None,
        keep_if: KeepIf | None = None,
    ) -> Outcome:
        if keep_if is not None and (keep_if.local_storage or keep_if.pvc):
            read = await self._read_pod(namespace, name)
            if read.status == 404:
                return Outcome.applied("already gone")
            if not read.ok or read.body is None:
                return k.classify(read, Access("get", "pods"))
            stays = keep_if.reason((read.body.get("spec") or {}).get("volumes") or [])
            if stays is not None:
                return Outcome.conflict(stays)
        if preemptor is not None and not await _mark_victim(self, namespace, name, uid, preemptor):
            return Outcome.conflict(f"pod {namespace}/{name} was re-created (UID {uid} is gone)")
        reply = await self._api.send(
            "POST", self._core.create_namespaced_pod_eviction, name, namespace, k.eviction_body(namespace, name, uid)
        )
        return k.eviction_outcome(reply)

    async def nominate(self, placement: PodPlacement) -> Outcome:
        reply = await self._api.send(
            "PATCH",
            self._core.patch_namespaced_pod_status,
            placement.name,
            placement.namespace,
            k.nominate_patch(placement),
            _content_type=STRATEGIC_PATCH,
        )
        outcome = k.nominate_outcome(reply, placement)
        if outcome.is_applied:
            _remember(self._nominated, placement.pod_uid, placement.node, limit=100_000)
        return outcome

    async def report_unschedulable(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        key = f"{namespace}/{name}"
        known = self._reported.get(key)
        if known is not None and known.message == message and uid in (None, known.uid):
            return Outcome.applied("already reported")  # by us, and nothing changed it since as far as we know
        now = self._clock()
        patch = k.unschedulable_json_patch(uid, message, now, known)
        patched = await self._api.send(
            "PATCH",
            self._core.patch_namespaced_pod_status,
            name,
            namespace,
            patch,
            deferrable=True,
            _content_type=JSON_PATCH,
        )
        if patched.status == 422:
            # A precondition failed (re-created, bound, or conditions not as we left them: e.g. we
            # restarted), or the patch was invalid: read the pod and decide on what it says.
            self._reported.pop(key, None)
            return await self._report_after_reading(namespace, name, uid, message)
        if not patched.ok:
            if patched.status == 404:
                self._reported.pop(key, None)
            return k.classify(patched, Access("patch", "pods/status"))
        return await self._reported_on(key, patched, message, now)

    async def _reported_on(self, key: str, patched: Reply, message: str, now: datetime) -> Outcome:
        """After a status patch that set the condition: remember where it is, write the event."""
        pod = patched.body or {}
        self._remember_report(key, pod)
        namespace, _, name = key.partition("/")
        self._event(
            k.failed_scheduling_event(
                namespace, name, (pod.get("metadata") or {}).get("uid"), message, now=now, instance=self.instance
            )
        )
        return Outcome.applied()

    def _remember_report(self, key: str, pod: Mapping[str, Any]) -> None:
        condition = k.reported_condition(pod)
        if condition is None:
            self._reported.pop(key, None)
            return
        _remember(self._reported, key, condition, limit=100_000)

    async def _report_after_reading(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        """The careful way: read the pod, then patch at that resourceVersion."""
        for _ in range(STATUS_PATCH_ATTEMPTS):
            read = await self._api.send("GET", self._core.read_namespaced_pod, name, namespace, deferrable=True)
            if not read.ok:
                return k.classify(read, Access("get", "pods"))
            if read.body is None:
                return Outcome.retryable(f"unreadable pod {namespace}/{name}: {read.message}")
            pod = read.body
            metadata: Mapping[str, Any] = pod.get("metadata") or {}
            if uid is not None and metadata.get("uid") != uid:
                return k.uid_mismatch(uid, metadata.get("uid"))
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                return Outcome.applied(f"bound to {node!r} meanwhile; nothing to report")
            if k.already_reported(pod, message):
                self._remember_report(f"{namespace}/{name}", pod)
                return Outcome.applied("already reported")
            now = self._clock()
            patched = await self._api.send(
                "PATCH",
                self._core.patch_namespaced_pod_status,
                name,
                namespace,
                k.unschedulable_patch(pod, message, now),
                deferrable=True,
                _content_type=STRATEGIC_PATCH,
            )
            if patched.status == 409:
                continue  # the pod changed since we read it: read again
            if not patched.ok:
                return k.classify(patched, Access("patch", "pods/status"))
            return await self._reported_on(f"{namespace}/{name}", patched, message, now)
        return Outcome.retryable(f"pod {namespace}/{name} kept changing while its status was patched")

    async def scale(self, namespace: str, pool: str, replicas: int) -> Outcome:
        key = f"{namespace}/{pool}"
        kinds = ["AgentPool", "Deployment", "StatefulSet"]
        known = self._pool_kinds.get(key)
        if known is not None:
            kinds.remove(known)
            kinds.insert(0, known)
        body = k.scale_patch(replicas)
        for kind in kinds:
            reply = await self._scale_one(kind, namespace, pool, body)
            if reply.status == 404:
                continue
            outcome = k.classify(reply, _SCALE_ACCESS[kind])
            if outcome.is_applied:
                _remember(self._pool_kinds, key, kind, limit=10_000)
            return outcome
        self._pool_kinds.pop(key, None)
        return Outcome.conflict(f'no AgentPool, Deployment or StatefulSet "{key}"')

    async def _scale_one(self, kind: str, namespace: str, pool: str, body: dict[str, Any]) -> Reply:
        if kind == "AgentPool":
            return await self._api.send(
                "PATCH",
                self._custom.patch_namespaced_custom_object_scale,
                k.AGENTPOOL_GROUP,
                k.AGENTPOOL_VERSION,
                namespace,
                k.AGENTPOOL_PLURAL,
                pool,
                body,
                _content_type=MERGE_PATCH,
            )
        call = (
            self._apps.patch_namespaced_deployment_scale
            if kind == "Deployment"
            else self._apps.patch_namespaced_stateful_set_scale
        )
        return await self._api.send("PATCH", call, pool, namespace, body, _content_type=MERGE_PATCH)

    async def cordon(self, node: str) -> Outcome:
        reply = await self._api.send(
            "PATCH", self._core.patch_node, node, {"spec": {"unschedulable": True}}, _content_type=MERGE_PATCH
        )
        return k.classify(reply, Access("patch", "nodes"))

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.flush_events(), timeout=self.timeout_s)
        except TimeoutError:
            log.warning("events still unwritten at shutdown; dropped", events=len(self._pending_events))
            for task in list(self._pending_events):
                task.cancel()
        if self.informer is not None:
            self.informer.stop()
        self._api.shutdown()
        self.api_client.close()


_SCALE_ACCESS = {
    "AgentPool": Access("patch", "agentpools/scale", k.AGENTPOOL_GROUP),
    "Deployment": Access("patch", "deployments/scale", "apps"),
    "StatefulSet": Access("patch", "statefulsets/scale", "apps"),
}


async def _mark_victim(backend: KubeBackend, namespace: str, name: str, uid: str | None, preemptor: Preemptor) -> bool:
    """Mark a preemption victim as kube-scheduler does before it goes: the DisruptionTarget
    condition, then a ``Preempted`` event. False when the pod was re-created (another UID); a pod
    already gone is left to the eviction, which says so."""
    key = f"{namespace}/{name}/{uid}"
    if backend._victims_marked.get(key) == preemptor.uid:
        return True
    marked = await backend._api.send(
        "PATCH",
        backend._core.patch_namespaced_pod_status,
        name,
        namespace,
        k.victim_condition_patch(uid, backend._clock()),
        _content_type=STRATEGIC_PATCH,
    )
    if k.uid_rejected(marked):
        return False
    if marked.ok:
        _remember(backend._victims_marked, key, preemptor.uid, limit=10_000)
        backend._event(
            k.preempted_event(
                namespace, name, uid, preemptor.uid, preemptor.node, now=backend._clock(), instance=backend.instance
            )
        )
    return True
