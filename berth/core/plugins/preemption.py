"""DefaultPreemption (PostFilter): evict lower-priority pods so that an unschedulable pod fits.

The rules and the candidate ranking are kube-scheduler's (see :mod:`berth.core.preemption`);
this module is the framework glue: it walks the nodes a resolvable filter rejected, asks "does
the pod fit here with these pods gone?" by actually removing them from the ClusterState and
re-running the profile's filters on that one node, and restores the state exactly afterwards
(removal and re-adding are inverse, and the GPU extension re-uses the devices it had chosen).

Messages are kube's: ``preemption: not eligible due to preemptionPolicy=Never.`` for a pod that
may not preempt, and ``preemption: 0/3 nodes are available: 1 No preemption victims found for
incoming pod, 2 Preemption is not helpful for scheduling.`` when nothing can be freed (each
node counted once: its own filter reasons when even evicting every lower-priority pod is not
enough).

What the plugin needs from the framework (kube passes a ``framework.Handle`` for this): a
:class:`FeasibilityProbe`, ``feasible(cycle, nodes) -> (passed, reasons)``, the profile's
PreFilter/Filter result for ``nodes`` on the current state. Whoever builds the Framework calls
:meth:`DefaultPreemption.bind_framework` (which wraps it in a :class:`FrameworkProbe`); a probe in
``cycle.data[PROBE]`` takes precedence (tests). Without one the plugin cannot evaluate anything
and reports every node as "Preemption is not helpful for scheduling".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from berth.core import messages
from berth.core.framework import (
    CycleContext,
    Diagnosis,
    NodeArray,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)
from berth.core.placed_pods import PlacedPod
from berth.core.preemption import Candidate, disruptions_allowed, pick_candidate, select_victims
from berth.core.state import ClusterState
from berth.schemas.policy import PodDisruptionBudgetInfo

__all__ = ["PROBE", "DefaultPreemption", "FeasibilityProbe", "FrameworkProbe"]

PROBE = "DefaultPreemption/probe"


class FeasibilityProbe(Protocol):
    def feasible(
        self, cycle: CycleContext, nodes: NodeArray
    ) -> tuple[npt.NDArray[np.bool_], Sequence[tuple[str, ...]]]: ...


def _restore(state: ClusterState, placed: PlacedPod) -> None:
    if placed.assumed:
        state.assume(placed.pod, placed.node_name, placed.gpu_devices, placed.gpu_milli)
    else:
        state.upsert_bound_pod(placed.pod)


class _WhatIf:
    """Removes and restores pods of one node so that the probe sees hypothetical states."""

    def __init__(self, state: ClusterState, pods: Sequence[PlacedPod]) -> None:
        self.state = state
        self.pods = {p.uid: p for p in pods}
        self.removed: list[str] = []

    def set_removed(self, uids: frozenset[str]) -> None:
        # Re-add first (newest removal first), then remove: every step is an exact inverse.
        for uid in reversed([u for u in self.removed if u not in uids]):
            _restore(self.state, self.pods[uid])
            self.removed.remove(uid)
        for uid in sorted(uids):
            if uid not in self.removed:
                self.state.remove_pod(uid)
                self.removed.append(uid)

    def restore(self) -> None:
        self.set_removed(frozenset())


class DefaultPreemption(PostFilterPlugin):
    NAME: ClassVar[str] = "DefaultPreemption"

    def __init__(self, args: object = None) -> None:
        super().__init__(args)  # type: ignore[arg-type]  # the plugin's own args subclass
        self._probe: FeasibilityProbe | None = None

    def bind_framework(self, framework: object) -> None:
        """Give the plugin its framework's filters (once, when the Framework is built)."""
        self._probe = FrameworkProbe(framework)

    def post_filter(self, cycle: CycleContext, diagnosis: Diagnosis) -> PostFilterResult:
        cycle.timer.preemption_attempt()
        pod = cycle.pod
        if pod.preemption_policy == "Never":
            return PostFilterResult(
                Status.unschedulable(plugin=self.NAME), message=messages.PREEMPTION_NOT_ELIGIBLE_NEVER
            )
        probe: FeasibilityProbe | None = cycle.data.get(PROBE) or self._probe
        state = cycle.state
        total = len(diagnosis.nodes)
        potential = diagnosis.rejected(resolvable_only=True)
        counts: dict[str, int] = {}
        if probe is None or not len(potential):
            counts[messages.PREEMPTION_NOT_HELPFUL] = total
            return self._nothing(total, counts)
        if not state.pods.has_below(pod.priority):
            # No placed pod anywhere has a lower priority: the per-node search below would find
            # no victim on any node; say so without the what-ifs (same message, O(1)).
            counts[messages.PREEMPTION_NO_VICTIMS] = len(potential)
            if total - len(potential):
                counts[messages.PREEMPTION_NOT_HELPFUL] = total - len(potential)
            return self._nothing(total, counts)
        pdbs: list[PodDisruptionBudgetInfo] = [p for _, _, p in state.policies.of_kind("PodDisruptionBudget")]  # type: ignore[misc]  # policies of that kind are PodDisruptionBudgetInfo
        allowed = disruptions_allowed(pdbs, [placed.pod for placed in state.pods])
        candidates: list[Candidate] = []
        for slot in potential:
            node = state.nodes.name_of(int(slot))
            on_node = state.pods.on_node(node)
            what_if = _WhatIf(state, on_node)
            last_reasons: list[tuple[str, ...]] = []

            def fits(removed: frozenset[str], slot: int = int(slot)) -> bool:
                what_if.set_removed(removed)  # noqa: B023 -- fits is called only within this iteration
                passed, reasons = probe.feasible(cycle, np.array([slot], dtype=np.intp))
                last_reasons[:] = [tuple(reasons[0])] if len(reasons) else [()]  # noqa: B023 -- as above
                return bool(passed[0])

            try:
                found = select_victims(pod, node, [p.pod for p in on_node], fits, pdbs, allowed)
            finally:
                what_if.restore()
            if found is not None:
                candidates.append(found)
            elif any(p.pod.priority < pod.priority for p in on_node):
                for reason in last_reasons[0] if last_reasons else ():
                    counts[reason] = counts.get(reason, 0) + 1
            else:
                counts[messages.PREEMPTION_NO_VICTIMS] = counts.get(messages.PREEMPTION_NO_VICTIMS, 0) + 1
        best = pick_candidate(candidates)
        if best is None:
            unhelpful = total - len(potential)
            if unhelpful:
                counts[messages.PREEMPTION_NOT_HELPFUL] = counts.get(messages.PREEMPTION_NOT_HELPFUL, 0) + unhelpful
            return self._nothing(total, counts)
        return PostFilterResult(Status.success(), nominated_node=best.node, victims=tuple(v.uid for v in best.victims))

    def _nothing(self, total: int, counts: dict[str, int]) -> PostFilterResult:
        inner = messages.fit_error(total, counts)
        return PostFilterResult(Status.unschedulable(plugin=self.NAME), message=messages.preemption_failed(inner))


class FrameworkProbe:
    """:class:`FeasibilityProbe` over the scheduler's Framework (``find_feasible``): the
    framework sets ``cycle.data[PROBE] = FrameworkProbe(self)`` before running PostFilter."""

    def __init__(self, framework: object) -> None:
        self.framework = framework

    def feasible(
        self, cycle: CycleContext, nodes: NodeArray
    ) -> tuple[npt.NDArray[np.bool_], Sequence[tuple[str, ...]]]:
        state = cycle.state
        names = state.nodes.names_of(int(s) for s in nodes)
        result = self.framework.find_feasible(cycle.pod, state, names)  # type: ignore[attr-defined]  # the framework's full type would be an import cycle
        diagnosis: Diagnosis = result.diagnosis
        feasible = set(int(s) for s in result.feasible)
        passed = np.array([int(s) in feasible for s in nodes], dtype=bool)
        by_slot = {int(s): int(c) for s, c in zip(diagnosis.nodes, diagnosis.node_codes, strict=True)}
        reasons: list[tuple[str, ...]] = []
        for slot, ok in zip(nodes, passed, strict=True):
            if ok:
                reasons.append(())
            elif diagnosis.prefilter_status is not None:
                reasons.append(diagnosis.prefilter_status.reasons)
            else:
                code = by_slot.get(int(slot), -1)
                reasons.append(diagnosis.statuses[code].reasons if code >= 0 else ())
        return passed, reasons
