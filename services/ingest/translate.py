"""Kubernetes API objects → contract events: what ingest publishes for a watch event or a relist.

Pure: no I/O and no clock (``observed_at`` is an argument). Objects are the API's JSON as dicts
(camelCase, exactly what ``kubectl get -o json`` prints), converted by the same functions that
read manifests (:mod:`berth.kube.manifests`), so a live object and its manifest mean the same.

The model. For every object it tracks, ingest remembers the last *observation* it published
(:class:`PodObserved`, :class:`NodeObserved` or :class:`PolicyObserved`), keyed by the object's
:func:`identity` — the ``known`` mapping. Each watch event or relist becomes the :class:`Step`\\ s
that bring what downstream believes in line with what the apiserver says:

- an object that should be visible (:func:`observe` returns an event) and whose content differs
  from what was published → its observation (identical content, e.g. a status-only change
  Berth does not model, publishes nothing);
- an object that should not be visible — a pending pod of another scheduler, a finished pod,
  an object the converter refuses — or that is gone → its removal, but only if something was
  published for it (a removal of an object downstream never saw would be noise).

Which pods are visible: those of Berth's schedulers (``spec.schedulerName``, pending or bound)
and every bound pod (``spec.nodeName`` set) of other schedulers, because they hold capacity.
Succeeded and Failed pods hold nothing and are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from berth.schemas.cluster import NodeObserved, NodeRemoved, PodDeleted, PodObserved
from berth.schemas.policy import AgentPoolInfo, PolicyObserved, PolicyRemoved, PriorityClassInfo

from berth.kube.capacity import SPOT_LABELS, SpotLabel
from berth.kube.manifests import (
    ManifestError,
    agent_pool_from_manifest,
    limit_range_from_manifest,
    namespace_from_manifest,
    node_from_manifest,
    pdb_from_manifest,
    pod_from_manifest,
    pod_group_from_manifest,
    priority_class_from_manifest,
    resource_quota_from_manifest,
)

Observation = PodObserved | NodeObserved | PolicyObserved
Removal = PodDeleted | NodeRemoved | PolicyRemoved

DEFAULT_SCHEDULER_NAMES = frozenset({"berth"})
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})

#: Watched resource (its API plural) → the policy kind it publishes. Pods and nodes have topics
#: of their own and are not in this table.
POLICY_KINDS: Mapping[str, str] = {
    "podgroups": "PodGroup",
    "priorityclasses": "PriorityClass",
    "resourcequotas": "ResourceQuota",
    "limitranges": "LimitRange",
    "poddisruptionbudgets": "PodDisruptionBudget",
    "agentpools": "AgentPool",
    "namespaces": "Namespace",
}
RESOURCE_OF_KIND: Mapping[str, str] = {kind: resource for resource, kind in POLICY_KINDS.items()}
RESOURCES: tuple[str, ...] = ("pods", "nodes", *POLICY_KINDS)
CLUSTER_SCOPED: frozenset[str] = frozenset({"nodes", "priorityclasses", "namespaces"})


@dataclass(frozen=True)
class Step:
    """One event to publish and what it does to ``known``: an observation replaces the entry of
    ``key``, a removal deletes it."""

    key: str
    event: Observation | Removal

    @property
    def removes(self) -> bool:
        return isinstance(self.event, (PodDeleted, NodeRemoved, PolicyRemoved))


@dataclass(frozen=True)
class Translation:
    """The steps of one watch event or relist, and the objects that could not be converted
    (``problems``: one message per object, naming it and the field; such an object counts as
    not visible). ``notes`` are the converters' warnings (fields Berth does not model)."""

    steps: tuple[Step, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def identity(resource: str, obj: Mapping[str, Any]) -> str:
    """The key ``known`` uses for an API object: a pod's UID (a pod recreated under the same name
    is another pod), a node's name, ``Kind/namespace/name`` for policies (their partition key)."""
    meta = _metadata(obj)
    if resource == "pods":
        return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    if resource == "nodes":
        return str(meta.get("name", ""))
    kind = POLICY_KINDS[resource]
    namespace = "" if resource in CLUSTER_SCOPED else str(meta.get("namespace") or "")
    return f"{kind}/{namespace}/{meta.get('name', '')}"


def event_identity(event: Observation | Removal) -> str:
    """The ``known`` key an event speaks of (for events read back from Kafka)."""
    if isinstance(event, PodObserved):
        return event.pod.uid
    if isinstance(event, PodDeleted):
        return event.uid
    if isinstance(event, NodeObserved):
        return event.node.name
    if isinstance(event, NodeRemoved):
        return event.name
    return event.partition_key


def event_scope(event: Observation | Removal) -> tuple[str, str]:
    """``(resource, namespace)`` of an event: which watcher owns the object it speaks of
    (namespace ``""`` for cluster-scoped resources)."""
    if isinstance(event, PodObserved):
        return "pods", event.pod.namespace
    if isinstance(event, PodDeleted):
        return "pods", event.namespace
    if isinstance(event, (NodeObserved, NodeRemoved)):
        return "nodes", ""
    resource = RESOURCE_OF_KIND[event.kind]
    if resource in CLUSTER_SCOPED:
        return resource, ""
    namespace = event.namespace if isinstance(event, PolicyRemoved) else getattr(event.obj, "namespace", "")
    return resource, namespace


def _admitted_priority(obj: Mapping[str, Any]) -> dict[str, PriorityClassInfo]:
    """The PriorityClass a live pod names, as the Priority admission plugin already resolved it.

    A pod from the apiserver carries ``spec.priority`` (and ``spec.preemptionPolicy``) copied from
    its class at creation; using them keeps the pod's priority what admission decided, even if
    the class changed or is deleted since (as kube-scheduler does).
    """
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    name = spec.get("priorityClassName")
    if not isinstance(name, str) or not name:
        return {}
    value = spec.get("priority")
    policy = spec.get("preemptionPolicy") or "PreemptLowerPriority"
    return {name: PriorityClassInfo(name=name, value=value if isinstance(value, int) else 0, preemption_policy=policy)}


def _pod_is_visible(obj: Mapping[str, Any], scheduler_names: frozenset[str]) -> bool:
    """Pods Berth schedules, and every bound pod (it holds capacity). A pod that still has
    scheduling gates is not schedulable yet (kube's PreEnqueue keeps it out of the queue; the
    apiserver has marked it SchedulingGated): it becomes visible, as a new pending pod, when its
    last gate is removed (gates can only be removed after creation)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    if status.get("phase") in TERMINATED_PHASES:
        return False
    if spec.get("nodeName"):
        return True
    return spec.get("schedulerName", "default-scheduler") in scheduler_names and not spec.get("schedulingGates")


def is_gated(obj: Mapping[str, Any], scheduler_names: frozenset[str]) -> bool:
    """A pending pod for one of ``scheduler_names`` held back by ``spec.schedulingGates``:
    what kube-scheduler counts as ``scheduler_pending_pods{queue="gated"}``."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    return (
        bool(spec.get("schedulingGates"))
        and not spec.get("nodeName")
        and status.get("phase") not in TERMINATED_PHASES
        and spec.get("schedulerName", "default-scheduler") in scheduler_names
    )


def observe(
    resource: str,
    obj: Mapping[str, Any],
    *,
    observed_at: datetime,
    scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES,
    notes: list[str] | None = None,
    spot_labels: Sequence[SpotLabel] = SPOT_LABELS,
) -> Observation | None:
    """The observation to publish for ``obj`` as it is now, or None if it should not be visible.

    Raises :class:`~berth.kube.manifests.ManifestError` for an object the converter refuses.
    ``notes`` collects the converters' warnings; ``spot_labels`` mark spot nodes.
    """
    sink: list[str] = notes if notes is not None else []
    version = str(_metadata(obj).get("resourceVersion") or "")
    if resource == "pods":
        if not _pod_is_visible(obj, scheduler_names):
            return None
        pod = pod_from_manifest(obj, priority_classes=_admitted_priority(obj)).pod
        return PodObserved(pod=pod, resource_version=version, observed_at=observed_at)
    if resource == "nodes":
        return NodeObserved(
            node=node_from_manifest(obj, warnings=sink, spot_labels=spot_labels),
            resource_version=version,
            observed_at=observed_at,
        )
    kind = POLICY_KINDS.get(resource)
    if kind is None:
        raise ValueError(f"unknown resource {resource!r}; ingest watches {', '.join(RESOURCES)}")
    converters: dict[str, Callable[[], tuple[str, Any]]] = {
        "PodGroup": lambda: ("pod_group", pod_group_from_manifest(obj)),
        "PriorityClass": lambda: ("priority_class", priority_class_from_manifest(obj)),
        "ResourceQuota": lambda: ("resource_quota", resource_quota_from_manifest(obj, warnings=sink)),
        "LimitRange": lambda: ("limit_range", limit_range_from_manifest(obj, warnings=sink)),
        "PodDisruptionBudget": lambda: ("pod_disruption_budget", pdb_from_manifest(obj)),
        "AgentPool": lambda: ("agent_pool", _agent_pool(obj)),
        "Namespace": lambda: ("namespace_info", namespace_from_manifest(obj)),
    }
    field, value = converters[kind]()
    return PolicyObserved(kind=kind, observed_at=observed_at, **{field: value})


def _agent_pool(obj: Mapping[str, Any]) -> AgentPoolInfo:
    pool = agent_pool_from_manifest(obj)
    return AgentPoolInfo(namespace=pool.namespace, name=pool.name, spec=dict(pool.spec))


def removal(published: Observation, *, observed_at: datetime, final: Mapping[str, Any] | None = None) -> Removal:
    """The event that withdraws ``published``. For a pod, ``final`` (its last state, e.g. the
    object of a DELETED watch event) names the node it held if it was bound since."""
    if isinstance(published, PodObserved):
        pod = published.pod
        node = pod.node_name
        if final is not None:
            spec = final.get("spec") if isinstance(final.get("spec"), Mapping) else {}
            node = spec.get("nodeName") or node
        return PodDeleted(uid=pod.uid, namespace=pod.namespace, name=pod.name, node_name=node, observed_at=observed_at)
    if isinstance(published, NodeObserved):
        return NodeRemoved(name=published.node.name, observed_at=observed_at)
    obj = published.obj
    return PolicyRemoved(
        kind=published.kind, namespace=getattr(obj, "namespace", ""), name=obj.name, observed_at=observed_at
    )


def same_content(a: Observation, b: Observation) -> bool:
    """Whether two observations say the same thing (times and resource versions aside)."""
    if isinstance(a, PodObserved) and isinstance(b, PodObserved):
        return a.pod == b.pod
    if isinstance(a, NodeObserved) and isinstance(b, NodeObserved):
        return a.node == b.node
    if isinstance(a, PolicyObserved) and isinstance(b, PolicyObserved):
        return a.kind == b.kind and a.obj == b.obj
    return False


def _reconcile(
    known: Mapping[str, Observation],
    resource: str,
    obj: Mapping[str, Any],
    *,
    gone: bool,
    observed_at: datetime,
    scheduler_names: frozenset[str],
    spot_labels: Sequence[SpotLabel],
    problems: list[str],
    notes: list[str],
) -> Step | None:
    """The step (if any) for one object: ``gone`` for a DELETED event."""
    key = identity(resource, obj)
    current: Observation | None = None
    if not gone:
        try:
            current = observe(
                resource,
                obj,
                observed_at=observed_at,
                scheduler_names=scheduler_names,
                notes=notes,
                spot_labels=spot_labels,
            )
        except ManifestError as exc:
            problems.append(str(exc))
    published = known.get(key)
    if current is None:
        if published is None:
            return None
        return Step(key, removal(published, observed_at=observed_at, final=obj))
    if published is not None and same_content(published, current):
        return None
    return Step(key, current)


def watch_steps(
    known: Mapping[str, Observation],
    resource: str,
    event_type: str,
    obj: Mapping[str, Any],
    *,
    observed_at: datetime,
    scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES,
    spot_labels: Sequence[SpotLabel] = SPOT_LABELS,
) -> Translation:
    """The steps for one watch event (``ADDED``, ``MODIFIED`` or ``DELETED``; BOOKMARK and ERROR
    are the watch loop's business and yield nothing here)."""
    if event_type not in ("ADDED", "MODIFIED", "DELETED"):
        return Translation()
    problems: list[str] = []
    notes: list[str] = []
    step = _reconcile(
        known,
        resource,
        obj,
        gone=event_type == "DELETED",
        observed_at=observed_at,
        scheduler_names=scheduler_names,
        spot_labels=spot_labels,
        problems=problems,
        notes=notes,
    )
    return Translation(steps=(step,) if step else (), problems=tuple(problems), notes=tuple(notes))


def relist_steps(
    known: Mapping[str, Observation],
    resource: str,
    objects: Iterable[Mapping[str, Any]],
    *,
    observed_at: datetime,
    scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES,
    spot_labels: Sequence[SpotLabel] = SPOT_LABELS,
) -> Translation:
    """The steps that make ``known`` match a complete list of the resource: removals of what
    disappeared (or stopped being visible) first — they free capacity — then observations of
    what is new or changed; each group in key order, so a relist publishes deterministically."""
    problems: list[str] = []
    notes: list[str] = []
    listed: set[str] = set()
    observations: list[Step] = []
    removals: list[Step] = []
    for obj in objects:
        listed.add(identity(resource, obj))
        step = _reconcile(
            known,
            resource,
            obj,
            gone=False,
            observed_at=observed_at,
            scheduler_names=scheduler_names,
            spot_labels=spot_labels,
            problems=problems,
            notes=notes,
        )
        if step is not None:
            (removals if step.removes else observations).append(step)
    for key in sorted(set(known) - listed):
        removals.append(Step(key, removal(known[key], observed_at=observed_at)))
    ordered = sorted(removals, key=lambda s: s.key) + sorted(observations, key=lambda s: s.key)
    return Translation(steps=tuple(ordered), problems=tuple(problems), notes=tuple(notes))


def remember(known: MutableMapping[str, Observation], steps: Iterable[Step]) -> None:
    """Apply steps to ``known`` (in place) as their events are published. If publishing fails,
    ``known`` no longer says what downstream has: the caller must rebuild it (ingest rereads Kafka)."""
    for step in steps:
        if step.removes:
            known.pop(step.key, None)
        else:
            known[step.key] = step.event  # type: ignore[assignment]  # the step's event is of the key's kind


def last_write_time(obj: Mapping[str, Any]) -> datetime | None:
    """When ``obj`` was last written, as far as its ``managedFields`` tell (1 s resolution);
    None if it has none. For the watch-lag gauge only: never part of an event."""
    newest: datetime | None = None
    fields = _metadata(obj).get("managedFields")
    for entry in fields if isinstance(fields, list) else ():
        stamp = entry.get("time") if isinstance(entry, Mapping) else None
        if not isinstance(stamp, str):
            continue
        try:
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            continue
        if when.tzinfo is not None and (newest is None or when > newest):
            newest = when
    return newest


def fold_published(known: MutableMapping[str, Observation], event: Observation | Removal) -> None:
    """Apply one event read back from Kafka to ``known`` (what downstream was told, in order)."""
    key = event_identity(event)
    if isinstance(event, (PodDeleted, NodeRemoved, PolicyRemoved)):
        known.pop(key, None)
    else:
        known[key] = event
