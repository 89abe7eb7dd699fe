"""What the binder writes to Kubernetes besides bindings, for :class:`~.kube_backend.KubeBackend`.

Requests, per operation (each takes a token of the binder's limiter, through the transport):

- ``evict``: ``POST pods/{name}/eviction`` (policy/v1, UID precondition); with the
  descheduler's volume rules (:class:`~.ports.KeepIf`) a ``GET pods/{name}`` first. A preemption
  victim is first marked as kube-scheduler marks it: the ``DisruptionTarget`` condition and a
  ``Preempted`` event, once per victim however often the eviction is retried.
- ``nominate``: ``PATCH pods/{name}/status`` ``nominatedNodeName``; a nomination the pod did not
  bind to is cleared when it binds elsewhere (:meth:`KubeWriteBacks.after_binding`).
- ``report_unschedulable`` (its requests are deferrable: they wait while bindings are queued for
  a token): one ``PATCH pods/{name}/status`` (JSON patch) whose ``test`` operations are the
  preconditions — the pod's UID, no ``spec.nodeName`` (a pod bound meanwhile is never marked
  unschedulable), and its conditions as this backend last left them (none, for a pod it never
  reported) — and a ``FailedScheduling`` event. When a test fails (422) or the pod is new to this
  backend after a restart: ``GET pods/{name}`` and a strategic-merge ``PATCH`` at that
  resourceVersion (re-read and retried on 409), which also notices "already reported".
- ``scale``: the scale subresource of AgentPool (berth.io/v1alpha1), else Deployment, else
  StatefulSet (the kind found is remembered per pool).
- ``cordon``: ``PATCH nodes/{name}`` ``spec.unschedulable``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from berth.schemas import PodPlacement

from . import kube_outcomes as k
from . import kube_paths as paths
from .kube_events import EventWriter
from .kube_outcomes import Access, Reply
from .kube_transport import KubeTransport
from .ports import KeepIf, Outcome, Preemptor

V = TypeVar("V")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
STATUS_PATCH_ATTEMPTS = 3
"""A status patch at a stale resourceVersion is read again and retried this often (pods change
often while pending: other controllers patch them too)."""

_SCALE_ACCESS = {
    "AgentPool": Access("patch", "agentpools/scale", k.AGENTPOOL_GROUP),
    "Deployment": Access("patch", "deployments/scale", "apps"),
    "StatefulSet": Access("patch", "statefulsets/scale", "apps"),
}

_SCALABLE = {
    "AgentPool": (k.AGENTPOOL_GROUP, k.AGENTPOOL_VERSION, k.AGENTPOOL_PLURAL),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
}
"""Kind → the API group, version and resource whose ``scale`` subresource a pool scales through."""


def remember(table: OrderedDict[str, V], key: str, value: V, *, limit: int) -> None:
    """Set ``key`` as ``table``'s most recent entry, forgetting the oldest beyond ``limit``."""
    table[key] = value
    table.move_to_end(key)
    if len(table) > limit:
        table.popitem(last=False)


class KubeWriteBacks:
    """Evictions, nominations, unschedulable reports, pool scaling and cordons (see the module
    docstring), sent through ``transport``; events through ``events``. Keeps what
    it last wrote where that saves requests (reports, nominations, marked victims, pool kinds),
    each table bounded."""

    def __init__(
        self,
        transport: KubeTransport,
        events: EventWriter,
        *,
        instance: str,
        clock: Callable[[], datetime],
    ) -> None:
        self._api = transport
        self._events = events
        self._instance = instance
        self._clock = clock
        self._pool_kinds: OrderedDict[str, str] = OrderedDict()
        """``namespace/pool`` → the kind whose scale subresource worked last time."""
        self._reported: OrderedDict[str, k.ReportedCondition] = OrderedDict()
        """``namespace/name`` → the PodScheduled=False condition our last status patch left on the pod."""
        self._nominated: OrderedDict[str, str] = OrderedDict()
        """pod UID → the node we nominated it for (cleared once it binds there or elsewhere)."""
        self._victims_marked: OrderedDict[str, str] = OrderedDict()
        """victim ``namespace/name/uid`` → its preemptor's UID: marked once, however often the
        eviction is retried (a disruption budget may hold it back)."""

    async def after_binding(self, placement: PodPlacement) -> None:
        """A binding of ``placement`` was created: its unschedulable report is history, and a
        nomination for another node (a preemption that did not happen) is cleared on the pod."""
        self._reported.pop(f"{placement.namespace}/{placement.name}", None)
        if self._nominated.pop(placement.pod_uid, placement.node) != placement.node:
            await self._api.send(
                "PATCH",
                paths.pod(placement.namespace, placement.name, "status"),
                k.clear_nomination_patch(placement.pod_uid),
                deferrable=True,
                content_type=STRATEGIC_PATCH,
            )

    # -- evictions and nominations ----------------------------------------------------------------

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        preemptor: Preemptor | None = None,
        keep_if: KeepIf | None = None,
    ) -> Outcome:
        if keep_if is not None and (keep_if.local_storage or keep_if.pvc):
            read = await self._api.send("GET", paths.pod(namespace, name))
            if read.status == 404:
                return Outcome.applied("already gone")
            if not read.ok or read.body is None:
                return k.classify(read, Access("get", "pods"))
            stays = keep_if.reason((read.body.get("spec") or {}).get("volumes") or [])
            if stays is not None:
                return Outcome.conflict(stays)
        if preemptor is not None and not await self._mark_victim(namespace, name, uid, preemptor):
            return Outcome.conflict(f"pod {namespace}/{name} was re-created (UID {uid} is gone)")
        reply = await self._api.send(
            "POST", paths.pod(namespace, name, "eviction"), k.eviction_body(namespace, name, uid)
        )
        return k.eviction_outcome(reply)

    async def _mark_victim(self, namespace: str, name: str, uid: str | None, preemptor: Preemptor) -> bool:
        """Mark a preemption victim as kube-scheduler does before it goes: the DisruptionTarget
        condition, then a ``Preempted`` event. False when the pod was re-created (another UID); a
        pod already gone is left to the eviction, which says so."""
        key = f"{namespace}/{name}/{uid}"
        if self._victims_marked.get(key) == preemptor.uid:
            return True
        marked = await self._api.send(
            "PATCH",
            paths.pod(namespace, name, "status"),
            k.victim_condition_patch(uid, self._clock()),
            content_type=STRATEGIC_PATCH,
        )
        if k.uid_rejected(marked):
            return False
        if marked.ok:
            remember(self._victims_marked, key, preemptor.uid, limit=10_000)
            self._events.write(
                k.preempted_event(
                    namespace, name, uid, preemptor.uid, preemptor.node, now=self._clock(), instance=self._instance
                )
            )
        return True

    async def nominate(self, placement: PodPlacement) -> Outcome:
        reply = await self._api.send(
            "PATCH",
            paths.pod(placement.namespace, placement.name, "status"),
            k.nominate_patch(placement),
            content_type=STRATEGIC_PATCH,
        )
        outcome = k.nominate_outcome(reply, placement)
        if outcome.is_applied:
            remember(self._nominated, placement.pod_uid, placement.node, limit=100_000)
        return outcome

    # -- unschedulable reports --------------------------------------------------------------------

    async def report_unschedulable(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        key = f"{namespace}/{name}"
        known = self._reported.get(key)
        if known is not None and known.message == message and uid in (None, known.uid):
            return Outcome.applied("already reported")  # by us, and nothing changed it since as far as we know
        now = self._clock()
        patch = k.unschedulable_json_patch(uid, message, now, known)
        patched = await self._api.send(
            "PATCH", paths.pod(namespace, name, "status"), patch, deferrable=True, content_type=JSON_PATCH
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
        self._events.write(
            k.failed_scheduling_event(
                namespace, name, (pod.get("metadata") or {}).get("uid"), message, now=now, instance=self._instance
            )
        )
        return Outcome.applied()

    def _remember_report(self, key: str, pod: Mapping[str, Any]) -> None:
        condition = k.reported_condition(pod)
        if condition is None:
            self._reported.pop(key, None)
            return
        remember(self._reported, key, condition, limit=100_000)

    async def _report_after_reading(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        """The careful way: read the pod, then patch at that resourceVersion."""
        for _ in range(STATUS_PATCH_ATTEMPTS):
            read = await self._api.send("GET", paths.pod(namespace, name), deferrable=True)
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
                paths.pod(namespace, name, "status"),
                k.unschedulable_patch(pod, message, now),
                deferrable=True,
                content_type=STRATEGIC_PATCH,
            )
            if patched.status == 409:
                continue  # the pod changed since we read it: read again
            if not patched.ok:
                return k.classify(patched, Access("patch", "pods/status"))
            return await self._reported_on(f"{namespace}/{name}", patched, message, now)
        return Outcome.retryable(f"pod {namespace}/{name} kept changing while its status was patched")

    # -- pools and nodes --------------------------------------------------------------------------

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
                remember(self._pool_kinds, key, kind, limit=10_000)
            return outcome
        self._pool_kinds.pop(key, None)
        return Outcome.conflict(f'no AgentPool, Deployment or StatefulSet "{key}"')

    async def _scale_one(self, kind: str, namespace: str, pool: str, body: dict[str, Any]) -> Reply:
        group, version, plural = _SCALABLE[kind]
        path = paths.scale(group, version, plural, namespace, pool)
        return await self._api.send("PATCH", path, body, content_type=MERGE_PATCH)

    async def cordon(self, node: str) -> Outcome:
        reply = await self._api.send(
            "PATCH", paths.node(node), {"spec": {"unschedulable": True}}, content_type=MERGE_PATCH
        )
        return k.classify(reply, Access("patch", "nodes"))
