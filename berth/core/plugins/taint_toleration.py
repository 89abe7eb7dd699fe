"""TaintToleration (kube-scheduler's plugin of the same name).

Filter: a node fails when it has a NoSchedule/NoExecute taint that no toleration of the pod
tolerates; the reason is kube v1.34's ``node(s) had untolerated taint(s)``, naming no taint.
Score: the number of PreferNoSchedule taints the pod does not tolerate, normalised in reverse
(fewest intolerable taints → 100).

Vectorised over the ClusterState's taint table: the pod's tolerations are evaluated once per
*distinct* taint of the cluster, then looked up per node.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core import messages
from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    FilterPlugin,
    FilterResult,
    NodeArray,
    PreScorePlugin,
    ScorePlugin,
    Status,
)
from berth.core.plugins._normalize import default_normalize
from berth.core.taints import HARD_EFFECTS, untolerated_lookup

__all__ = ["NAME", "TaintToleration"]

NAME = "TaintToleration"

_UNTOLERATED = (Status.unresolvable(messages.UNTOLERATED_TAINT, plugin=NAME),)


def _untolerated(cycle: CycleContext, effects: frozenset[str]) -> npt.NDArray[np.bool_]:
    return untolerated_lookup(cycle.state, cycle.pod.tolerations, effects)


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        state = cycle.state
        if state.taints.hard_nodes == 0:
            return FilterResult.all_pass()
        lookup = _untolerated(cycle, HARD_EFFECTS)
        if not lookup.any():
            return FilterResult.all_pass()
        table = state.taints.table[nodes]
        hits = lookup[table]  # -1 padding indexes the trailing False
        failed = hits.any(axis=1)
        if not failed.any():
            return FilterResult.all_pass()
        codes = np.full(nodes.size, -1, dtype=np.int32)
        codes[failed] = 0
        return FilterResult.from_codes(codes, _UNTOLERATED)

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        return Status.success()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        state = cycle.state
        if state.taints.soft_nodes == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        lookup = _untolerated(cycle, frozenset({"PreferNoSchedule"}))
        counts: npt.NDArray[np.int64] = lookup[state.taints.table[nodes]].sum(axis=1).astype(np.int64)
        return counts

    def normalize_score(
        self, cycle: CycleContext, nodes: NodeArray, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        if not scores.any():
            return np.full(scores.shape, MAX_NODE_SCORE, dtype=np.int64)
        return default_normalize(scores, reverse=True)
