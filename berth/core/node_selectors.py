"""Node selectors (``nodeSelector``, node affinity terms) evaluated over many nodes at once.

Semantics are Kubernetes' ``labels.Requirement`` ones for nodes:

- ``In``: the key is present and its value is listed; ``NotIn``: the key is absent or its value is
  not listed; ``Exists`` / ``DoesNotExist``: presence; ``Gt`` / ``Lt``: the key is present, its
  value parses as a 64-bit integer and compares strictly.
- Requirements of one node selector term are ANDed; the terms of a node selector are ORed; a term
  without any requirement matches no node.

Evaluation works on the ClusterState's label index: for each label key an int32 code per node
slot (0 = key absent), so ``In`` is one ``np.isin`` over codes and no Python runs per node. Pod
label selectors, matched per object, are in :mod:`berth.core.labels`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from berth.core.state import ClusterState
from berth.schemas.cluster import NodeSelectorRequirement, NodeSelectorTerm

__all__ = [
    "NODE_NAME_FIELD",
    "match_node_selector",
    "match_node_selector_terms",
    "match_node_term",
    "match_required_node_affinity",
    "match_requirement",
]

NODE_NAME_FIELD = "metadata.name"
"""The one field ``matchFields`` may name (kube: ``metav1.ObjectNameField``)."""


def match_requirement(
    state: ClusterState, requirement: NodeSelectorRequirement, nodes: npt.NDArray[np.intp]
) -> npt.NDArray[np.bool_]:
    """One ``matchExpressions`` requirement over the node slots ``nodes``."""
    codes = state.labels.codes(requirement.key)[nodes]
    op = requirement.operator
    matched: npt.NDArray[np.bool_]
    if op == "Exists":
        matched = codes != 0
        return matched
    if op == "DoesNotExist":
        matched = codes == 0
        return matched
    if op in ("In", "NotIn"):
        wanted = state.labels.value_codes(requirement.key, requirement.values)
        hit = np.isin(codes, wanted) if wanted.size else np.zeros(codes.shape, dtype=bool)
        return hit if op == "In" else ~hit
    if op in ("Gt", "Lt"):
        bound = int(requirement.values[0])
        numbers, valid = state.labels.int_values(requirement.key)
        values, ok = numbers[codes], valid[codes]
        return ok & (values > bound if op == "Gt" else values < bound)
    raise ValueError(f"unsupported node selector operator {op!r}")


def _match_field(
    state: ClusterState, requirement: NodeSelectorRequirement, nodes: npt.NDArray[np.intp]
) -> npt.NDArray[np.bool_]:
    if requirement.key != NODE_NAME_FIELD:
        # kube rejects other fields at validation time; a selector we cannot evaluate matches
        # nothing rather than everything.
        return np.zeros(nodes.shape, dtype=bool)
    slots = [state.nodes.slot_of(name) for name in requirement.values]
    wanted = np.array([slot for slot in slots if slot is not None], dtype=np.intp)
    hit = np.isin(nodes, wanted)
    if requirement.operator == "In":
        return hit
    if requirement.operator == "NotIn":
        return ~hit
    return np.zeros(nodes.shape, dtype=bool)


def match_node_term(state: ClusterState, term: NodeSelectorTerm, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """One node selector term: all its expressions and fields hold. An empty term matches no
    node (kube: "a null or empty node selector term matches no objects")."""
    if not term.match_expressions and not term.match_fields:
        return np.zeros(nodes.shape, dtype=bool)
    mask = np.ones(nodes.shape, dtype=bool)
    for requirement in term.match_expressions:
        mask &= match_requirement(state, requirement, nodes)
    for requirement in term.match_fields:
        mask &= _match_field(state, requirement, nodes)
    return mask


def match_node_selector_terms(
    state: ClusterState, terms: Sequence[NodeSelectorTerm], nodes: npt.NDArray[np.intp]
) -> npt.NDArray[np.bool_]:
    """Terms ORed. No terms at all matches no node (kube validates that away)."""
    mask = np.zeros(nodes.shape, dtype=bool)
    for term in terms:
        mask |= match_node_term(state, term, nodes)
    return mask


def match_node_selector(
    state: ClusterState, node_selector: Mapping[str, str], nodes: npt.NDArray[np.intp]
) -> npt.NDArray[np.bool_]:
    """``spec.nodeSelector``: every key present with exactly that value."""
    mask = np.ones(nodes.shape, dtype=bool)
    for key, value in node_selector.items():
        code = state.labels.value_code(key, value)
        mask &= state.labels.codes(key)[nodes] == code
    return mask


def match_required_node_affinity(
    state: ClusterState,
    node_selector: Mapping[str, str],
    required: Sequence[NodeSelectorTerm] | None,
    nodes: npt.NDArray[np.intp],
) -> npt.NDArray[np.bool_]:
    """kube's ``GetRequiredNodeAffinity(pod).Match``: ``nodeSelector`` AND the required node
    affinity terms (None: no requirement)."""
    mask = match_node_selector(state, node_selector, nodes) if node_selector else np.ones(nodes.shape, dtype=bool)
    if required is not None:
        mask &= match_node_selector_terms(state, required, nodes)
    return mask
