"""An in-memory :class:`~berth.services.binder.ports.ClusterBackend` for tests: a few dicts and scripted failures.

It keeps the contract of the port (idempotent binds, evicting a gone pod is applied ...) and
records every call, so tests can check what the binder asked and how often.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from berth.schemas import PodPlacement
from berth.services.binder.ports import KeepIf, Outcome, Preemptor


@dataclass
class FakePod:
    uid: str
    node: str | None = None
    gpu_devices: tuple[int, ...] = ()
    volumes: list[dict[str, object]] = field(default_factory=list)


@dataclass
class FakeCluster:
    """Pods by ``namespace/name``, nodes, pools. ``failures[operation]`` is a queue of outcomes
    returned (instead of doing anything) by the next calls of that operation."""

    pods: dict[str, FakePod] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)
    cordoned: set[str] = field(default_factory=set)
    pools: dict[str, int] = field(default_factory=dict)
    nominated: dict[str, str] = field(default_factory=dict)
    """``namespace/name`` → the node the pod was nominated for."""
    unschedulable: dict[str, str] = field(default_factory=dict)
    """``namespace/name`` → the message of the PodScheduled=False condition it carries."""
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(reason, ``namespace/name``, message) of every event written."""
    meters_requests = False
    failures: dict[str, deque[Outcome]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def add_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        node: str | None = None,
        volumes: list[dict[str, object]] | None = None,
    ) -> None:
        self.pods[f"{namespace}/{name}"] = FakePod(uid or f"uid-{name}", node, volumes=volumes or [])

    def fail(self, operation: str, outcomes: Iterable[Outcome]) -> None:
        """Script the next answers of ``operation`` (``bind``, ``check_bind``, ``evict``, ...)."""
        self.failures.setdefault(operation, deque()).extend(outcomes)

    def count(self, operation: str) -> int:
        return sum(1 for op, _ in self.calls if op == operation)

    def _scripted(self, operation: str, target: str) -> Outcome | None:
        self.calls.append((operation, target))
        queue = self.failures.get(operation)
        return queue.popleft() if queue else None

    def _bindable(self, placement: PodPlacement) -> Outcome:
        key = f"{placement.namespace}/{placement.name}"
        pod = self.pods.get(key)
        if pod is None:
            return Outcome.conflict(f'pods "{placement.name}" not found')
        if pod.uid != placement.pod_uid:
            return Outcome.conflict(f"UID in precondition: {placement.pod_uid}, UID in object meta: {pod.uid}")
        if pod.node is not None and pod.node != placement.node:
            return Outcome.conflict(f"pod {key} is already assigned to node {pod.node!r}")
        if placement.node not in self.nodes:
            return Outcome.conflict(f'nodes "{placement.node}" not found')
        return Outcome.applied("already bound" if pod.node == placement.node else "")

    async def bind(self, placement: PodPlacement) -> Outcome:
        scripted = self._scripted("bind", f"{placement.namespace}/{placement.name}")
        if scripted is not None:
            return scripted
        outcome = self._bindable(placement)
        if outcome.is_applied:
            pod = self.pods[f"{placement.namespace}/{placement.name}"]
            pod.node, pod.gpu_devices = placement.node, placement.gpu_devices
        return outcome

    async def check_bind(self, placement: PodPlacement) -> Outcome:
        scripted = self._scripted("check_bind", f"{placement.namespace}/{placement.name}")
        return scripted if scripted is not None else self._bindable(placement)

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        preemptor: Preemptor | None = None,
        keep_if: KeepIf | None = None,
    ) -> Outcome:
        key = f"{namespace}/{name}"
        scripted = self._scripted("evict", key)
        if scripted is not None:
            return scripted
        pod = self.pods.get(key)
        if pod is None:
            return Outcome.applied("already gone")
        if uid is not None and pod.uid != uid:
            return Outcome.conflict(f"UID in precondition: {uid}, UID in object meta: {pod.uid}")
        stays = keep_if.reason(pod.volumes) if keep_if is not None else None
        if stays is not None:
            return Outcome.conflict(stays)
        del self.pods[key]
        return Outcome.applied()

    async def scale(self, namespace: str, pool: str, replicas: int) -> Outcome:
        key = f"{namespace}/{pool}"
        scripted = self._scripted("scale", key)
        if scripted is not None:
            return scripted
        if key not in self.pools:
            return Outcome.conflict(f'agentpools "{pool}" not found')
        self.pools[key] = replicas
        return Outcome.applied()

    async def cordon(self, node: str) -> Outcome:
        scripted = self._scripted("cordon", node)
        if scripted is not None:
            return scripted
        if node not in self.nodes:
            return Outcome.conflict(f'nodes "{node}" not found')
        self.cordoned.add(node)
        return Outcome.applied()

    async def nominate(self, placement: PodPlacement) -> Outcome:
        key = f"{placement.namespace}/{placement.name}"
        scripted = self._scripted("nominate", key)
        if scripted is not None:
            return scripted
        pod = self.pods.get(key)
        if pod is None:
            return Outcome.conflict(f'pods "{placement.name}" not found')
        if pod.uid != placement.pod_uid:
            return Outcome.conflict(f"UID in precondition: {placement.pod_uid}, UID in object meta: {pod.uid}")
        self.nominated[key] = placement.node
        return Outcome.applied()

    async def report_unschedulable(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        key = f"{namespace}/{name}"
        scripted = self._scripted("report_unschedulable", key)
        if scripted is not None:
            return scripted
        pod = self.pods.get(key)
        if pod is None:
            return Outcome.conflict(f'pods "{name}" not found')
        if uid is not None and pod.uid != uid:
            return Outcome.conflict(f"UID in precondition: {uid}, UID in object meta: {pod.uid}")
        if pod.node is not None:
            return Outcome.applied(f"bound to {pod.node!r} meanwhile; nothing to report")
        if self.unschedulable.get(key) == message:
            return Outcome.applied("already reported")
        self.unschedulable[key] = message
        self.events.append(("FailedScheduling", key, message))
        return Outcome.applied()

    async def close(self) -> None:
        return None
