"""One pod's placement as a decision cell commits it: schedule, preempt if the profile's
PostFilter nominates a node, and assume the result on the state.

``berth simulate`` (:class:`berth.simulate.Session`) and the decision service's engine
(:class:`berth.decider.engine.CoreEngine`) both place single pods through :func:`place_pod`, so
the offline simulation and the service decide by the same steps; each only turns the result
into its own outcome type.
"""

from __future__ import annotations

from dataclasses import dataclass

from berth.core.decision import Decision
from berth.core.scheduler import Scheduler
from berth.core.state import ClusterState, PlacedPod
from berth.schemas.cluster import PodInfo

__all__ = ["PodPlacement", "place_pod"]


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """The final decision for a pod and the pods it preempted (as they were placed, in the
    order the decision named them; those the state no longer knew are left out)."""

    decision: Decision
    victims: tuple[PlacedPod, ...] = ()

    @property
    def placed(self) -> bool:
        """The pod holds capacity now (decision ``placed`` or ``held``; it was assumed)."""
        return self.decision.status in ("placed", "held")


def place_pod(scheduler: Scheduler, state: ClusterState, pod: PodInfo, profile: str, *,
              preempt: bool = True) -> PodPlacement:
    """Decide ``pod`` with ``profile`` on ``state`` and commit it.

    When the decision is ``preempting``, its victims are removed from the state and the pod is
    scheduled again: only the nominated node changed, so it lands there. With ``preempt=False``
    (a decision cell that can still hand the pod to another cell) a ``preempting`` decision is
    returned as it is, nothing removed, and the pod is not placed. A ``placed`` or
    ``held`` decision is assumed on the state (``ClusterState.assume``); any other leaves the
    state as it was, except for removed victims."""
    decision = scheduler.schedule(pod, state, profile)
    victims: list[PlacedPod] = []
    if decision.status == "preempting" and preempt:
        for uid in decision.victims:
            placed = state.placed_pod(uid)
            if placed is not None:
                victims.append(placed)
            state.remove_pod(uid)
        decision = scheduler.schedule(pod, state, profile)
    result = PodPlacement(decision, tuple(victims))
    if result.placed:
        state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)  # type: ignore[arg-type]
    return result
