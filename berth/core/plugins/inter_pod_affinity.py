"""InterPodAffinity (kube-scheduler's plugin of the same name).

Filter, in kube's order, a node fails when:

1. the pod's required **affinity** is not met: the node lacks a term's topology key, or some
   term's domain (the node's value for its key) holds no placed pod matching *all* the terms —
   unless no pod anywhere matches them all and the pod matches its own terms (the first pod of a
   group that attracts itself may start it) → "node(s) didn't match pod affinity rules"
   (UnschedulableAndUnresolvable);
2. the pod's required **anti-affinity** is violated: for some term, the node's domain holds a
   placed pod matching that term → "node(s) didn't match pod anti-affinity rules";
3. a placed pod's required anti-affinity term matches the incoming pod and the node is in that
   placed pod's domain → "node(s) didn't satisfy existing pods anti-affinity rules".

Score: per topology domain, +weight for each placed pod matching a preferred affinity term of the
pod, -weight per preferred anti-affinity match, and the symmetric contributions of placed pods'
terms that match the incoming pod (``hardPodAffinityWeight`` for their required affinity terms,
± weights for their preferred terms); a node's score is the sum over its domains, normalised by
min-max to 0..100.

Term semantics are kube's ``AffinityTerm``: the term's namespaces (the owning pod's own namespace
when neither ``namespaces`` nor ``namespaceSelector`` is given) or a ``namespaceSelector`` over
namespace labels (``{}``: every namespace; the ClusterState keeps namespace labels), AND the
label selector (a missing selector matches nothing). ``matchLabelKeys``/``mismatchLabelKeys``
are merged into the selector with the owning pod's label values, as the API server does.

Cost: nothing for a pod without affinity terms while no placed pod has required anti-affinity;
otherwise about the number of placed pods the terms select (label index) plus O(nodes) array
work. Placed pods' terms are compiled once, in a state extension, not per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import Field

from berth.core import messages
from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    FilterPlugin,
    FilterResult,
    NodeArray,
    PluginArgs,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
    StateExtension,
    Status,
)
from berth.core.labels import NOTHING, CompiledSelector, Requirement, compile_selector
from berth.core.placed_pods import PlacedPod
from berth.core.state import ClusterState
from berth.schemas.cluster import PodAffinityTerm, PodInfo

__all__ = ["NAME", "AffinityTerm", "InterPodAffinity", "InterPodAffinityArgs", "PodTerms", "compile_terms"]

NAME = "InterPodAffinity"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """kube's ``fwk.AffinityTerm`` (plus the weight of a preferred term)."""

    selector: CompiledSelector
    namespaces: frozenset[str]
    namespace_selector: CompiledSelector
    topology_key: str
    weight: int = 0

    def matches(self, pod: PodInfo, namespace_labels: Mapping[str, str]) -> bool:
        """Does ``pod`` (whose namespace has ``namespace_labels``) fall under this term?"""
        if pod.namespace not in self.namespaces and not self.namespace_selector.matches(namespace_labels):
            return False
        return self.selector.matches(pod.labels)

    def resolved(self, state: ClusterState) -> AffinityTerm:
        """kube's ``mergeAffinityTermNamespacesIfNotEmpty`` for the incoming pod's terms: a
        non-empty namespace selector becomes the names of the namespaces it selects now."""
        if self.namespace_selector.is_empty or self.namespace_selector.nothing:
            return self
        selected = {
            ns for ns in state.namespaces() if self.namespace_selector.matches(state.policies.namespace_labels(ns))
        }
        return AffinityTerm(self.selector, self.namespaces | selected, NOTHING, self.topology_key, self.weight)

    def namespace_scope(self) -> frozenset[str] | None:
        """Namespaces to search placed pods in; None: every namespace (selector ``{}``)."""
        return None if self.namespace_selector.is_empty else self.namespaces


def _compile(pod: PodInfo, term: PodAffinityTerm, weight: int = 0) -> AffinityTerm:
    selector = compile_selector(term.label_selector)
    extra = []
    for key in term.match_label_keys:
        if key in pod.labels:
            extra.append(Requirement(key, "In", frozenset((pod.labels[key],))))
    for key in term.mismatch_label_keys:
        if key in pod.labels:
            extra.append(Requirement(key, "NotIn", frozenset((pod.labels[key],))))
    selector = selector.with_requirements(extra)
    if not term.namespaces and term.namespace_selector is None:
        namespaces = frozenset((pod.namespace,))
    else:
        namespaces = frozenset(term.namespaces)
    namespace_selector = compile_selector(term.namespace_selector)
    return AffinityTerm(selector, namespaces, namespace_selector, term.topology_key, weight)


@dataclass(frozen=True, slots=True)
class PodTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


_NO_TERMS = PodTerms()


def compile_terms(pod: PodInfo) -> PodTerms:
    affinity = pod.affinity
    if affinity is None or (affinity.pod_affinity is None and affinity.pod_anti_affinity is None):
        return _NO_TERMS
    attract, repel = affinity.pod_affinity, affinity.pod_anti_affinity
    return PodTerms(
        required_affinity=tuple(_compile(pod, t) for t in attract.required) if attract else (),
        required_anti_affinity=tuple(_compile(pod, t) for t in repel.required) if repel else (),
        preferred_affinity=tuple(_compile(pod, w.term, w.weight) for w in attract.preferred) if attract else (),
        preferred_anti_affinity=tuple(_compile(pod, w.term, w.weight) for w in repel.preferred) if repel else (),
    )


_KINDS = ("required_affinity", "required_anti_affinity", "preferred_affinity", "preferred_anti_affinity")


class PlacedPodTerms(StateExtension):
    """Placed pods' affinity terms, compiled once and grouped: for every distinct term (pods of
    one workload share theirs), how many placed pods carry it on each node slot.

    A cycle then tests each *distinct* term against the incoming pod once and turns the slots
    of the matching ones into topology domains with array operations, instead of visiting every
    placed pod with affinity in Python. Pods on a node the state does not know (yet) count
    nowhere, as in kube, and are counted again when the node arrives (the state re-adds them).
    """

    KEY = NAME

    def __init__(self) -> None:
        self.terms: dict[str, PodTerms] = {}
        self._counted_at: dict[str, int] = {}
        """uid → slot its terms are counted at (absent: not counted)."""
        self._uids_at: dict[int, set[str]] = {}
        self.by_term: dict[str, dict[AffinityTerm, dict[int, int]]] = {k: {} for k in _KINDS}
        """kind → term → {slot: number of placed pods there carrying the term}."""
        # Which terms an incoming pod could possibly fall under, by one label it must carry
        # (the term selector's most selective ``In``): a pod is tested only against terms
        # hinted by its own labels plus those without such a requirement.
        self._hinted: dict[str, dict[tuple[str, str], set[AffinityTerm]]] = {k: {} for k in _KINDS}
        self._unhinted: dict[str, set[AffinityTerm]] = {k: set() for k in _KINDS}

    def _count(self, uid: str, slot: int, sign: int) -> None:
        terms = self.terms[uid]
        for kind in _KINDS:
            groups = self.by_term[kind]
            for term in getattr(terms, kind):
                per_slot = groups.get(term)
                if per_slot is None:
                    per_slot = groups[term] = {}
                    self._index(kind, term, add=True)
                count = per_slot.get(slot, 0) + sign
                if count:
                    per_slot[slot] = count
                else:
                    del per_slot[slot]
                    if not per_slot:
                        del groups[term]
                        self._index(kind, term, add=False)

    def _index(self, kind: str, term: AffinityTerm, *, add: bool) -> None:
        if term.selector.nothing:
            return  # matches no pod: never a candidate
        hint = term.selector.index_hint()
        values = None if hint is None else hint[1]
        if hint is None or values is None:
            buckets = [self._unhinted[kind]]
        else:
            key = hint[0]
            hinted = self._hinted[kind]
            buckets = [hinted.setdefault((key, value), set()) for value in values]
        for bucket in buckets:
            if add:
                bucket.add(term)
            else:
                bucket.discard(term)

    def _uncount(self, uid: str) -> None:
        slot = self._counted_at.pop(uid, None)
        if slot is not None:
            self._count(uid, slot, -1)
            self._uids_at[slot].discard(uid)

    def pod_added(self, slot: int | None, placed: PlacedPod) -> None:
        uid = placed.uid
        if uid in self.terms:
            self._uncount(uid)  # re-added (its node came back): count it afresh
        else:
            terms = compile_terms(placed.pod)
            if terms.empty:
                return
            self.terms[uid] = terms
        if slot is not None:
            self._count(uid, slot, +1)
            self._counted_at[uid] = slot
            self._uids_at.setdefault(slot, set()).add(uid)

    def pod_removed(self, slot: int | None, placed: PlacedPod) -> None:
        if placed.uid in self.terms:
            self._uncount(placed.uid)
            del self.terms[placed.uid]

    def node_removed(self, slot: int, node: object) -> None:
        for uid in sorted(self._uids_at.pop(slot, ())):
            self._counted_at.pop(uid, None)
            self._count(uid, slot, -1)

    def matching(
        self, kind: str, pod: PodInfo, namespace_labels: Mapping[str, str]
    ) -> list[tuple[AffinityTerm, npt.NDArray[np.intp], npt.NDArray[np.int64]]]:
        """``(term, slots, counts)`` for every distinct placed term of ``kind`` that ``pod``
        falls under."""
        candidates = set(self._unhinted[kind])
        hinted = self._hinted[kind]
        for item in pod.labels.items():
            bucket = hinted.get(item)
            if bucket:
                candidates |= bucket
        groups = self.by_term[kind]
        out = []
        # Contributions are summed, so the (hash-dependent) order of the set does not matter.
        for term in candidates:
            per_slot = groups[term]
            if term.matches(pod, namespace_labels):
                slots = np.fromiter(per_slot.keys(), dtype=np.intp, count=len(per_slot))
                counts = np.fromiter(per_slot.values(), dtype=np.int64, count=len(per_slot))
                out.append((term, slots, counts))
        return out


class InterPodAffinityArgs(PluginArgs):
    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=100, alias="hardPodAffinityWeight")
    ignore_preferred_terms_of_existing_pods: bool = Field(default=False, alias="ignorePreferredTermsOfExistingPods")


class _DomainCounts:
    """Sums per (topology key, label code), as kube's ``topologyToMatchedTermCount`` /
    ``scoreMap``: one int64 table per key, indexed by the state's label codes of that key."""

    __slots__ = ("state", "tables", "touched")

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.tables: dict[str, npt.NDArray[np.int64]] = {}
        self.touched = False
        """Whether anything was ever added (kube: the map is non-empty)."""

    def add_slots(self, key: str, slots: npt.NDArray[np.intp], amounts: npt.NDArray[np.int64] | int) -> None:
        """Add ``amounts`` for the nodes in ``slots``, in their domain of ``key``; nodes lacking
        the key count nothing (kube)."""
        if slots.size == 0:
            return
        codes = self.state.labels.codes(key)[slots]
        keep = codes > 0
        if not keep.any():
            return
        table = self.tables.get(key)
        if table is None:
            table = self.tables[key] = np.zeros(self.state.labels.domain_count(key), np.int64)
        values = np.broadcast_to(np.asarray(amounts, dtype=np.int64), codes.shape)
        np.add.at(table, codes[keep], values[keep])
        self.touched = True

    def __bool__(self) -> bool:
        return self.touched

    def positive_codes(self, key: str) -> npt.NDArray[np.intp]:
        table = self.tables.get(key)
        return np.empty(0, dtype=np.intp) if table is None else np.flatnonzero(table > 0)

    def keys(self) -> list[str]:
        return sorted(self.tables)


def _slots(state: ClusterState, pods: list[PlacedPod]) -> npt.NDArray[np.intp]:
    """Slots of the nodes the pods are on (pods on unknown nodes are left out)."""
    slots = [state.nodes.slot_of(p.node_name) for p in pods]
    return np.array([s for s in slots if s is not None], dtype=np.intp)


@dataclass(slots=True)
class _FilterState:
    terms: PodTerms
    affinity: _DomainCounts
    anti_affinity: _DomainCounts
    existing_anti_affinity: _DomainCounts
    matches_own_terms: bool


class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME
    Args = InterPodAffinityArgs
    STATE_EXTENSIONS = (PlacedPodTerms,)

    # ------------------------------------------------------------------ filter

    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        state, pod = cycle.state, cycle.pod
        terms = compile_terms(pod)
        if (
            not terms.required_affinity
            and not terms.required_anti_affinity
            and not state.pods.any_with_required_anti_affinity
        ):
            return Status.skip(), None
        placed_terms: PlacedPodTerms = state.ensure_extension(PlacedPodTerms)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
        existing = _DomainCounts(state)
        namespace_labels = state.policies.namespace_labels(pod.namespace)
        for term, slots, counts in placed_terms.matching("required_anti_affinity", pod, namespace_labels):
            existing.add_slots(term.topology_key, slots, counts)
        required = tuple(t.resolved(state) for t in terms.required_affinity)
        repelling = tuple(t.resolved(state) for t in terms.required_anti_affinity)
        if not existing and not required and not repelling:
            return Status.skip(), None

        affinity = _DomainCounts(state)
        if required:
            first = required[0]
            # A placed pod counts for the affinity only if it matches every term.
            attracted = [
                p
                for p in state.pods.matching(first.namespace_scope(), first.selector)
                if all(t.matches(p.pod, {}) for t in required)
            ]
            slots = _slots(state, attracted)
            for t in required:
                affinity.add_slots(t.topology_key, slots, 1)
        anti_affinity = _DomainCounts(state)
        for term in repelling:
            slots = _slots(state, state.pods.matching(term.namespace_scope(), term.selector))
            anti_affinity.add_slots(term.topology_key, slots, 1)
        own = bool(required) and all(t.matches(pod, {}) for t in required)
        cycle.data[NAME] = _FilterState(PodTerms(required, repelling), affinity, anti_affinity, existing, own)
        return Status.success(), None

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        data: _FilterState | None = cycle.data.get(NAME)
        if data is None:
            return FilterResult.all_pass()
        state = cycle.state
        codes = np.full(nodes.size, -1, dtype=np.int32)
        # 1. required affinity
        if data.terms.required_affinity:
            has_keys = np.ones(nodes.size, dtype=bool)
            pods_exist = np.ones(nodes.size, dtype=bool)
            for term in data.terms.required_affinity:
                node_codes = state.labels.codes(term.topology_key)[nodes]
                has_keys &= node_codes != 0
                pods_exist &= np.isin(node_codes, data.affinity.positive_codes(term.topology_key))
            satisfied = has_keys & pods_exist
            if not data.affinity and data.matches_own_terms:
                satisfied = has_keys  # the first pod of a self-attracting group
            codes[~satisfied] = 0
        # 2. the pod's required anti-affinity
        if data.anti_affinity:
            violated = np.zeros(nodes.size, dtype=bool)
            for term in data.terms.required_anti_affinity:
                node_codes = state.labels.codes(term.topology_key)[nodes]
                violated |= np.isin(node_codes, data.anti_affinity.positive_codes(term.topology_key))
            codes[(codes < 0) & violated] = 1
        # 3. placed pods' required anti-affinity against this pod
        if data.existing_anti_affinity:
            violated = np.zeros(nodes.size, dtype=bool)
            for key in data.existing_anti_affinity.keys():
                node_codes = state.labels.codes(key)[nodes]
                violated |= np.isin(node_codes, data.existing_anti_affinity.positive_codes(key))
            codes[(codes < 0) & violated] = 2
        if (codes < 0).all():
            return FilterResult.all_pass()
        return FilterResult.from_codes(
            codes,
            (
                Status.unresolvable(messages.POD_AFFINITY_NOT_MATCH, plugin=NAME),
                Status.unschedulable(messages.POD_ANTI_AFFINITY_NOT_MATCH, plugin=NAME),
                Status.unschedulable(messages.EXISTING_ANTI_AFFINITY_NOT_MATCH, plugin=NAME),
            ),
        )

    # ------------------------------------------------------------------ score

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        state, pod = cycle.state, cycle.pod
        args: InterPodAffinityArgs = self.args  # type: ignore[assignment]  # self.args is typed as the base PluginArgs
        terms = compile_terms(pod)
        preferred = [(t.resolved(state), +1) for t in terms.preferred_affinity]
        preferred += [(t.resolved(state), -1) for t in terms.preferred_anti_affinity]
        if not preferred and (args.ignore_preferred_terms_of_existing_pods or not state.pods.any_with_affinity):
            return Status.skip()
        scores = _DomainCounts(state)
        # The incoming pod's preferred terms against every placed pod they select.
        for term, sign in preferred:
            slots = _slots(state, state.pods.matching(term.namespace_scope(), term.selector))
            scores.add_slots(term.topology_key, slots, sign * term.weight)
        # Placed pods' terms against the incoming pod (symmetry).
        if not args.ignore_preferred_terms_of_existing_pods or preferred:
            namespace_labels = state.policies.namespace_labels(pod.namespace)
            placed_terms: PlacedPodTerms = state.ensure_extension(PlacedPodTerms)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
            hard_weight = args.hard_pod_affinity_weight
            if hard_weight > 0:
                for term, slots, counts in placed_terms.matching("required_affinity", pod, namespace_labels):
                    scores.add_slots(term.topology_key, slots, counts * hard_weight)
            for kind, sign in (("preferred_affinity", +1), ("preferred_anti_affinity", -1)):
                for term, slots, counts in placed_terms.matching(kind, pod, namespace_labels):
                    scores.add_slots(term.topology_key, slots, counts * (sign * term.weight))
        if not scores:
            return Status.skip()
        cycle.data[NAME + "/score"] = scores
        return Status.success()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        scores: _DomainCounts = cycle.data[NAME + "/score"]
        state = cycle.state
        total = np.zeros(nodes.size, dtype=np.int64)
        for key in scores.keys():
            table = scores.tables[key]
            node_codes = state.labels.codes(key)[nodes]
            # Codes newer than the table (none within one cycle) would count 0.
            total += table[np.minimum(node_codes, table.size - 1)] * (node_codes < table.size)
        return total

    def normalize_score(
        self, cycle: CycleContext, nodes: NodeArray, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        if scores.size == 0:
            return scores
        low, high = int(scores.min()), int(scores.max())
        if high == low:
            return np.zeros(scores.shape, dtype=np.int64)
        # float64(MaxNodeScore) * (float64(score-min) / float64(max-min)), truncated.
        return (float(MAX_NODE_SCORE) * ((scores - low) / float(high - low))).astype(np.int64)
