"""Kubernetes as a :class:`~.ports.ClusterBackend`, with the official ``kubernetes`` client.

Requests go out on the event loop (:mod:`.kube_transport`: the official client's asyncio REST
client, at most ``--max-in-flight`` at once). Every request first takes a token from the binder's
limiter, so ``--qps``/``--burst`` bound the API rate as client-go's flags do, read-backs included
(``meters_requests``) — except events, which take theirs from ``event_limiter``
(:mod:`.kube_events`). Bodies and the reading of answers are pure functions in
:mod:`.kube_outcomes`, paths in :mod:`.kube_paths`, the connections, tokens and request metrics
are :mod:`.kube_transport`'s; this module decides what to send for a binding and composes the
rest: the other write-backs (evictions, nominations, unschedulable reports, scaling, cordons)
are :class:`~.kube_writebacks.KubeWriteBacks`', events :class:`~.kube_events.EventWriter`'s.

``bind``: the node must exist (the apiserver binds to a node that does not exist, leaving the
pod stranded). A node informer (:mod:`.node_informer`: one ``LIST`` and a ``WATCH`` of node
metadata, started by :meth:`KubeBackend.start`) answers that without a request; only a node it
has not seen yet (created moments ago, or the informer not synced or not allowed to list) costs
a ``GET nodes/{node}`` (remembered for ``node_ttl_s``; skipped, with an error logged once, when
RBAC denies reading nodes). Then ``POST pods/{name}/binding`` with the pod UID as
precondition — the pod's subresource, as kube-scheduler does; the namespace's legacy
``bindings`` collection ignores the UID (kube 1.34). On 201 a ``Scheduled`` event (and a
nomination for another node cleared); on 409 ``GET pods/{name}`` to tell our own earlier binding
(applied) from a real conflict.

Events are best effort and written in the background: a failed event is logged and counted,
never the operation's outcome; :meth:`KubeBackend.flush_events` waits for them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from berth.schemas import PodPlacement
from prometheus_client import Counter

from berth.logs import get_logger
from berth.metrics import labelled

from . import kube_outcomes as k
from . import kube_paths as paths
from .kube_events import EventWriter
from .kube_outcomes import Access, Reply
from .kube_transport import KubeTransport
from .kube_writebacks import KubeWriteBacks, remember
from .node_informer import NodeInformer
from .ports import KeepIf, Outcome, Preemptor
from .ratelimit import TokenBucket

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = get_logger(__name__)

NODE_CHECKS = Counter(
    "berth_binder_node_checks_total",
    "Checks that a node exists before a binding, by how they were answered: cache (the node "
    "informer), get (a GET of the node), unchecked (RBAC denies reading nodes).",
    ["source"],
)


def load_api_client(kubeconfig: str | None = None, context: str | None = None, *, pool_size: int = 32) -> ApiClient:
    """An ApiClient from ``kubeconfig`` (``context`` in it), else in-cluster configuration when
    running in a pod (``KUBERNETES_SERVICE_HOST`` set), else ``$KUBECONFIG`` or ``~/.kube/config``.
    ``pool_size``: connections kept per host by its synchronous requests (the node informer's and
    the health check's; the bindings' are the transport's own)."""
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
        self.api_client = api_client
        self.limiter = limiter
        self.event_limiter = event_limiter or limiter
        self.timeout_s = timeout_s
        self.node_ttl_s = node_ttl_s
        self.instance = instance or _default_instance()
        self._clock = clock
        self._monotonic = monotonic
        self._api = KubeTransport(
            api_client, limiter=limiter, max_in_flight=workers, timeout_s=timeout_s, monotonic=monotonic
        )
        self._events = EventWriter(self._api, limiter=self.event_limiter, max_pending=max_pending_events)
        self._write_backs = KubeWriteBacks(self._api, self._events, instance=self.instance, clock=clock)
        self._check_nodes = True
        self._nodes_seen: OrderedDict[str, float] = OrderedDict()
        """Nodes that existed, by name → when we last saw them (monotonic seconds)."""
        self._use_informer = node_informer
        self._sync_timeout_s = sync_timeout_s
        self.informer: NodeInformer | None = None
        self.informer_requests = 0
        """Main-limiter tokens the node informer took (its LIST pages and WATCHes)."""

    async def _read_pod(self, namespace: str, name: str) -> Reply:
        return await self._api.send("GET", paths.pod(namespace, name))

    async def flush_events(self) -> None:
        """Wait until every event queued so far is written (or failed)."""
        await self._events.flush()

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
            labelled(NODE_CHECKS, "cache").inc()
            # The apiserver's own words for a node that is not there, so that reasons read the same.
            return Outcome.applied() if known else Outcome.conflict(f'nodes "{node}" not found')
        if not self._check_nodes:
            NODE_CHECKS.labels("unchecked").inc()
            return Outcome.applied()
        seen = self._nodes_seen.get(node)
        now = self._monotonic()
        if seen is not None and now - seen < self.node_ttl_s:
            labelled(NODE_CHECKS, "cache").inc()
            return Outcome.applied()
        NODE_CHECKS.labels("get").inc()
        reply = await self._api.send("GET", paths.node(node))
        outcome = k.classify(reply, Access("get", "nodes"))
        if reply.status == 403:
            # A safety net, not a necessity (kube-scheduler binds without it): without the right
            # to read nodes, bind as kube-scheduler does rather than fail every binding.
            self._check_nodes = False
            log.error("cannot check that nodes exist before binding; binding without the check", reason=outcome.reason)
            return Outcome.applied()
        if outcome.is_applied:
            remember(self._nodes_seen, node, now, limit=100_000)
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
            "POST", paths.pod(placement.namespace, placement.name, "binding"), k.binding_body(placement)
        )
        if reply.ok:
            self._events.write(k.scheduled_event(placement, now=self._clock(), instance=self.instance))
            await self._write_backs.after_binding(placement)
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

    # -- the other write-backs: see :mod:`.kube_writebacks` ---------------------------------------

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        preemptor: Preemptor | None = None,
        keep_if: KeepIf | None = None,
    ) -> Outcome:
        return await self._write_backs.evict(namespace, name, uid, preemptor, keep_if)

    async def nominate(self, placement: PodPlacement) -> Outcome:
        return await self._write_backs.nominate(placement)

    async def report_unschedulable(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        return await self._write_backs.report_unschedulable(namespace, name, uid, message)

    async def scale(self, namespace: str, pool: str, replicas: int) -> Outcome:
        return await self._write_backs.scale(namespace, pool, replicas)

    async def cordon(self, node: str) -> Outcome:
        return await self._write_backs.cordon(node)

    async def close(self) -> None:
        await self._events.close(self.timeout_s)
        if self.informer is not None:
            self.informer.stop()
        await self._api.close()
        self.api_client.close()
