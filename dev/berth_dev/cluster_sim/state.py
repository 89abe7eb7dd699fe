"""The simulated cluster: the source of truth, as the API server is for a real one.

:class:`ClusterState` holds nodes, pods and AgentPools and changes them the way kube-apiserver
would, answering each request with an :class:`ApiResult`: an HTTP status, a Kubernetes-shaped
body, and the events the change produces (what ingest would publish from a watch). It does no
I/O and reads no clock (``now`` is an argument), so tests drive it directly.

Where it knowingly differs from Kubernetes:

- binding a pod to a node that does not exist is a 409 conflict (Kubernetes accepts it and the
  pod garbage collector deletes the pod later); the binder then reports a conflict and the
  decision cell queues the pod again, which is what eventually happens in a real cluster;
- the device annotations of a binding (``berth.io/gpu-devices``) are checked against the node's
  devices: an index the node does not have is 422 Invalid;
- there is no kubelet: a bound pod is Running at once. Instead of refusing a pod that does not
  fit (kubelet's OutOfcpu, OutOfnvidia.com/gpu), the state binds it and counts the bind as
  *overcommitted*: a scheduler bug made visible (``/status``), not hidden;
- an AgentPool acts as its own ReplicaSet: it keeps ``replicas`` pods, replacing deleted ones,
  removing unbound pods first and then the newest when scaled down. Replica names are never
  reused (``<pool>-<n>`` with n always growing), so a UID precondition is never ambiguous.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth.schemas import NodeInfo, NodeObserved, NodeRemoved, PodDeleted, PodInfo, PodObserved
from berth.schemas.policy import LimitRangeInfo, PriorityClassInfo

from berth.kube.manifests import ANNOTATION_GPU_DEVICES, ManifestError, node_from_manifest, pod_from_manifest
from berth.kube.replicas import AgentPool, ReplicaError, replica_pod
from berth_dev.workloads import PolicyObject

ANNOTATION_GPU_MILLI = "berth.io/gpu-milli"
SCHEDULER_NAME = "berth"


@dataclass(frozen=True)
class ApiResult:
    """An answer: HTTP ``status``, the JSON ``body``, and the ``events`` the change produced."""

    status: int
    body: dict[str, Any]
    events: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def status_body(code: int, reason: str, message: str, *, kind: str = "", name: str = "") -> dict[str, Any]:
    """A ``metav1.Status`` as kube-apiserver returns it for errors."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 300 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if kind or name:
        body["details"] = {"name": name, "kind": kind}
    return body


def _error(code: int, reason: str, message: str, *, kind: str = "", name: str = "") -> ApiResult:
    return ApiResult(code, status_body(code, reason, message, kind=kind, name=name))


def not_found(kind: str, name: str) -> ApiResult:
    return _error(404, "NotFound", f'{kind} "{name}" not found', kind=kind, name=name)


@dataclass
class PodRecord:
    pod: PodInfo
    resource_version: int
    pool: str | None = None
    """``namespace/name`` of the AgentPool that owns the pod."""
    index: int | None = None
    """The replica number within its pool."""
    placed: bool = False
    """Bound by a binding (a scheduler's decision), not created with ``spec.nodeName``."""


@dataclass
class PoolRecord:
    pool: AgentPool
    replicas: int
    next_index: int = 0


@dataclass
class NodeUsage:
    """What bound pods request on a node, and each device's used share (milli)."""

    requested: dict[str, int] = field(default_factory=dict)
    device_milli: dict[int, int] = field(default_factory=dict)


@dataclass
class Counters:
    pods_created: int = 0
    pods_bound: int = 0
    pods_deleted: int = 0
    bind_conflicts: int = 0
    evictions: int = 0
    cordons: int = 0
    scales: int = 0
    overcommitted_binds: int = 0
    nodes_removed: int = 0
    pods_created_bound: int = 0
    """Pods created with ``spec.nodeName`` (running from the start, no scheduler involved)."""


# Why a pod was deleted (the ledger's causes).
FINISHED = "finished"
EVICTED = "evicted"
NODE_REMOVED = "node removed"
SCALED_DOWN = "scaled down"
DELETED = "deleted"


class ClusterState:
    """Nodes, pods and pools; every mutating method returns the events of its change, in order."""

    def __init__(self, policies: Iterable[PolicyObject] = ()) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.node_versions: dict[str, int] = {}
        self.pods: dict[str, PodRecord] = {}
        """By ``namespace/name``."""
        self.pools: dict[str, PoolRecord] = {}
        self.policies: list[PolicyObject] = list(policies)
        self.usage: dict[str, NodeUsage] = {}
        self.unschedulable: set[str] = set()
        """UIDs of pending pods whose latest decision said they cannot be placed now."""
        self.reasons: dict[str, str] = {}
        """UID → the message of the latest decision that said the pod cannot be placed now."""
        self.deleted: dict[tuple[str, str], int] = {}
        """(the pod's stage when deleted, cause) → pods; stages as in :meth:`ledger`."""
        self.counters = Counters()
        self.bound_listeners: list[Callable[[PodRecord], None]] = []
        self.overcommit_listeners: list[Callable[[PodRecord, str], None]] = []
        self._version = 0

    # -- helpers ----------------------------------------------------------------------------------

    def _next_version(self) -> int:
        # One counter for every object, like etcd's revision.
        self._version += 1
        return self._version

    def _pod_event(self, record: PodRecord, now: datetime) -> PodObserved:
        return PodObserved(pod=record.pod, resource_version=str(record.resource_version), observed_at=now)

    def _node_event(self, name: str, now: datetime) -> NodeObserved:
        return NodeObserved(node=self.nodes[name], resource_version=str(self.node_versions[name]), observed_at=now)

    # -- reading ----------------------------------------------------------------------------------

    def pending_pods(self) -> list[PodRecord]:
        return [r for r in self.pods.values() if r.pod.node_name is None]

    def undecided(self) -> list[PodRecord]:
        """Pending pods of Berth's scheduler with no verdict yet (neither bound nor unschedulable)."""
        return [
            r
            for r in self.pods.values()
            if r.pod.node_name is None
            and r.pod.scheduler_name == SCHEDULER_NAME
            and r.pod.uid not in self.unschedulable
        ]

    def ready_replicas(self, namespace: str, pool: str) -> int:
        key = f"{namespace}/{pool}"
        return sum(1 for r in self.pods.values() if r.pool == key and r.pod.node_name is not None)

    def counts(self) -> dict[str, int]:
        pending = self.pending_pods()
        return {
            "nodes": len(self.nodes),
            "pods": len(self.pods),
            "pending": len(pending),
            "bound": len(self.pods) - len(pending),
            "unschedulable": sum(1 for r in pending if r.pod.uid in self.unschedulable),
            "undecided": len(self.undecided()),
        }

    # -- nodes ------------------------------------------------------------------------------------

    def add_node(self, node: NodeInfo, now: datetime) -> ApiResult:
        if node.name in self.nodes:
            return _error(409, "AlreadyExists", f'nodes "{node.name}" already exists', kind="nodes", name=node.name)
        self.nodes[node.name] = node
        self.node_versions[node.name] = self._next_version()
        self.usage[node.name] = NodeUsage()
        return ApiResult(201, node_json(node, self.node_versions[node.name]), (self._node_event(node.name, now),))

    def create_node_from_manifest(self, manifest: Mapping[str, Any], now: datetime) -> ApiResult:
        try:
            node = node_from_manifest(manifest)
        except ManifestError as exc:
            return _error(422, "Invalid", str(exc))
        return self.add_node(node, now)

    def set_unschedulable(self, name: str, unschedulable: bool, now: datetime) -> ApiResult:
        node = self.nodes.get(name)
        if node is None:
            return not_found("nodes", name)
        if node.unschedulable == unschedulable:
            return ApiResult(200, node_json(node, self.node_versions[name]))  # no change, no event
        self.nodes[name] = node.model_copy(update={"unschedulable": unschedulable})
        self.node_versions[name] = self._next_version()
        if unschedulable:
            self.counters.cordons += 1
        return ApiResult(200, node_json(self.nodes[name], self.node_versions[name]), (self._node_event(name, now),))

    def remove_node(self, name: str, now: datetime) -> ApiResult:
        """Delete a node; its pods are deleted too (the pod garbage collector's job in Kubernetes)."""
        node = self.nodes.pop(name, None)
        if node is None:
            return not_found("nodes", name)
        self.node_versions.pop(name, None)
        self.usage.pop(name, None)
        self.counters.nodes_removed += 1
        events: list[Any] = [NodeRemoved(name=name, observed_at=now)]
        for key in sorted(k for k, r in self.pods.items() if r.pod.node_name == name):
            events += self._delete(key, now, cause=NODE_REMOVED)
        return ApiResult(200, status_body(200, "", f'node "{name}" deleted'), tuple(events))

    # -- pods -------------------------------------------------------------------------------------

    def create_pod(
        self, pod: PodInfo, now: datetime, *, pool: str | None = None, index: int | None = None
    ) -> ApiResult:
        """Create a pod (pending, or bound if it names a node). ``creation_time`` becomes ``now``."""
        key = pod.key
        if key in self.pods:
            return _error(409, "AlreadyExists", f'pods "{pod.name}" already exists', kind="pods", name=pod.name)
        if pod.node_name is not None and pod.node_name not in self.nodes:
            return _error(
                422, "Invalid", f'Pod "{pod.name}" is invalid: spec.nodeName: node "{pod.node_name}" not found'
            )
        record = PodRecord(pod.model_copy(update={"creation_time": now}), self._next_version(), pool, index)
        self.pods[key] = record
        self.counters.pods_created += 1
        if record.pod.node_name is not None:
            self.counters.pods_created_bound += 1
            self._charge(record)
        return ApiResult(201, pod_json(record), (self._pod_event(record, now),))

    def create_pod_from_manifest(self, manifest: Mapping[str, Any], namespace: str, now: datetime) -> ApiResult:
        manifest = {**manifest, "metadata": {**(manifest.get("metadata") or {}), "namespace": namespace}}
        classes = {p.name: p for p in self.policies if isinstance(p, PriorityClassInfo)}
        ranges = sorted(
            (p for p in self.policies if isinstance(p, LimitRangeInfo) and p.namespace == namespace),
            key=lambda r: r.name,
        )
        try:
            converted = pod_from_manifest(manifest, priority_classes=classes, limit_ranges=ranges)
        except ManifestError as exc:
            return _error(422, "Invalid", str(exc))
        if converted.rejection is not None:
            return _error(403, "Forbidden", converted.rejection)
        return self.create_pod(converted.pod, now)

    def _stage(self, record: PodRecord) -> str:
        """Where a pod stands: ``placed`` (bound by a binding), ``created bound``, or pending:
        ``unschedulable`` (its latest decision said so), ``undecided`` (Berth's, no verdict yet),
        ``other scheduler``."""
        if record.pod.node_name is not None:
            return "placed" if record.placed else "created bound"
        if record.pod.uid in self.unschedulable:
            return "unschedulable"
        return "undecided" if record.pod.scheduler_name == SCHEDULER_NAME else "other scheduler"

    def _delete(self, key: str, now: datetime, *, replace: bool = True, cause: str = DELETED) -> list[Any]:
        """Delete a pod; a pool's pod is replaced (unless the pool itself is shrinking)."""
        record = self.pods.pop(key)
        stage = (self._stage(record), cause)
        self.deleted[stage] = self.deleted.get(stage, 0) + 1
        self.unschedulable.discard(record.pod.uid)
        self.reasons.pop(record.pod.uid, None)
        if record.pod.node_name is not None:
            self._charge(record, sign=-1)
        self.counters.pods_deleted += 1
        events: list[Any] = [
            PodDeleted(
                uid=record.pod.uid,
                namespace=record.pod.namespace,
                name=record.pod.name,
                node_name=record.pod.node_name,
                observed_at=now,
            )
        ]
        if replace and record.pool is not None and record.pool in self.pools:
            events += self._reconcile(self.pools[record.pool], now)
        return events

    def delete_pod(
        self, namespace: str, name: str, now: datetime, *, uid: str | None = None, cause: str = DELETED
    ) -> ApiResult:
        key = f"{namespace}/{name}"
        record = self.pods.get(key)
        if record is None:
            return not_found("pods", name)
        if uid is not None and uid != record.pod.uid:
            return _precondition_failed("pods", name, uid, record.pod.uid)
        body = pod_json(record)
        return ApiResult(200, body, tuple(self._delete(key, now, cause=cause)))

    def evict(self, namespace: str, name: str, now: datetime, *, uid: str | None = None) -> ApiResult:
        """The Eviction API: delete the pod gracefully (no disruption budgets in the simulator)."""
        result = self.delete_pod(namespace, name, now, uid=uid, cause=EVICTED)
        if not result.ok:
            return result
        self.counters.evictions += 1
        return ApiResult(201, status_body(201, "", ""), result.events)

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        now: datetime,
        *,
        uid: str | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> ApiResult:
        """``pods/binding``: set the pod's node (once), copying the binding's annotations onto it."""
        key = f"{namespace}/{name}"
        record = self.pods.get(key)
        if record is None:
            return not_found("pods", name)
        if uid and uid != record.pod.uid:
            self.counters.bind_conflicts += 1
            return _precondition_failed("pods/binding", name, uid, record.pod.uid)
        if record.pod.node_name is not None:
            self.counters.bind_conflicts += 1
            return _error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} '
                f'is already assigned to node "{record.pod.node_name}"',
                kind="pods/binding",
                name=name,
            )
        target = self.nodes.get(node)
        if target is None:
            self.counters.bind_conflicts += 1
            return _error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": node "{node}" not found',
                kind="pods/binding",
                name=name,
            )
        extra = dict(annotations or {})
        devices: tuple[int, ...] = ()
        if extra.get(ANNOTATION_GPU_DEVICES):
            try:
                devices = tuple(sorted({int(d) for d in extra[ANNOTATION_GPU_DEVICES].split(",")}))
            except ValueError:
                return _error(
                    422,
                    "Invalid",
                    f'Binding "{name}" is invalid: metadata.annotations.'
                    f'{ANNOTATION_GPU_DEVICES}: must be device indices, e.g. "0,1"',
                )
            known = {d.index for d in target.gpus}
            missing = [d for d in devices if d not in known]
            if missing:
                return _error(
                    422,
                    "Invalid",
                    f'Binding "{name}" is invalid: metadata.annotations.'
                    f'{ANNOTATION_GPU_DEVICES}: node "{node}" has no GPU device(s) '
                    f"{missing} (devices: {sorted(known)})",
                )
        pod = record.pod.model_copy(
            update={
                "node_name": node,
                "gpu_devices": devices,
                "phase": "Running",
                "annotations": {**record.pod.annotations, **extra},
            }
        )
        record.pod = pod
        record.placed = True
        record.resource_version = self._next_version()
        self.unschedulable.discard(pod.uid)
        self.reasons.pop(pod.uid, None)
        self.counters.pods_bound += 1
        problem = self._charge(record)
        if problem is not None:
            self.counters.overcommitted_binds += 1
            for listener in self.overcommit_listeners:
                listener(record, problem)
        for listener in self.bound_listeners:
            listener(record)
        return ApiResult(201, status_body(201, "", ""), (self._pod_event(record, now),))

    # -- capacity accounting ----------------------------------------------------------------------

    def _charge(self, record: PodRecord, sign: int = 1) -> str | None:
        """Add (or with ``sign=-1`` release) what a bound pod holds on its node; returns what is
        overcommitted after adding, or None."""
        pod = record.pod
        node = self.nodes.get(pod.node_name or "")
        usage = self.usage.get(pod.node_name or "")
        if node is None or usage is None:
            return None
        for resource, amount in pod.requests.items():
            usage.requested[resource] = usage.requested.get(resource, 0) + sign * amount
        share = pod.gpu_fraction_milli if pod.gpu_fraction_milli is not None else (1000 if pod.whole_gpus else 0)
        if share and pod.annotations.get(ANNOTATION_GPU_MILLI, "").isdigit():
            share = int(pod.annotations[ANNOTATION_GPU_MILLI])
        for device in pod.gpu_devices if share else ():
            usage.device_milli[device] = usage.device_milli.get(device, 0) + sign * share
        if sign < 0:
            return None
        over = [
            f"{r} {usage.requested[r]} > {node.allocatable.get(r, 0)}"
            for r in sorted(pod.requests)
            if pod.requests[r] and usage.requested[r] > node.allocatable.get(r, 0)
        ]
        over += [
            f"GPU {d} at {usage.device_milli[d]} milli" for d in pod.gpu_devices if usage.device_milli.get(d, 0) > 1000
        ]
        return "; ".join(over) or None

    # -- pools ------------------------------------------------------------------------------------

    def add_pool(self, pool: AgentPool, now: datetime) -> ApiResult:
        """Register an AgentPool and create its initial replicas."""
        try:
            replica_pod(pool, 0, self.policies)  # refuse a pool whose replicas could never be created
        except ReplicaError as exc:
            return _error(422, "Invalid", str(exc))
        record = PoolRecord(pool, replicas=pool.initial_replicas)
        self.pools[pool.key] = record
        events = self._reconcile(record, now)
        return ApiResult(201, scale_json(record, self._replica_count(pool.key)), tuple(events))

    def scale(self, namespace: str, name: str, replicas: int, now: datetime) -> ApiResult:
        record = self.pools.get(f"{namespace}/{name}")
        if record is None:
            return not_found("agentpools.berth.io", name)
        if replicas < 0:
            return _error(
                422,
                "Invalid",
                f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                f"{replicas}: must be greater than or equal to 0",
            )
        changed = replicas != record.replicas
        record.replicas = replicas
        if changed:
            self.counters.scales += 1
        events = self._reconcile(record, now)
        return ApiResult(200, scale_json(record, self._replica_count(record.pool.key)), tuple(events))

    def get_scale(self, namespace: str, name: str) -> ApiResult:
        record = self.pools.get(f"{namespace}/{name}")
        if record is None:
            return not_found("agentpools.berth.io", name)
        return ApiResult(200, scale_json(record, self._replica_count(record.pool.key)))

    def _replica_count(self, pool_key: str) -> int:
        return sum(1 for r in self.pods.values() if r.pool == pool_key)

    def _reconcile(self, record: PoolRecord, now: datetime) -> list[Any]:
        """Create or delete replica pods until the pool has ``replicas`` of them."""
        key = record.pool.key
        mine = [(k, r) for k, r in self.pods.items() if r.pool == key]
        events: list[Any] = []
        for _ in range(record.replicas - len(mine)):
            pod = replica_pod(record.pool, record.next_index, self.policies)
            result = self.create_pod(pod, now, pool=key, index=record.next_index)
            record.next_index += 1
            events += result.events
        if len(mine) > record.replicas:
            # ReplicaSet order: unscheduled pods go first, then the newest.
            doomed = sorted(mine, key=lambda kr: (kr[1].pod.node_name is not None, -(kr[1].index or 0)))
            for pod_key, _ in doomed[: len(mine) - record.replicas]:
                events += self._delete(pod_key, now, replace=False, cause=SCALED_DOWN)
        return events

    # -- decisions --------------------------------------------------------------------------------

    def mark_decided(self, subject: str, unschedulable: bool, reason: str = "") -> int:
        """Record a decision about ``subject`` (``namespace/pod`` or ``namespace/pod-group``):
        its pending pods are unschedulable now (``reason``: the decision's message), or no longer.
        Returns how many pods it named."""
        namespace, _, name = subject.partition("/")
        record = self.pods.get(subject)
        named = [record] if record is not None else []
        named += [r for r in self.pods.values() if r.pod.namespace == namespace and r.pod.pod_group == name]
        for r in named:
            if unschedulable and r.pod.node_name is None:
                self.unschedulable.add(r.pod.uid)
                self.reasons[r.pod.uid] = reason
            else:
                self.unschedulable.discard(r.pod.uid)
                self.reasons.pop(r.pod.uid, None)
        return len(named)

    def ledger(self) -> dict[str, Any]:
        """What became of every pod ever created, each counted once: ``created bound`` (with
        ``spec.nodeName``), ``placed`` (bound by a binding; split by what happened to it since:
        ``running`` or deleted — ``finished``, ``evicted``, ``node removed``, ``scaled down``,
        ``deleted``), pending now (``unschedulable``, ``undecided``, ``other scheduler``), or
        ``deleted while pending`` (by cause, and whether a verdict had said unschedulable). The
        numbers add up to ``pods_created``; ``unschedulable_reasons`` counts the pending
        unschedulable pods by their latest decision's message."""
        placed_then: dict[str, int] = {}
        pending: dict[str, int] = {"unschedulable": 0, "undecided": 0, "other scheduler": 0}
        for record in self.pods.values():
            stage = self._stage(record)
            if stage == "placed":
                placed_then["running"] = placed_then.get("running", 0) + 1
            elif stage in pending:
                pending[stage] += 1
        withdrawn: dict[str, dict[str, int]] = {}
        for (stage, cause), count in sorted(self.deleted.items()):
            if stage == "placed":
                placed_then[cause] = placed_then.get(cause, 0) + count
            elif stage != "created bound":
                by_verdict = withdrawn.setdefault(cause, {})
                by_verdict[stage] = by_verdict.get(stage, 0) + count
        reasons: dict[str, int] = {}
        for record in self.pods.values():
            if record.pod.node_name is None and record.pod.uid in self.unschedulable:
                reason = self.reasons.get(record.pod.uid, "")
                reasons[reason] = reasons.get(reason, 0) + 1
        return {
            "created": self.counters.pods_created,
            "created_bound": self.counters.pods_created_bound,
            "placed": self.counters.pods_bound,
            "placed_then": placed_then,
            "pending": pending,
            "deleted_while_pending": withdrawn,
            "unschedulable_reasons": reasons,
        }


def _precondition_failed(kind: str, name: str, expected: str, actual: str) -> ApiResult:
    return _error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {kind} "{name}": Precondition failed: '
        f"UID in precondition: {expected}, UID in object meta: {actual}",
        kind=kind,
        name=name,
    )


def pod_json(record: PodRecord) -> dict[str, Any]:
    """The pod as a (trimmed) Kubernetes Pod object."""
    pod = record.pod
    spec: dict[str, Any] = {"schedulerName": pod.scheduler_name, "priority": pod.priority}
    if pod.node_name:
        spec["nodeName"] = pod.node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "resourceVersion": str(record.resource_version),
            "labels": dict(pod.labels),
            "annotations": dict(pod.annotations),
            "creationTimestamp": pod.creation_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": spec,
        "status": {"phase": pod.phase},
    }


def node_json(node: NodeInfo, version: int) -> dict[str, Any]:
    """The node as a (trimmed) Kubernetes Node object."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "uid": node.uid, "resourceVersion": str(version), "labels": dict(node.labels)},
        "spec": {
            "unschedulable": node.unschedulable,
            "taints": [t.model_dump(exclude_defaults=True) for t in node.taints],
        },
        "status": {"allocatable": {k: str(v) for k, v in node.allocatable.items()}},
    }


def scale_json(record: PoolRecord, current: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": record.pool.name, "namespace": record.pool.namespace},
        "spec": {"replicas": record.replicas},
        "status": {"replicas": current},
    }
