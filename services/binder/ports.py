"""The binder's port to a cluster: a few operations, each answering with an :class:`Outcome`.

Backends translate their API's answers into outcomes and never raise for an answer of the API
(an exception from a backend is treated as a retryable error and logged as a bug). They do not
retry or wait: the binder does that, the same way for every backend. Rate limiting is the
binder's too, one token per operation — except for a backend whose ``meters_requests`` is True:
it makes several API requests per operation (a binding and its event, a read after a 409) and
takes one token per request itself, from the limiter it was built with.

Shaped after the Kubernetes API, so that a Kubernetes backend is a thin translation:

========================  ===========================================================
``bind``                  ``POST pods/{name}/binding`` with the pod UID as precondition and
                          the chosen devices as the Binding's annotations (copied onto the pod)
``evict``                 ``POST pods/{name}/eviction`` (the Eviction API, honouring PDBs),
                          UID precondition
``scale``                 ``PATCH .../{pool}/scale`` (the scale subresource) ``spec.replicas``
``cordon``                ``PATCH nodes/{name}`` ``spec.unschedulable: true``
``nominate``              ``PATCH pods/{name}/status`` ``status.nominatedNodeName``
                          (before the victims of a preemption are evicted)
``report_unschedulable``  ``PATCH pods/{name}/status`` condition ``PodScheduled=False``
                          (reason ``Unschedulable``) and a ``FailedScheduling`` event
========================  ===========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from berth.schemas import PodPlacement

ANNOTATION_GPU_MILLI = "berth.io/gpu-milli"
"""Binding annotation: the share of the single device a fractional pod was given (milli-GPU)."""


class OutcomeKind(str, Enum):  # noqa: UP042 -- StrEnum would change str() and format() of the members
    APPLIED = "applied"
    """The cluster is now as the command wants it (also when it already was)."""
    CONFLICT = "conflict"
    """The cluster changed under the command (object gone, re-created, bound elsewhere); applying
    it again will not help — the decision must be made again."""
    RETRYABLE = "retryable"
    """A transient problem (timeout, connection, throttling, server error): try again later."""
    PERMANENT = "permanent"
    """The request can never succeed as it is (invalid, forbidden): do not retry."""


@dataclass(frozen=True)
class Outcome:
    """One operation's answer; ``reason`` says why in words a person can act on."""

    kind: OutcomeKind
    reason: str = ""
    no_answer: bool = False
    """(RETRYABLE only) the cluster did not answer at all — connection refused or cut, as while
    the apiserver restarts — rather than answering with an error. The binder waits longer for it
    than its attempt budget allows (:class:`~.applier.RetryPolicy`)."""
    refused: bool = False
    """(RETRYABLE only) the cluster's own policy refuses it for now (a disruption budget forbids
    an eviction): retried within the attempt budget, then reported as a conflict — the state of
    the cluster decided, nothing is broken — instead of failing to the dead-letter topic."""

    @classmethod
    def applied(cls, reason: str = "") -> Outcome:
        return cls(OutcomeKind.APPLIED, reason)

    @classmethod
    def unanswered(cls, reason: str) -> Outcome:
        """Retryable, and the cluster could not be reached (see :attr:`no_answer`)."""
        return cls(OutcomeKind.RETRYABLE, reason, no_answer=True)

    @classmethod
    def refused_for_now(cls, reason: str) -> Outcome:
        """Retryable, and refused by the cluster's policy (see :attr:`refused`)."""
        return cls(OutcomeKind.RETRYABLE, reason, refused=True)

    @classmethod
    def conflict(cls, reason: str) -> Outcome:
        return cls(OutcomeKind.CONFLICT, reason)

    @classmethod
    def retryable(cls, reason: str) -> Outcome:
        return cls(OutcomeKind.RETRYABLE, reason)

    @classmethod
    def permanent(cls, reason: str) -> Outcome:
        return cls(OutcomeKind.PERMANENT, reason)

    @property
    def is_applied(self) -> bool:
        return self.kind is OutcomeKind.APPLIED


@dataclass(frozen=True)
class Preemptor:
    """The pod a victim makes room for, and the node it was nominated for."""

    uid: str
    node: str


@dataclass(frozen=True)
class KeepIf:
    """Volumes that make a pod stay instead of being evicted (a descheduler policy's
    DefaultEvictor: ``evictLocalStoragePods: false``, ``ignorePvcPods: true``)."""

    local_storage: bool = False
    """An ``emptyDir`` or ``hostPath`` volume."""
    pvc: bool = False
    """A ``persistentVolumeClaim`` volume."""

    def reason(self, volumes: list[dict[str, object]]) -> str | None:
        """Why a pod with these ``spec.volumes`` stays, or None when it may go."""
        if self.local_storage and any("emptyDir" in v or "hostPath" in v for v in volumes):
            return "the pod has local storage (emptyDir or hostPath) and the policy does not evict such pods"
        if self.pvc and any("persistentVolumeClaim" in v for v in volumes):
            return "the pod mounts a PersistentVolumeClaim and the policy ignores such pods"
        return None


class ClusterBackend(Protocol):
    """Where commands take effect. Every operation must be idempotent in the sense below, because
    the binder re-applies commands after a crash (at-least-once delivery)."""

    meters_requests: bool
    """True: the backend takes a rate-limit token per API request itself (see the module docstring)."""

    async def bind(self, placement: PodPlacement) -> Outcome:
        """Bind pod ``placement.namespace/name`` to ``placement.node`` if its UID is
        ``placement.pod_uid``, recording ``gpu_devices`` (and the share ``gpu_milli``) on the pod.

        applied: the pod is bound to that node, including when it already was before this call;
        conflict: the pod is gone, has another UID (re-created), is bound to another node, or the
        node is gone; retryable / permanent: as in :class:`OutcomeKind`.
        """
        ...

    async def check_bind(self, placement: PodPlacement) -> Outcome:
        """Read-only: would :meth:`bind` be applied now? applied when the pod exists with that
        UID and is unbound or already bound to ``placement.node``; conflict otherwise. Used to
        refuse a gang before binding any member when one of them cannot be bound."""
        ...

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        preemptor: Preemptor | None = None,
        keep_if: KeepIf | None = None,
    ) -> Outcome:
        """Evict the pod (graceful, respecting disruption budgets). applied: evicted, or already
        gone; conflict: a pod of that name exists with another UID, or it has volumes ``keep_if``
        names (read from the cluster before the eviction); retryable: a disruption budget forbids
        it right now (HTTP 429: :meth:`Outcome.refused_for_now`), or a transient error. With
        ``preemptor`` the pod is a preemption victim: before the eviction it is marked as
        kube-scheduler marks its victims (where the cluster shows such marks)."""
        ...

    async def scale(self, namespace: str, pool: str, replicas: int) -> Outcome:
        """Set the pool's desired replica count. applied: set (setting the same value again is
        applied too); conflict: no such pool."""
        ...

    async def cordon(self, node: str) -> Outcome:
        """Mark the node unschedulable. applied: cordoned (again, if it already was); conflict:
        no such node."""
        ...

    async def nominate(self, placement: PodPlacement) -> Outcome:
        """Say where the pod will run once its preemption victims are gone
        (``status.nominatedNodeName``), if its UID is ``placement.pod_uid``. Called before the
        victims are evicted. applied: recorded (again, if it already was); conflict: the pod is
        gone or has another UID."""
        ...

    async def report_unschedulable(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        """Tell the pod's owner why it is pending: condition ``PodScheduled=False``, reason
        ``Unschedulable``, ``message`` (kube-scheduler's "0/N nodes are available: ..." text), and
        one ``FailedScheduling`` Warning event — none when the pod already carries that exact
        condition, so re-applying after a crash adds nothing. ``uid`` None: whatever pod has the
        name. applied: reported, already reported, or the pod is bound by now (nothing to report);
        conflict: the pod is gone or has another UID."""
        ...

    # Optional: ``async def start(self) -> None`` — when a backend has it, the service awaits it
    # once before the first command (the Kubernetes backend starts its node informer there).

    async def close(self) -> None:
        """Release connections. Called once, when the binder stops."""
        ...
