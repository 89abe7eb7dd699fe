"""A small stand-in for :class:`berth.core.engine.Engine`, for unit tests of the cell's own folds.

Counts cpu, memory and whole GPUs; first fit in node-name order; gangs all-or-nothing. The real
engine (berth.core) is tested on its own and through the decision service. A cell takes it as
``Cell(0, CellConfig(...), engine=FakeEngine())``.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import sha256

from berth.schemas import NodeInfo, PodInfo

from berth.core.engine import Outcome, Placement

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


class FakeEngine:
    profile = "berth"
    profiles = ("berth",)

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, tuple[str, PodInfo]] = {}
        self.calls: list[str] = []

    def upsert_node(self, node: NodeInfo) -> None:
        self.nodes[node.name] = node

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)

    def upsert_bound_pod(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = (pod.node_name or "", pod)

    def remove_pod(self, uid: str) -> None:
        self.calls.append(f"remove {uid}")
        self.pods.pop(uid, None)

    def delete_pod(self, uid: str) -> None:
        self.calls.append(f"delete {uid}")
        self.pods.pop(uid, None)

    def upsert_policy(self, event) -> None:
        pass

    def remove_policy(self, kind, namespace, name) -> None:
        pass

    def snapshot_hash(self) -> str:
        text = repr(sorted(self.nodes)) + repr(sorted((uid, node) for uid, (node, _) in self.pods.items()))
        return sha256(text.encode()).hexdigest()

    def _free(self, node: NodeInfo, extra: list[tuple[str, PodInfo]]) -> dict[str, int]:
        free = {r: node.allocatable.get(r, 0) for r in RESOURCES}
        for held_on, pod in [*self.pods.values(), *extra]:
            if held_on == node.name:
                for r in RESOURCES:
                    free[r] -= pod.requests.get(r, 0)
        return free

    def _place_all(self, pods: Sequence[PodInfo]) -> Outcome:
        """First fit for every pod of ``pods``, assumed all together or not at all."""
        chosen: list[tuple[str, PodInfo]] = []
        for pod in pods:
            for name in sorted(self.nodes):
                node = self.nodes[name]
                if node.unschedulable:
                    continue
                free = self._free(node, chosen)
                if all(free[r] >= pod.requests.get(r, 0) for r in RESOURCES):
                    chosen.append((name, pod))
                    break
            else:
                return Outcome(
                    message=f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} Insufficient resources."
                )
        for name, pod in chosen:
            self.pods[pod.uid] = (name, pod)
        return Outcome(placements=tuple(Placement(pod=p, node=n) for n, p in chosen))

    def schedule(
        self,
        pod: PodInfo,
        *,
        preempt: bool = True,
        profile: str | None = None,
        extra_scores: Sequence[tuple[str, int]] = (),
    ) -> Outcome:
        if extra_scores:
            self.calls.append(f"scored {pod.uid} {list(extra_scores)}")
        return self._place_all([pod])

    def schedule_gang(self, pods: Sequence[PodInfo], min_member: int, *, profile: str | None = None) -> Outcome:
        return self._place_all(pods)

    def probe(self, pods: Sequence[PodInfo]) -> tuple[str, ...]:
        nodes = []
        for index, pod in enumerate(pods):
            outcome = self._place_all([pod.model_copy(update={"uid": f"{pod.uid}~probe-{index}"})])
            if not outcome.placed:
                break
            nodes.append(outcome.placements[0].node)
        for index in range(len(nodes)):
            self.pods.pop(f"{pods[index].uid}~probe-{index}", None)
        return tuple(nodes)
