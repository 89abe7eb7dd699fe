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
(:class:`berth.core.engine.Engine`'s: those that could hold the gang, smallest first, names
breaking ties), so the outcome is reproducible.

The module is pure and engine-agnostic: the engine passes a :class:`GangHost` that can place one
pod (optionally restricted to a set of nodes) and take a placement back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from berth.core import messages
from berth.schemas.cluster import PodInfo

__all__ = ["GangHost", "GangResult", "LABEL_NETWORK_BLOCK", "LABEL_ZONE", "place_gang"]

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


def _attempt(
    host: GangHost[P, D], pods: Sequence[PodInfo], within: D | None, need: int
) -> tuple[list[tuple[PodInfo, P]], dict[str, str]]:
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


def place_gang(host: GangHost[P, D], pods: Sequence[PodInfo], min_member: int, group: str) -> GangResult[P]:
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
