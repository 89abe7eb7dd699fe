"""InterPodAffinity (kube-scheduler's plugin of the same name). Skeleton: filled in next."""

from __future__ import annotations

from berth.core.framework import (
    CycleContext,
    FilterPlugin,
    FilterResult,
    NodeArray,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
    Status,
)

__all__ = ["NAME", "InterPodAffinity"]

NAME = "InterPodAffinity"


class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME

    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        return Status.skip(), None

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        return FilterResult.all_pass()

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        return Status.skip()
