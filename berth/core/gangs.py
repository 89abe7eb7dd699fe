"""Gang scheduling (PodGroup ``minMember``): all or nothing, one gang at a time.

The coscheduling convention: pods labelled ``scheduling.x-k8s.io/pod-group: <name>`` belong to the
PodGroup ``<name>`` of their namespace, which may start only when at least ``minMember`` of them
run. Berth decides a gang atomically: it *assumes* members one by one on the live snapshot, and if
the gang does not come together it releases every assumption it made, in reverse order, leaving
the snapshot exactly as it found it. Because gangs are decided one at a time in queue order, two
gangs competing for the same GPUs cannot deadlock holding half each: the first takes what it
needs, the second waits whole.

Placement prefers one failure domain: the members are tried inside each network block (node
label ``berth.io/network-block``), then inside each zone (``topology.kubernetes.io/zone``), and
only then across the whole cell. Which domains, and in which order, is the host's call
(:class:`StateGangHost`: those that could hold the gang, smallest first, names breaking ties), so
the outcome is reproducible.

The module is pure and engine-agnostic: the engine passes a :class:`GangHost` that can place one
pod (optionally restricted to a set of nodes) and take a placement back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from berth.core import messages
from berth.schemas.cluster import PodInfo

__all__ = ["GangHost", "GangResult", "LABEL_NETWORK_BLOCK", "LABEL_ZONE", "StateGangHost", "place_gang"]

LABEL_NETWORK_BLOCK = "berth.io/network-block"
LABEL_ZONE = "topology.kubernetes.io/zone"

P = TypeVar("P")  # the engine's placement type
D = TypeVar("D")  # the engine's node-set type (e.g. a boolean mask over nodes)


class GangHost(Protocol[P, D]):
    """What :func:`place_gang` needs from the engine.

    ``place_one`` must either assume the pod (it then holds capacity, visible to the next call)
    and return its placement, or assume nothing and return the kube-style reason. ``unassume``
    must undo exactly one ``place_one``. ``domains`` lists preferred node sets for these pods,
    best first; ``None`` as a restriction means every node.
    """

    def place_one(self, pod: PodInfo, within: D | None) -> tuple[P | None, str]: ...

    def unassume(self, placement: P) -> None: ...

    def domains(self, pods: Sequence[PodInfo]) -> Sequence[tuple[str, D]]: ...


@dataclass(frozen=True)
class GangResult(Generic[P]):
    """``placements`` (assumed, in member order) when the gang came together, else empty.

    ``messages`` gives every member that is not placed its reason: the member that did not fit
    gets its own scheduling message, the others say that the gang as a whole did not fit.
    ``domain`` names the network block or zone the gang landed in (None: spread over the cell).
    """

    placements: tuple[P, ...] = ()
    messages: dict[str, str] = field(default_factory=dict)
    domain: str | None = None

    @property
    def placed(self) -> bool:
        return bool(self.placements)


def _attempt(host: GangHost[P, D], pods: Sequence[PodInfo], within: D | None,
             need: int) -> tuple[list[tuple[PodInfo, P]], dict[str, str]]:
    """Place members in order; stop as soon as ``need`` can no longer be reached."""
    placed: list[tuple[PodInfo, P]] = []
    failed: dict[str, str] = {}
    for index, pod in enumerate(pods):
        placement, reason = host.place_one(pod, within)
        if placement is None:
            failed[pod.uid] = reason
            if len(placed) + (len(pods) - index - 1) < need:
                break
        else:
            placed.append((pod, placement))
    return placed, failed


def _roll_back(host: GangHost[P, D], placed: list[tuple[PodInfo, P]]) -> None:
    for _, placement in reversed(placed):
        host.unassume(placement)


def place_gang(host: GangHost[P, D], pods: Sequence[PodInfo], min_member: int,
               group: str) -> GangResult[P]:
    """Place ``pods`` (one gang, in queue order) so that at least ``min_member`` run, or none.

    Inside a preferred domain every pending member must fit (a gang split across domains is the
    thing the preference avoids); across the whole cell ``min_member`` suffice and members beyond
    that which do not fit stay pending with their own reason. On failure nothing stays assumed.
    """
    if len(pods) < min_member:
        message = messages.gang_waiting(group, len(pods), min_member)
        return GangResult(messages={pod.uid: message for pod in pods})
    for name, within in host.domains(pods):
        placed, failed = _attempt(host, pods, within, len(pods))
        if len(placed) == len(pods):
            return GangResult(placements=tuple(p for _, p in placed), domain=name)
        _roll_back(host, placed)
    placed, failed = _attempt(host, pods, None, min_member)
    if len(placed) >= min_member:
        return GangResult(placements=tuple(p for _, p in placed), messages=failed)
    _roll_back(host, placed)
    together = messages.gang_failed(group, len(placed), min_member)
    return GangResult(messages={pod.uid: failed.get(pod.uid, together) for pod in pods})


class StateGangHost:
    """:class:`GangHost` over the core's :class:`~berth.core.scheduler.Scheduler` and a
    :class:`~berth.core.state.ClusterState`: members are scheduled by the normal profile and
    *assumed* on the state; a domain restriction is a node selector added to the member for the
    attempt (so the profile's own NodeAffinity filter enforces it). A member that could only fit
    by preempting counts as not fitting: a gang never evicts pods.
    """

    def __init__(self, scheduler: Any, state: Any, profile: str | None = None,
                 max_domains: int = 8) -> None:
        self.scheduler = scheduler
        self.state = state
        self.profile = profile
        self.max_domains = max_domains

    def place_one(self, pod: PodInfo, within: tuple[str, str] | None) -> tuple[Any | None, str]:
        target = pod if within is None else pod.model_copy(
            update={"node_selector": {**pod.node_selector, within[0]: within[1]}})
        decision = self.scheduler.schedule(target, self.state, self.profile)
        if decision.status != "placed":
            return None, decision.message
        self.state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)
        return (pod, decision), ""

    def unassume(self, placement: Any) -> None:
        pod, _ = placement
        self.state.forget(pod.uid)

    def domains(self, pods: Sequence[PodInfo]) -> list[tuple[str, tuple[str, str]]]:
        """Network blocks, then zones, that could hold the whole gang by a rough count (free
        whole GPUs for GPU gangs, free cpu otherwise), smallest sufficient first (best fit keeps
        big domains for big gangs), names breaking ties; at most ``max_domains`` of each."""
        import numpy as np

        from berth.core.state import CPU

        state = self.state
        live = state.order()
        gpus = sum(p.whole_gpus for p in pods)
        if gpus:
            from berth.core.plugins.gpu_devices import gpu_inventory

            capacity = gpu_inventory(state).full_count[live]
            demand = gpus
        else:
            capacity = (state.allocatable[live, CPU] - state.requested[live, CPU])
            demand = sum(p.requests.get("cpu", 0) for p in pods)
        out: list[tuple[str, tuple[str, str]]] = []
        for key in (LABEL_NETWORK_BLOCK, LABEL_ZONE):
            codes = state.label_codes(key)[live]
            ranked = []
            for code in np.unique(codes[codes > 0]):
                held = int(capacity[codes == code].sum())
                if held >= demand:
                    value = state.label_value(key, int(code))
                    if value is not None:
                        ranked.append((held, value))
            if len(ranked) > 1 or (ranked and key == LABEL_ZONE):
                out += [(f"{key}={value}", (key, value)) for _, value in sorted(ranked)[: self.max_domains]]
        return out
