"""NodeAffinity (kube-scheduler's plugin of the same name).

Filter: the node must match the pod's ``nodeSelector`` AND its required node affinity
(``requiredDuringSchedulingIgnoredDuringExecution``: terms ORed, expressions and fields of a term
ANDed), and the scheduler-enforced ``addedAffinity`` of the plugin args if any.
PreFilter: when every required term pins ``metadata.name`` with ``In``, only those nodes are
candidates (kube's PreFilterResult); conflicting pins reject the pod outright.
Score: the sum of the weights of the preferred terms the node matches (plus ``addedAffinity``'s
preferred terms), normalised so the best node gets 100.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator

from berth.core import messages
from berth.core.framework import (
    CycleContext,
    FilterPlugin,
    FilterResult,
    NodeArray,
    PluginArgs,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
    Status,
)
from berth.core.node_selectors import NODE_NAME_FIELD, match_node_selector, match_node_selector_terms, match_node_term
from berth.core.plugins._normalize import default_normalize
from berth.schemas.cluster import NodeAffinity as NodeAffinitySpec
from berth.schemas.cluster import NodeSelectorRequirement, NodeSelectorTerm, PodInfo, PreferredSchedulingTerm

__all__ = ["NAME", "NodeAffinity", "NodeAffinityArgs", "node_affinity_from_kube"]

NAME = "NodeAffinity"


def _term_from_kube(raw: dict[str, Any]) -> NodeSelectorTerm:
    def requirements(items: Any) -> tuple[NodeSelectorRequirement, ...]:
        return tuple(
            NodeSelectorRequirement(key=r["key"], operator=r["operator"], values=tuple(r.get("values") or ()))
            for r in items or ()
        )

    return NodeSelectorTerm(
        match_expressions=requirements(raw.get("matchExpressions")), match_fields=requirements(raw.get("matchFields"))
    )


def node_affinity_from_kube(raw: dict[str, Any]) -> NodeAffinitySpec:
    """A ``v1.NodeAffinity`` in Kubernetes' JSON shape (camelCase) → the contract model."""
    unknown = set(raw) - {
        "requiredDuringSchedulingIgnoredDuringExecution",
        "preferredDuringSchedulingIgnoredDuringExecution",
    }
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}")
    required_raw = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if required_raw is not None:
        required = tuple(_term_from_kube(t) for t in required_raw.get("nodeSelectorTerms") or ())
    preferred = tuple(
        PreferredSchedulingTerm(weight=p["weight"], preference=_term_from_kube(p.get("preference") or {}))
        for p in raw.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    return NodeAffinitySpec(required=required, preferred=preferred)


class NodeAffinityArgs(PluginArgs):
    added_affinity: NodeAffinitySpec | None = Field(default=None, alias="addedAffinity")
    """kube's ``addedAffinity``: node affinity the scheduler enforces on every pod of the
    profile, written in Kubernetes' JSON shape."""

    @field_validator("added_affinity", mode="before")
    @classmethod
    def _from_kube_shape(cls, value: Any) -> Any:
        if isinstance(value, dict) and not {"required", "preferred"} & set(value):
            return node_affinity_from_kube(value)
        return value


class _Prepared:
    __slots__ = ("node_selector", "required")

    def __init__(self, pod: PodInfo) -> None:
        self.node_selector = pod.node_selector
        affinity = pod.affinity.node_affinity if pod.affinity else None
        self.required = affinity.required if affinity else None


def _preferred_terms(pod: PodInfo) -> tuple[PreferredSchedulingTerm, ...]:
    affinity = pod.affinity.node_affinity if pod.affinity else None
    return affinity.preferred if affinity else ()


def _pinned_node_names(terms: tuple[NodeSelectorTerm, ...]) -> frozenset[str] | None:
    """kube's PreFilter: the union over terms of the node names each term pins with
    ``metadata.name In`` (intersected within a term); None as soon as one term pins nothing."""
    names: set[str] = set()
    for term in terms:
        pinned: set[str] | None = None
        for requirement in term.match_fields:
            if requirement.key == NODE_NAME_FIELD and requirement.operator == "In":
                values = set(requirement.values)
                pinned = values if pinned is None else pinned & values
        if pinned is None:
            return None
        names |= pinned
    return frozenset(names)


class NodeAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME
    Args = NodeAffinityArgs

    def __init__(self, args: NodeAffinityArgs | None = None) -> None:
        super().__init__(args)
        added = self.args.added_affinity  # type: ignore[attr-defined]  # self.args is typed as the base PluginArgs
        self._added_required = added.required if added else None
        self._added_preferred = added.preferred if added else ()

    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        prepared = _Prepared(cycle.pod)
        if not prepared.node_selector and prepared.required is None and self._added_required is None:
            return Status.skip(), None
        cycle.data[NAME] = prepared
        if prepared.required:
            names = _pinned_node_names(prepared.required)
            if names is not None:
                if not names:
                    return Status.unresolvable(messages.AFFINITY_CONFLICT, plugin=NAME), None
                return Status.success(), PreFilterResult(node_names=names)
        return Status.success(), None

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        state = cycle.state
        prepared: _Prepared = cycle.data.get(NAME) or _Prepared(cycle.pod)
        codes = np.full(nodes.size, -1, dtype=np.int32)
        if self._added_required is not None:
            enforced = match_node_selector_terms(state, self._added_required, nodes)
            codes[~enforced] = 0
        match = np.ones(nodes.size, dtype=bool)
        if prepared.node_selector:
            match &= match_node_selector(state, prepared.node_selector, nodes)
        if prepared.required is not None:
            match &= match_node_selector_terms(state, prepared.required, nodes)
        codes[(codes < 0) & ~match] = 1
        if (codes < 0).all():
            return FilterResult.all_pass()
        return FilterResult.from_codes(
            codes,
            (
                Status.unresolvable(messages.NODE_AFFINITY_ENFORCED_NOT_MATCH, plugin=NAME),
                Status.unresolvable(messages.NODE_AFFINITY_NOT_MATCH, plugin=NAME),
            ),
        )

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        if not _preferred_terms(cycle.pod) and not self._added_preferred:
            return Status.skip()
        return Status.success()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        total = np.zeros(nodes.size, dtype=np.int64)
        for term in (*self._added_preferred, *_preferred_terms(cycle.pod)):
            total += match_node_term(cycle.state, term.preference, nodes) * term.weight
        return total

    def normalize_score(
        self, cycle: CycleContext, nodes: NodeArray, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        return default_normalize(scores, reverse=False)
