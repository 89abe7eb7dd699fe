"""The engine's shortcuts give exactly what the general computation gives (property tests).

- :func:`weighted_fragmentation_one` (plain integers, one node) against
  :func:`weighted_fragmentation_batch` (numpy) for random workloads, measures and node states;
- the selection ranking's cut (``_keys_above_cut``) against a full sort of the selection keys,
  on totals with many equal values, as the default profile produces them.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.gpu.fragmentation import (
    BERTH_MEASURE,
    FGD_MEASURE,
    Measure,
    TargetWorkload,
    weighted_fragmentation_batch,
    weighted_fragmentation_one,
)
from berth.core.ranking import HASH_BITS, _keys_above_cut

MODELS = ("A100", "H100", "L4")

shape = st.one_of(
    st.tuples(st.integers(1, 64_000), st.just(0), st.just(0), st.just(frozenset())),
    st.tuples(
        st.integers(0, 64_000),
        st.sampled_from((1, 2, 4, 8)),
        st.just(1000),
        st.frozensets(st.sampled_from(MODELS), max_size=2),
    ),
    st.tuples(
        st.integers(0, 64_000), st.just(1), st.integers(1, 999), st.frozensets(st.sampled_from(MODELS), max_size=2)
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    shapes=st.lists(shape, min_size=1, max_size=12),
    weights=st.lists(st.integers(1, 1000), min_size=12, max_size=12),
    free=st.lists(st.integers(-200, 1300), max_size=8),
    cpu=st.integers(-4000, 128_000),
    model=st.sampled_from((None, *MODELS)),
    measure=st.sampled_from((BERTH_MEASURE, FGD_MEASURE, Measure(0, 1), Measure(3, 7))),
)
def test_plain_fragmentation_equals_the_batch(shapes, weights, free, cpu, model, measure) -> None:
    workload = TargetWorkload(
        cpu_milli=[s[0] for s in shapes],
        num_gpu=[s[1] for s in shapes],
        gpu_milli=[s[2] for s in shapes],
        allowed_models=tuple(s[3] for s in shapes),
        weight=weights[: len(shapes)],
    )
    width = max(len(free), 1)
    matrix = np.array([free + [0] * (width - len(free))], dtype=np.int64)
    batch = weighted_fragmentation_batch(matrix, [cpu], workload.model_access([model]), workload, measure)
    assert weighted_fragmentation_one(free, cpu, model, workload, measure) == int(batch[0])


def _keys(totals: list[int], ties: list[int]) -> np.ndarray:
    return (np.array(totals, dtype=np.int64) << HASH_BITS) | np.array(ties, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    size=st.integers(50, 3000),
    wanted=st.integers(1, 12),
    spread=st.integers(1, 4),
    narrow_hash=st.booleans(),
)
def test_rank_cut_keeps_the_best_keys(data, size, wanted, spread, narrow_hash) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    totals = (900 + rng.integers(0, spread, size)).tolist()
    # A narrow hash (many equal keys, or bits that are not spread) may defeat the cut, never
    # its exactness.
    top_bits = 8 if narrow_hash else HASH_BITS
    ties = rng.integers(0, 1 << top_bits, size).tolist()
    key = _keys(totals, ties)
    floor = max(totals)
    above = 0
    while sum(t >= floor for t in totals) < wanted:
        above = sum(t >= floor for t in totals)
        floor = max(t for t in totals if t < floor)
    at_floor = sum(t == floor for t in totals)
    top = _keys_above_cut(key, floor, wanted, above, at_floor)
    expected = np.lexsort((np.arange(size), -key))[:wanted]
    if top is not None:
        assert top.tolist() == sorted(top.tolist())
        ranked = top[np.lexsort((top, -key[top]))][:wanted]
        assert ranked.tolist() == expected.tolist()


def test_rank_cut_applies_on_a_plateau_of_equal_totals() -> None:
    # gpu-mixed's usual cycle: most of 5,000 nodes share the best total.
    rng = np.random.default_rng(7)
    key = _keys([952] * 4400 + [946] * 600, rng.integers(0, 1 << HASH_BITS, 5000).tolist())
    top = _keys_above_cut(key, 952, 10, 0, 4400)
    assert top is not None and 10 <= top.size < 200
    assert top[np.lexsort((top, -key[top]))][:10].tolist() == np.lexsort((np.arange(5000), -key))[:10].tolist()


def test_slots_in_name_order_or_not_give_the_same_decisions() -> None:
    # Nodes added in name order get slots 0..n-1 (the framework then copies memo rows instead
    # of gathering them); added in reverse they do not. The decisions must not differ.
    from bench.engine import gpu_mixed
    from berth.core.config import default_document
    from berth.core.engine import Engine

    nodes = gpu_mixed.build_nodes(40)
    pods = gpu_mixed.build_pods(120, seed=5)
    runs = []
    for added in (nodes, nodes[::-1]):
        engine = Engine(default_document())
        for node in added:
            engine.upsert_node(node)
        runs.append([engine.schedule(pod).decision.to_json() for pod in pods])
        runs[-1].append(engine.state.nodes.order_is_identity())
    assert runs[0][-1] is True and runs[1][-1] is False
    assert runs[0][:-1] == runs[1][:-1]
