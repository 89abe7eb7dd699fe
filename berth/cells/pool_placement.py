"""How a pool's policy shapes the placement of its replicas: pure functions over pods and nodes.

The cell asks the placement engine about a replica *as the pool's policy sees it*:

- a capacity class (:func:`constrained`), by the providers' spot labels
  (:mod:`berth.kube.capacity`): ``on-demand`` adds to every required term the pod already has
  one ``NotIn`` expression per spot label (e.g. ``karpenter.sh/capacity-type NotIn [spot]``,
  ``cloud.google.com/gke-spot NotIn [true]``; a node without the label passes, as in
  Karpenter); ``spot`` turns each term into one term per spot label with its ``In`` expression
  (terms are ORed, expressions within one ANDed), so any provider's spot node qualifies;
- preferred regions (``carbonAware.preferredRegions``): a preferred node-affinity term on
  ``topology.kubernetes.io/region`` (:data:`REGION_PREFERENCE_WEIGHT`);
- score terms (:func:`score_terms`): the existing NodeCost plugin for pools with a cost policy
  and CarbonIntensity for carbon-aware pools, added to the profile for that pool's replicas only;
- cache and data preferences (:func:`with_preferences`): ``cacheAware`` names the pool's model
  and ``dataLocality.vectorStoreAffinity`` the pods holding its data, in the annotations the
  profile's ModelCache and DataLocality plugins score (``berth.io/model``,
  ``berth.io/data-locality``), unless the replica already sets them;
- spot instance types (:func:`instance_type_order`, :func:`of_instance_type`):
  ``spotStrategy.instanceTypes`` restricts spot replicas to those types (the node label
  ``node.kubernetes.io/instance-type``), tried fewest-of-the-pool's-spot-replicas first;
- cached nodes (:func:`holds_model`, :func:`cached_nodes`, :func:`on_nodes`):
  ``cacheAware.preloadStrategy`` — a node holds the pool's model when its
  ``berth.io/cached-models`` label or annotation lists it or it matches the preload selector; while
  fewer than ``minCachedReplicas`` replicas run on such nodes a replica is first tried on them
  alone (a required ``metadata.name In`` term). Both facts come from node events, so a replay
  sees the same cache state. The preload selector is also a preferred node-affinity term
  weighted ``cacheHitWeight x 100``;
- fast scheduling (:func:`max_nodes_to_score`): ``scheduling.fastScheduling.maxNodesToScore``
  (when ``enabled``) is the per-cycle cap ``Engine.schedule(..., max_nodes_to_score=...)`` takes
  (:mod:`berth.core.filtering`: the cycle stops filtering after that many feasible nodes, from a
  start derived from the pod UID).

What a replica costs (:func:`replica_cost_per_hour`) is its share of its node's price: its GPUs
over the node's GPUs (a fraction counts as that share of one GPU), or for CPU-only replicas its
CPU over the node's allocatable CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from berth.core.labels import compile_selector
from berth.core.node_selectors import NODE_NAME_FIELD
from berth.core.plugins.cache import ANNOTATION_CACHED_MODELS, ANNOTATION_DATA_LOCALITY, ANNOTATION_MODEL
from berth.kube.capacity import SPOT_LABELS, SpotLabel
from berth.schemas import NodeInfo, PodInfo
from berth.schemas.agentpool import LABEL_INSTANCE_TYPE, AgentPoolSpec, NodeLabelSelector, PreloadStrategy
from berth.schemas.cluster import (
    Affinity,
    LabelSelector,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
)

from .pools import PoolPolicy
from .scaling import CapacityClass, ProbedReplica

LABEL_REGION = "topology.kubernetes.io/region"
COST_SCORE_WEIGHT = 3
CARBON_SCORE_WEIGHT = 3
REGION_PREFERENCE_WEIGHT = 50


def constrained(
    pod: PodInfo, capacity: CapacityClass, regions: Iterable[str] = (), spot_labels: Sequence[SpotLabel] = SPOT_LABELS
) -> PodInfo:
    """``pod`` restricted to nodes of ``capacity`` class (by ``spot_labels``) and preferring
    ``regions``."""
    regions = tuple(sorted(set(regions)))
    if capacity == "any" and not regions:
        return pod
    affinity = pod.affinity or Affinity()
    node_affinity = affinity.node_affinity or NodeAffinity()
    required = node_affinity.required
    if capacity != "any":
        required = _in_capacity_class(required or (NodeSelectorTerm(),), capacity, spot_labels)
    preferred = node_affinity.preferred
    if regions:
        preferred = (
            *preferred,
            PreferredSchedulingTerm(
                weight=REGION_PREFERENCE_WEIGHT,
                preference=NodeSelectorTerm(
                    match_expressions=(NodeSelectorRequirement(key=LABEL_REGION, operator="In", values=regions),)
                ),
            ),
        )
    node_affinity = node_affinity.model_copy(update={"required": required, "preferred": preferred})
    return pod.model_copy(update={"affinity": affinity.model_copy(update={"node_affinity": node_affinity})})


def _in_capacity_class(
    terms: Sequence[NodeSelectorTerm], capacity: CapacityClass, spot_labels: Sequence[SpotLabel]
) -> tuple[NodeSelectorTerm, ...]:
    def extended(term: NodeSelectorTerm, *expressions: NodeSelectorRequirement) -> NodeSelectorTerm:
        return term.model_copy(update={"match_expressions": (*term.match_expressions, *expressions)})

    if capacity == "spot":
        return tuple(
            extended(term, NodeSelectorRequirement(key=label.key, operator="In", values=label.spot_values))
            for term in terms
            for label in spot_labels
        )
    not_spot = tuple(
        NodeSelectorRequirement(key=label.key, operator="NotIn", values=label.spot_values) for label in spot_labels
    )
    return tuple(extended(term, *not_spot) for term in terms)


def with_preferences(pod: PodInfo, policy: AgentPoolSpec | None) -> PodInfo:
    """``pod`` annotated with the pool's cache and data preferences, and preferring the pool's
    preload nodes (see the module docstring); annotations the pod already has win."""
    if policy is None:
        return pod
    wanted: dict[str, str] = {}
    cache, data = policy.scheduling.cache_aware, policy.scheduling.data_locality
    if cache is not None and cache.enabled and policy.model:
        wanted[ANNOTATION_MODEL] = policy.model
    if data is not None and data.vector_store_affinity:
        wanted[ANNOTATION_DATA_LOCALITY] = ",".join(data.vector_store_affinity)
    missing = {key: value for key, value in wanted.items() if key not in pod.annotations}
    if missing:
        pod = pod.model_copy(update={"annotations": {**pod.annotations, **missing}})
    preload = preload_strategy(policy)
    weight = round(cache.cache_hit_weight * 100) if cache is not None else 0
    if preload is None or preload.nodes is None or weight < 1:
        return pod
    return _preferring(pod, _as_node_term(preload.nodes.label_selector), weight)


def _preferring(pod: PodInfo, term: NodeSelectorTerm, weight: int) -> PodInfo:
    affinity = pod.affinity or Affinity()
    node_affinity = affinity.node_affinity or NodeAffinity()
    preferred = (*node_affinity.preferred, PreferredSchedulingTerm(weight=weight, preference=term))
    node_affinity = node_affinity.model_copy(update={"preferred": preferred})
    return pod.model_copy(update={"affinity": affinity.model_copy(update={"node_affinity": node_affinity})})


def _as_node_term(selector: NodeLabelSelector) -> NodeSelectorTerm:
    expressions = [
        NodeSelectorRequirement(key=key, operator="In", values=(value,))
        for key, value in sorted(selector.match_labels.items())
    ]
    expressions += [
        NodeSelectorRequirement(key=e.key, operator=e.operator, values=e.values) for e in selector.match_expressions
    ]
    return NodeSelectorTerm(match_expressions=tuple(expressions))


def _with_required(
    pod: PodInfo,
    *,
    expressions: tuple[NodeSelectorRequirement, ...] = (),
    fields: tuple[NodeSelectorRequirement, ...] = (),
) -> PodInfo:
    """``pod`` with ``expressions`` and ``fields`` ANDed into every required node-affinity term."""
    affinity = pod.affinity or Affinity()
    node_affinity = affinity.node_affinity or NodeAffinity()
    terms = tuple(
        term.model_copy(
            update={
                "match_expressions": (*term.match_expressions, *expressions),
                "match_fields": (*term.match_fields, *fields),
            }
        )
        for term in (node_affinity.required or (NodeSelectorTerm(),))
    )
    node_affinity = node_affinity.model_copy(update={"required": terms})
    return pod.model_copy(update={"affinity": affinity.model_copy(update={"node_affinity": node_affinity})})


# -- spot instance types ---------------------------------------------------------------------


def spot_instance_types(policy: AgentPoolSpec | None) -> tuple[str, ...]:
    cost = policy.cost if policy is not None else None
    return cost.spot_instance_types if cost is not None else ()


def instance_type_order(types: Sequence[str], taken: Mapping[str, int]) -> tuple[str, ...]:
    """``types`` with the fewest of the pool's spot replicas (``taken``) first; ties keep the
    pool's order."""
    return tuple(sorted(types, key=lambda t: (taken.get(t, 0), types.index(t))))


def of_instance_type(pod: PodInfo, instance_type: str) -> PodInfo:
    """``pod`` restricted to nodes of ``instance_type``."""
    expression = NodeSelectorRequirement(key=LABEL_INSTANCE_TYPE, operator="In", values=(instance_type,))
    return _with_required(pod, expressions=(expression,))


def spot_types_taken(members: Iterable[PodInfo], nodes: Mapping[str, NodeInfo]) -> dict[str, int]:
    """How many of ``members`` run on spot nodes of each instance type."""
    taken: dict[str, int] = {}
    for member in members:
        node = nodes.get(member.node_name or "")
        if node is not None and node.capacity_type == "spot":
            kind = node.labels.get(LABEL_INSTANCE_TYPE, "")
            taken[kind] = taken.get(kind, 0) + 1
    return taken


# -- cached nodes ----------------------------------------------------------------------------


def preload_strategy(policy: AgentPoolSpec | None) -> PreloadStrategy | None:
    cache = policy.scheduling.cache_aware if policy is not None else None
    return cache.preload_strategy if cache is not None and cache.enabled else None


def holds_model(node: NodeInfo, policy: AgentPoolSpec) -> bool:
    """Whether ``node`` holds the pool's model: listed in its ``berth.io/cached-models`` label or
    annotation, or picked by the pool's preload selector."""
    listed = node.labels.get(ANNOTATION_CACHED_MODELS) or node.annotations.get(ANNOTATION_CACHED_MODELS) or ""
    if policy.model and policy.model in {part.strip() for part in listed.split(",")}:
        return True
    preload = preload_strategy(policy)
    if preload is None or preload.nodes is None:
        return False
    selector = preload.nodes.label_selector
    compiled = compile_selector(
        LabelSelector(match_labels=selector.match_labels, match_expressions=selector.match_expressions)
    )
    return compiled.matches(node.labels)


def cached_nodes(policy: AgentPoolSpec | None, nodes: Mapping[str, NodeInfo]) -> tuple[str, ...]:
    """The nodes holding the pool's model, by name."""
    if policy is None:
        return ()
    return tuple(name for name in sorted(nodes) if holds_model(nodes[name], policy))


def cached_short(policy: AgentPoolSpec | None, members: Iterable[PodInfo], cached: Sequence[str]) -> int:
    """How many more replicas ``minCachedReplicas`` wants on cached nodes (0: none)."""
    preload = preload_strategy(policy)
    if preload is None or not preload.min_cached_replicas:
        return 0
    names = set(cached)
    on_cached = sum(1 for member in members if member.node_name in names)
    return max(0, preload.min_cached_replicas - on_cached)


def on_nodes(pod: PodInfo, names: Sequence[str]) -> PodInfo:
    """``pod`` restricted to the nodes ``names``."""
    field = NodeSelectorRequirement(key=NODE_NAME_FIELD, operator="In", values=tuple(names))
    return _with_required(pod, fields=(field,))


def score_terms(policy: PoolPolicy | None) -> tuple[tuple[str, int], ...]:
    """The Score plugins (and weights) a pool's replicas are placed with beyond the profile's."""
    if policy is None:
        return ()
    terms: list[tuple[str, int]] = []
    if policy.cost is not None:
        terms.append(("NodeCost", COST_SCORE_WEIGHT))
    if policy.carbon is not None:
        terms.append(("CarbonIntensity", CARBON_SCORE_WEIGHT))
    return tuple(terms)


def max_nodes_to_score(policy: AgentPoolSpec | None) -> int | None:
    """A pool's ``fastScheduling.maxNodesToScore`` when enabled, else None (every node, or the
    profile's ``percentageOfNodesToScore``)."""
    fast = policy.scheduling.fast_scheduling if policy is not None else None
    if fast is None or not fast.enabled:
        return None
    return fast.max_nodes_to_score


def preferred_regions(policy: PoolPolicy | None) -> tuple[str, ...]:
    carbon = policy.carbon if policy is not None else None
    return carbon.preferred_regions if carbon is not None else ()


def replica_cost_per_hour(pod: PodInfo, node: NodeInfo) -> float | None:
    """The replica's share of ``node.price_per_hour`` (None when the node has no price)."""
    if node.price_per_hour is None:
        return None
    gpus = len(node.gpus) or node.allocatable.get("nvidia.com/gpu", 0)
    if gpus and pod.gpu_fraction_milli is not None:
        return node.price_per_hour * pod.gpu_fraction_milli / 1000 / gpus
    if gpus and pod.whole_gpus:
        return node.price_per_hour * min(pod.whole_gpus, gpus) / gpus
    cpu = node.allocatable.get("cpu", 0)
    if cpu:
        return node.price_per_hour * min(pod.requests.get("cpu", 0), cpu) / cpu
    return None


def probed(pod: PodInfo, node: NodeInfo) -> ProbedReplica:
    return ProbedReplica(
        node=node.name,
        spot=node.capacity_type == "spot",
        cost_per_hour=replica_cost_per_hour(pod, node),
        carbon_intensity=node.carbon_intensity,
    )
