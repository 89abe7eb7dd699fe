"""Berth's score terms: cost, carbon, model cache, data locality, GPU availability (table tests)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from berth.schemas.cluster import GpuDevice, NodeInfo, PodInfo

from berth.core.framework import CycleContext
from berth.core.plugins.cache import DataLocality, ModelCache
from berth.core.plugins.carbon import CarbonIntensity
from berth.core.plugins.cost import NodeCost, linear_preference
from berth.core.plugins.gpu_devices import GpuAvailability, GpuDeviceExtension
from berth.core.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def node(name: str, **fields: object) -> NodeInfo:
    return NodeInfo(name=name, allocatable={"cpu": 8000}, **fields)  # type: ignore[arg-type]  # keyword arguments of mixed types, validated by pydantic


def pod(name: str = "p", node_name: str | None = None, **fields: object) -> PodInfo:
    return PodInfo(uid=name, namespace="default", name=name, node_name=node_name, creation_time=T0, **fields)  # type: ignore[arg-type]  # keyword arguments of mixed types, validated by pydantic


def scores(plugin: object, nodes: list[NodeInfo], p: PodInfo, bound: tuple[PodInfo, ...] = ()) -> dict[str, int | None]:
    state = ClusterState()
    for extension in getattr(plugin, "STATE_EXTENSIONS", ()):
        state.ensure_extension(extension)
    for n in nodes:
        state.upsert_node(n)
    for b in bound:
        state.upsert_bound_pod(b)
    cycle = CycleContext(p, state, "berth")
    order = state.nodes.order()
    pre = getattr(plugin, "pre_score", None)
    if pre is not None and pre(cycle, order).is_skip:
        return {name: None for name in state.nodes.names_of(order)}
    raw = plugin.score(cycle, order)  # type: ignore[attr-defined]  # the scoring plugins have score()
    normalized = plugin.normalize_score(cycle, order, raw)  # type: ignore[attr-defined]  # the scoring plugins have normalize_score()
    return dict(zip(state.nodes.names_of(order), (int(v) for v in normalized), strict=True))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, 2.0, 3.0], [100, 50, 0]),
        ([5.0, 5.0], [100, 100]),
        ([np.nan, 2.0], [0, 100]),
        ([np.nan, np.nan], [0, 0]),
    ],
)
def test_linear_preference(values: list[float], expected: list[int]) -> None:
    assert list(linear_preference(np.array(values))) == expected


def test_cost_prefers_cheaper_and_unpriced_spot() -> None:
    nodes = [
        node("a", price_per_hour=32.0),
        node("b", price_per_hour=12.0, capacity_type="spot"),
        node("c", price_per_hour=22.0),
        node("d", capacity_type="spot"),
        node("e"),
    ]
    assert scores(NodeCost(), nodes, pod()) == {"a": 0, "b": 100, "c": 50, "d": 50, "e": 0}


def test_carbon_prefers_cleaner_grids() -> None:
    nodes = [node("a", carbon_intensity=400.0), node("b", carbon_intensity=100.0), node("c")]
    assert scores(CarbonIntensity(), nodes, pod()) == {"a": 0, "b": 100, "c": 0}


def test_model_cache() -> None:
    nodes = [
        node("a", labels={"berth.io/cached-models": "llama-3-8b, mistral-7b"}),
        node("b", annotations={"berth.io/cached-models": "llama-3-70b"}),
        node("c"),
    ]
    wants = pod(annotations={"berth.io/model": "llama-3-70b"})
    assert scores(ModelCache(), nodes, wants) == {"a": 0, "b": 100, "c": 0}
    assert scores(ModelCache(), nodes, pod()) == {"a": None, "b": None, "c": None}  # not scored


def test_data_locality_prefers_the_node_then_the_zone() -> None:
    zone = "topology.kubernetes.io/zone"
    nodes = [node("a", labels={zone: "z1"}), node("b", labels={zone: "z1"}), node("c", labels={zone: "z2"})]
    store = pod("vector-0", node_name="a")
    wants = pod(annotations={"berth.io/data-locality": "vector-0, other/missing"})
    assert scores(DataLocality(), nodes, wants, (store,)) == {"a": 100, "b": 50, "c": 0}


def test_gpu_availability_keeps_gpu_nodes_for_gpu_pods() -> None:
    nodes = [node("cpu"), node("gpu", gpus=(GpuDevice(index=0), GpuDevice(index=1)))]
    assert scores(GpuAvailability(), nodes, pod()) == {"cpu": 100, "gpu": 0}
    state_scores = scores(GpuAvailability(), nodes[1:], pod(requests={"nvidia.com/gpu": 1}))
    assert state_scores == {"gpu": 50}
    assert GpuDeviceExtension.KEY == "GpuDeviceFit"
