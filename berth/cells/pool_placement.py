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
- fast scheduling (:func:`max_nodes_to_score`): ``scheduling.fastScheduling.maxNodesToScore``
  (when ``enabled``) is the per-cycle cap ``Engine.schedule(..., max_nodes_to_score=...)`` takes
  (:mod:`berth.core.filtering`: the cycle stops filtering after that many feasible nodes, from a
  start derived from the pod UID). It is read only once the AgentPool schema keeps the block
  (``schemas/agentpool.py`` ignores unknown ``scheduling`` keys today) and ``place_replica``
  passes it on.

What a replica costs (:func:`replica_cost_per_hour`) is its share of its node's price: its GPUs
over the node's GPUs (a fraction counts as that share of one GPU), or for CPU-only replicas its
CPU over the node's allocatable CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from berth.core.plugins.cache import ANNOTATION_DATA_LOCALITY, ANNOTATION_MODEL
from berth.kube.capacity import SPOT_LABELS, SpotLabel
from berth.schemas import NodeInfo, PodInfo
from berth.schemas.cluster import (
    Affinity,
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


def with_preferences(pod: PodInfo, policy: PoolPolicy | None) -> PodInfo:
    """``pod`` annotated with the pool's cache and data preferences (see the module docstring);
    annotations the pod already has win."""
    if policy is None:
        return pod
    wanted: dict[str, str] = {}
    cache, data = policy.scheduling.cache_aware, policy.scheduling.data_locality
    if cache is not None and cache.enabled and policy.model:
        wanted[ANNOTATION_MODEL] = policy.model
    if data is not None and data.vector_store_affinity:
        wanted[ANNOTATION_DATA_LOCALITY] = ",".join(data.vector_store_affinity)
    missing = {key: value for key, value in wanted.items() if key not in pod.annotations}
    if not missing:
        return pod
    return pod.model_copy(update={"annotations": {**pod.annotations, **missing}})


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


def max_nodes_to_score(policy: PoolPolicy | None) -> int | None:
    """A pool's ``fastScheduling.maxNodesToScore`` when enabled, else None (every node, or the
    profile's ``percentageOfNodesToScore``)."""
    fast = getattr(policy.scheduling, "fast_scheduling", None) if policy is not None else None
    if fast is None or not getattr(fast, "enabled", True):
        return None
    limit = getattr(fast, "max_nodes_to_score", None)
    return int(limit) if limit else None


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
