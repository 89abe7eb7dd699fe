"""A small engine behind the decider's port, for unit tests of the cell's own logic only.

Counts cpu, memory and whole GPUs; first fit in node-name order; gangs all-or-nothing. The real
engine (berth.core) is tested on its own and through the decision service.
"""

from __future__ import annotations

from hashlib import sha256

from berth.decider.ports import EngineOutcome, Placement
from berth.schemas import NodeInfo, PodInfo

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


class FakeEngine:
    config_hash = "f" * 64
    config_version = "fake-v1"
    config_document = "{}"
    profile = "berth"

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

    def place(self, pods, *, min_member=None, preempt=True) -> EngineOutcome:
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
                return EngineOutcome(message=f"0/{len(self.nodes)} nodes are available: "
                                             f"{len(self.nodes)} Insufficient resources.")
        for name, pod in chosen:
            self.pods[pod.uid] = (name, pod)
        return EngineOutcome(placements=tuple(Placement(pod=p, node=n) for n, p in chosen))

    def probe_placements(self, pods):
        nodes = []
        for index, pod in enumerate(pods):
            outcome = self.place([pod.model_copy(update={"uid": f"{pod.uid}~probe-{index}"})])
            if not outcome.placed:
                break
            nodes.append(outcome.placements[0].node)
        for index in range(len(nodes)):
            self.pods.pop(f"{pods[index].uid}~probe-{index}", None)
        return tuple(nodes)

    def place_scored(self, pod, extra_scores):
        self.calls.append(f"scored {pod.uid} {list(extra_scores)}")
        return self.place([pod])
