"""cacheAware / dataLocality: a pool's replicas carry the annotations the profile's ModelCache and
DataLocality plugins score, so they prefer nodes with the model cached or near the pool's data
(the decision cell over the real placement engine)."""

from __future__ import annotations

from berth.schemas import NodeObserved, PlacePods, PodInfo, PodObserved
from berth.schemas.samples import T0, h100_node

from berth.cells.pool_placement import with_preferences

from .test_pool_cell import NS, Cell, commands, pools, replica

BASE = {"model": "llama-70b", "tokensPerSecondPerReplica": 1000, "ttftSloMs": 2000, "maxReplicas": 8}


def node(name: str, *, cached: str | None = None, zone: str = "zone-a") -> NodeObserved:
    info = h100_node(name, zone=zone)
    if cached is not None:
        info = info.model_copy(update={"labels": {**info.labels, "berth.io/cached-models": cached}})
    return NodeObserved(node=info, observed_at=T0)


def placed(cell: Cell, event) -> tuple[str, dict[str, int]]:
    """Where the cell placed the pending replica, and the ModelCache/DataLocality scores it gave."""
    decisions = cell(event)
    [place] = commands(decisions, PlacePods)
    [record] = [d.record for d in decisions if d.record.outcome == "placed"]
    scores = {
        v.node: {k: s for k, s in v.scores.items() if k in ("ModelCache", "DataLocality")} for v in record.verdicts
    }
    return place.placements[0].node, scores


def test_a_cache_aware_pool_prefers_the_node_with_its_model_cached():
    nodes = [node("a-gpu"), node("b-gpu"), node("c-gpu", cached="llama-70b, mistral-7b")]
    aware = Cell(pools(llama={**BASE, "scheduling": {"cacheAware": {"enabled": True}}}))
    for event in nodes:
        aware(event)
    where, scores = placed(aware, replica("llama", 0))
    assert where == "c-gpu"
    assert scores["c-gpu"]["ModelCache"] > 0

    # Without cacheAware the replica names no model and ModelCache has nothing to say.
    plain = Cell(pools(llama=BASE))
    for event in nodes:
        plain(event)
    _, scores = placed(plain, replica("llama", 0))
    assert all("ModelCache" not in s for s in scores.values())


def test_a_pool_with_data_locality_goes_next_to_its_vector_store():
    store = PodInfo(
        uid="uid-store",
        namespace=NS,
        name="vectors-0",
        requests={"cpu": 1000},
        node_name="b-gpu",
        creation_time=T0,
        phase="Running",
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
    )
    cell = Cell(pools(llama={**BASE, "scheduling": {"dataLocality": {"vectorStoreAffinity": ["vectors-0"]}}}))
    for event in (node("a-gpu"), node("b-gpu"), node("c-gpu", zone="zone-b"), PodObserved(pod=store, observed_at=T0)):
        cell(event)
    where, scores = placed(cell, replica("llama", 0))
    assert where == "b-gpu"
    assert scores["b-gpu"]["DataLocality"] > scores["a-gpu"]["DataLocality"] > scores["c-gpu"]["DataLocality"]


def test_annotations_the_replica_already_has_win():
    scheduling = {"cacheAware": {"enabled": True}, "dataLocality": {"vectorStoreAffinity": ["s-0", "ns/s-1"]}}
    [policy] = pools(llama={**BASE, "scheduling": scheduling}).values()
    pod = replica("llama", 0).pod
    annotated = with_preferences(pod, policy)
    assert annotated.annotations == {"berth.io/model": "llama-70b", "berth.io/data-locality": "s-0,ns/s-1"}
    own = pod.model_copy(update={"annotations": {"berth.io/model": "llama-70b-awq"}})
    assert with_preferences(own, policy).annotations["berth.io/model"] == "llama-70b-awq"
    assert with_preferences(pod, None) is pod
