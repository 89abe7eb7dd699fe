"""Pure translation between the binder's port and the Kubernetes API: request bodies in, outcomes out.

No I/O here: :mod:`.kube_backend` sends what these functions build and hands the answers back to
them. An answer is a :class:`Reply` (status, decoded body, raw text), made from a response or an
``ApiException`` alike; status 0 stands for "no answer" (timeout, connection refused/reset).

HTTP status → outcome (:func:`classify`): 2xx applied; 404 conflict (the object is gone); 409
conflict (precondition failed, already assigned, modified); 429, 5xx and no answer retryable (no
connection at all — the apiserver restarting — is marked ``no_answer``, which the binder waits
out for longer than its attempt budget);
401/403/422/400 and any other 4xx permanent, with a reason that says what to fix (for 403, the
RBAC rule the binder's account lacks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from berth.schemas import PodPlacement

from berth.kube.manifests import ANNOTATION_GPU_DEVICES

from .ports import ANNOTATION_GPU_MILLI, Outcome

REPORTING_CONTROLLER = "berth"
"""``reportingController`` of the events the binder writes (kube-scheduler writes its profile's
scheduler name there; ours is one controller whatever the profile)."""

EVENT_NOTE_LIMIT = 1024
"""events.k8s.io/v1 rejects a ``note`` longer than this many bytes."""

AGENTPOOL_GROUP, AGENTPOOL_VERSION, AGENTPOOL_PLURAL = "berth.io", "v1alpha1", "agentpools"


@dataclass(frozen=True)
class Reply:
    """One API answer. ``body`` is the decoded JSON object (None if the answer was not JSON);
    ``text`` the raw answer, or for status 0 what went wrong on the way."""

    status: int
    body: Mapping[str, Any] | None = None
    text: str = ""
    retry_after: str | None = None
    unreachable: bool = False
    """(status 0) no connection could be made or kept — refused, reset, cut — as opposed to a
    request that timed out on a server that accepted it."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The server's ``Status.message`` if any, else a short form of the text."""
        if self.body and isinstance(self.body.get("message"), str) and self.body["message"]:
            return self.body["message"]
        if self.status == 0:
            return self.text or "no answer"
        text = self.text.strip()
        return f"HTTP {self.status}: {text[:200]}" if text else f"HTTP {self.status}"


def reply_of(status: int, data: bytes | str | None, headers: Mapping[str, str] | None = None) -> Reply:
    """A :class:`Reply` from a status and a raw body (as an ``ApiException`` or a response has them)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else (data or "")
    body: Mapping[str, Any] | None = None
    if text:
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        body = decoded if isinstance(decoded, dict) else None
    retry_after = None
    if headers:
        retry_after = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    return Reply(status, body, text, retry_after)


def reply_of_exception(exc: Any) -> Reply:
    """A :class:`Reply` from the official client's ``ApiException`` (``status``, ``body``, ``headers``)."""
    return reply_of(int(exc.status or 0), exc.body, exc.headers)


@dataclass(frozen=True)
class Access:
    """What a request needs from RBAC, to say what is missing when the answer is 403."""

    verb: str
    resource: str
    group: str = ""

    def rule(self) -> str:
        return f'verb "{self.verb}" on resource "{self.resource}" in apiGroups ["{self.group}"]'


def classify(reply: Reply, access: Access) -> Outcome:
    """The general mapping (module docstring); operations refine it where the port says so."""
    message = reply.message
    if reply.ok:
        return Outcome.applied()
    if reply.status == 0:
        if reply.unreachable:
            return Outcome.unanswered(f"kube-apiserver did not answer: {message}")
        return Outcome.retryable(f"kube-apiserver did not answer: {message}")
    if reply.status in (404, 409):
        return Outcome.conflict(message)
    if reply.status == 429:
        wait = f" (Retry-After: {reply.retry_after} s)" if reply.retry_after else ""
        return Outcome.retryable(f"{message}{wait}")
    if reply.status >= 500:
        return Outcome.retryable(message)
    if reply.status == 401:
        return Outcome.permanent(
            f"{message}: the binder's credentials were rejected; check --kubeconfig/"
            "--context or the ServiceAccount token"
        )
    if reply.status == 403:
        return Outcome.permanent(
            f"{message}: grant the binder's account {access.rule()} (the binder "
            "ClusterRole in deploy/helm/berth/templates/rbac.yaml has it)"
        )
    if reply.status == 422:
        return Outcome.permanent(f"the API rejected the request as invalid: {message}")
    return Outcome.permanent(message)


# -- pods -----------------------------------------------------------------------------------------


def binding_body(placement: PodPlacement) -> dict[str, Any]:
    """``pods/{name}/binding`` with the pod UID as precondition; the annotations are copied onto
    the pod by the apiserver (the chosen devices, and the share of a fractional pod)."""
    annotations: dict[str, str] = {}
    if placement.gpu_devices:
        annotations[ANNOTATION_GPU_DEVICES] = ",".join(str(d) for d in placement.gpu_devices)
    if placement.gpu_milli is not None:
        annotations[ANNOTATION_GPU_MILLI] = str(placement.gpu_milli)
    metadata: dict[str, Any] = {"name": placement.name, "namespace": placement.namespace, "uid": placement.pod_uid}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": placement.node},
    }


def _pod_facts(pod: Mapping[str, Any]) -> tuple[str | None, str | None, bool]:
    metadata = pod.get("metadata") or {}
    return metadata.get("uid"), (pod.get("spec") or {}).get("nodeName"), bool(metadata.get("deletionTimestamp"))


def uid_mismatch(expected: str, actual: str | None) -> Outcome:
    return Outcome.conflict(f"UID in precondition: {expected}, UID in object meta: {actual}")


def bindable(pod: Mapping[str, Any], placement: PodPlacement) -> Outcome:
    """Would binding ``placement`` be applied, given the pod as read now? (``check_bind``'s
    contract): applied "already bound" when it is bound to that node; applied when unbound;
    conflict when re-created (another UID), being deleted, or bound to another node — like
    kube-scheduler, which never schedules a pod that already has a node or is terminating."""
    uid, node, deleting = _pod_facts(pod)
    if uid != placement.pod_uid:
        return uid_mismatch(placement.pod_uid, uid)
    if node and node != placement.node:
        return Outcome.conflict(f"pod {placement.namespace}/{placement.name} is already assigned to node {node!r}")
    if node == placement.node:
        return Outcome.applied("already bound")
    if deleting:
        return Outcome.conflict(f"pod {placement.namespace}/{placement.name} is being deleted")
    return Outcome.applied()


def bind_conflict(pod: Mapping[str, Any] | None, placement: PodPlacement, server: Outcome) -> Outcome:
    """A binding answered 409: tell a re-application of our own binding (applied "already
    bound") from a real conflict, given the pod read back (None: it is gone now)."""
    if pod is None:
        return Outcome.conflict(f'pods "{placement.name}" not found')
    current = bindable(pod, placement)
    if current.is_applied and current.reason != "already bound":
        # Unbound with our UID, yet the server refused: something raced us; trying again is right.
        return Outcome.retryable(f"{server.reason} (the pod is unbound now)")
    return current


def eviction_body(namespace: str, name: str, uid: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


def eviction_outcome(reply: Reply) -> Outcome:
    """404: already gone (applied); 409: another pod of that name (conflict); 429: a disruption
    budget forbids it now (retryable, as a refusal: the budget frees up as other pods become
    ready, and when it does not within the attempt budget the binder reports a conflict)."""
    if reply.status == 404:
        return Outcome.applied("already gone")
    if reply.status == 429:
        return Outcome.refused_for_now(f"eviction refused for now: {reply.message}")
    return classify(reply, Access("create", "pods/eviction"))


def nominate_patch(placement: PodPlacement) -> dict[str, Any]:
    """pods/status strategic-merge patch: ``status.nominatedNodeName``. ``metadata.uid`` acts as
    a precondition: uid is immutable, so a re-created pod answers 422 on that field."""
    return {"metadata": {"uid": placement.pod_uid}, "status": {"nominatedNodeName": placement.node}}


def uid_rejected(reply: Reply) -> bool:
    """A 422 whose only complaint is ``metadata.uid`` being changed: the pod was re-created."""
    if reply.status != 422 or not reply.body:
        return False
    causes = (reply.body.get("details") or {}).get("causes") or []
    fields = {c.get("field") for c in causes if isinstance(c, dict)}
    return bool(fields) and fields <= {"metadata.uid"}


def nominate_outcome(reply: Reply, placement: PodPlacement) -> Outcome:
    if uid_rejected(reply):
        return Outcome.conflict(
            f"UID in precondition: {placement.pod_uid} is not the pod's: "
            f"{placement.namespace}/{placement.name} was re-created"
        )
    return classify(reply, Access("patch", "pods/status"))


# -- unschedulable pods ---------------------------------------------------------------------------


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled":
            return condition
    return None


def already_reported(pod: Mapping[str, Any], message: str) -> bool:
    """The pod already says PodScheduled=False/Unschedulable with exactly this message."""
    condition = scheduled_condition(pod)
    return (
        condition is not None
        and condition.get("status") == "False"
        and condition.get("reason") == "Unschedulable"
        and condition.get("message") == message
    )


def unschedulable_patch(pod: Mapping[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """pods/status strategic-merge patch setting PodScheduled=False, reason Unschedulable, as
    kube-scheduler does: ``lastTransitionTime`` moves only when the status changes, and
    ``metadata.resourceVersion`` makes it apply to the pod exactly as it was read (409 otherwise),
    so a pod bound meanwhile is never marked unschedulable."""
    previous = scheduled_condition(pod)
    changed = previous is None or previous.get("status") != "False"
    transition = _rfc3339(now) if changed or not previous.get("lastTransitionTime") else previous["lastTransitionTime"]
    metadata = pod.get("metadata") or {}
    return {
        "metadata": {"uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": transition,
                }
            ]
        },
    }


@dataclass(frozen=True)
class ReportedCondition:
    """Where a pod's ``PodScheduled=False`` condition is, as the answer to our last status patch
    showed it: the pod's UID, the condition's index in ``status.conditions``, its
    ``lastTransitionTime`` (kept when only the message changes, as kube-scheduler keeps it) and
    its message."""

    uid: str
    index: int
    transition: str
    message: str = ""


def reported_condition(pod: Mapping[str, Any]) -> ReportedCondition | None:
    """The pod's PodScheduled=False condition as a :class:`ReportedCondition`, if it has one."""
    uid = (pod.get("metadata") or {}).get("uid")
    for index, condition in enumerate((pod.get("status") or {}).get("conditions") or ()):
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled":
            if condition.get("status") == "False" and uid and condition.get("lastTransitionTime"):
                return ReportedCondition(uid, index, condition["lastTransitionTime"], condition.get("message") or "")
            return None
    return None


def unschedulable_json_patch(
    uid: str | None, message: str, now: datetime, known: ReportedCondition | None
) -> list[dict[str, Any]]:
    """A pods/status JSON patch (RFC 6902) setting PodScheduled=False, reason Unschedulable, with no
    read before it: its ``test`` operations are the preconditions, and the apiserver refuses the
    whole patch (422) when one fails.

    - ``uid`` (else ``known.uid``): the pod was not re-created;
    - ``/spec/nodeName`` is null: the pod is not bound (a binding that lands first wins);
    - without ``known``: the pod has no conditions at all (a pending pod nobody reported yet), and
      the condition is added with ``lastTransitionTime`` now;
    - with ``known``: the condition at ``known.index`` is still PodScheduled=False, and is replaced
      keeping its ``lastTransitionTime`` (the status did not change, only the message).
    """
    expected_uid = uid or (known.uid if known else None)
    ops: list[dict[str, Any]] = []
    if expected_uid:
        ops.append({"op": "test", "path": "/metadata/uid", "value": expected_uid})
    ops.append({"op": "test", "path": "/spec/nodeName", "value": None})
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": known.transition if known else _rfc3339(now),
    }
    if known is None:
        ops += [
            {"op": "test", "path": "/status/conditions", "value": None},
            {"op": "add", "path": "/status/conditions", "value": [condition]},
        ]
    else:
        path = f"/status/conditions/{known.index}"
        ops += [
            {"op": "test", "path": f"{path}/type", "value": "PodScheduled"},
            {"op": "test", "path": f"{path}/status", "value": "False"},
            {"op": "replace", "path": path, "value": condition},
        ]
    return ops


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- events ---------------------------------------------------------------------------------------


def _truncate(text: str, limit: int) -> str:
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode(errors="ignore") + "..."


def pod_event(
    *,
    namespace: str,
    name: str,
    uid: str | None,
    reason: str,
    note: str,
    warning: bool,
    action: str,
    now: datetime,
    instance: str,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about a pod, named ``<pod>.<nanoseconds in hex>`` as client-go
    names them (readable in ``kubectl describe pod`` and ``kubectl get events``)."""
    regarding: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name}
    if uid:
        regarding["uid"] = uid
    nanos = int(now.timestamp()) * 1_000_000_000 + now.microsecond * 1000
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{nanos:x}", "namespace": namespace},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": action,
        "reason": reason,
        "regarding": regarding,
        "note": _truncate(note, EVENT_NOTE_LIMIT),
        "type": "Warning" if warning else "Normal",
    }


def scheduled_event(placement: PodPlacement, *, now: datetime, instance: str) -> dict[str, Any]:
    """kube-scheduler's ``Scheduled``: "Successfully assigned ns/pod to node"."""
    return pod_event(
        namespace=placement.namespace,
        name=placement.name,
        uid=placement.pod_uid,
        reason="Scheduled",
        note=f"Successfully assigned {placement.namespace}/{placement.name} to {placement.node}",
        warning=False,
        action="Binding",
        now=now,
        instance=instance,
    )


PREEMPTION_REASON = "PreemptionByScheduler"


def victim_condition_patch(uid: str | None, now: datetime) -> dict[str, Any]:
    """pods/status strategic-merge patch: the ``DisruptionTarget`` condition kube-scheduler v1.34
    puts on a preemption victim before it goes (reason ``PreemptionByScheduler``, message
    ``<profile>: preempting to accommodate a higher priority pod``); ``metadata.uid`` is the
    precondition. (The Eviction API then replaces the reason with its own, as the apiserver
    does for every eviction.)"""
    patch: dict[str, Any] = {
        "status": {
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": PREEMPTION_REASON,
                    "message": f"{REPORTING_CONTROLLER}: preempting to accommodate a higher priority pod",
                    "lastTransitionTime": _rfc3339(now),
                }
            ]
        }
    }
    if uid:
        patch["metadata"] = {"uid": uid}
    return patch


def preempted_event(
    namespace: str, name: str, uid: str | None, preemptor_uid: str, node: str, *, now: datetime, instance: str
) -> dict[str, Any]:
    """kube-scheduler's ``Preempted`` event on a victim: "Preempted by pod <uid> on node <node>"."""
    return pod_event(
        namespace=namespace,
        name=name,
        uid=uid,
        reason="Preempted",
        note=f"Preempted by pod {preemptor_uid} on node {node}",
        warning=False,
        action="Preempting",
        now=now,
        instance=instance,
    )


def clear_nomination_patch(uid: str) -> dict[str, Any]:
    """pods/status patch removing ``nominatedNodeName`` of a pod bound elsewhere (uid precondition)."""
    return {"metadata": {"uid": uid}, "status": {"nominatedNodeName": None}}


def failed_scheduling_event(
    namespace: str, name: str, uid: str | None, message: str, *, now: datetime, instance: str
) -> dict[str, Any]:
    """kube-scheduler's ``FailedScheduling`` Warning with the full "0/N nodes are available: ..." text."""
    return pod_event(
        namespace=namespace,
        name=name,
        uid=uid,
        reason="FailedScheduling",
        note=message,
        warning=True,
        action="Scheduling",
        now=now,
        instance=instance,
    )


# -- pools ----------------------------------------------------------------------------------------

SCALE_PATCH_TYPE = "application/merge-patch+json"
"""Custom resources accept no strategic-merge patch; a merge patch works on every scale subresource."""


def scale_patch(replicas: int) -> dict[str, Any]:
    return {"spec": {"replicas": replicas}}


__all__ = [
    "ANNOTATION_GPU_MILLI",
    "Access",
    "Reply",
    "already_reported",
    "bind_conflict",
    "bindable",
    "binding_body",
    "classify",
    "eviction_body",
    "eviction_outcome",
    "failed_scheduling_event",
    "nominate_outcome",
    "nominate_patch",
    "pod_event",
    "ReportedCondition",
    "reply_of",
    "reply_of_exception",
    "reported_condition",
    "scale_patch",
    "scheduled_condition",
    "scheduled_event",
    "uid_mismatch",
    "uid_rejected",
    "unschedulable_json_patch",
    "unschedulable_patch",
]
