"""Workload variants of the GPU trace (bench/gpu_trace/variants.py): shares reached, the other
classes kept, seeded determinism, errors.  A synthetic trace keeps them fast; one test runs
every variant on the real trace when it is present."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import typer

from bench.gpu_trace.__main__ import parse_variants
from bench.gpu_trace.policies import REGISTRY
from bench.gpu_trace.runner import allocation_curve, run_one, variant_generator, variant_trace
from bench.gpu_trace.trace import NODE_LISTS, POD_LIST_DEFAULT, NodeTable, PodTable, Trace, default_data_dir, load_trace
from bench.gpu_trace.variants import (
    VARIANTS,
    build_variant,
    class_share,
    draw_sequence,
    get_variant,
    has_gpu_spec,
    is_cpu_only,
    is_multi_gpu,
    is_sharing,
)


def synthetic_trace(n_pods: int = 1200, seed: int = 5) -> Trace:
    """A cluster of three GPU models and a pod mix like the trace's (13 % CPU-only, 38 % shares,
    1 % multi-GPU, the rest one whole GPU)."""
    rng = np.random.default_rng(seed)
    models = ("G2", "T4", "P100")
    node_gpus = (8, 2, 2)
    n_nodes = 60
    kinds = rng.choice(3, size=n_nodes, p=(0.5, 0.3, 0.2))
    nodes = NodeTable(
        names=tuple(f"node-{i:03d}" for i in range(n_nodes)),
        cpu_milli=np.where(kinds == 0, 96_000, 32_000).astype(np.int64),
        memory_mib=np.where(kinds == 0, 786_432, 262_144).astype(np.int64),
        gpu_count=np.array([node_gpus[k] for k in kinds], dtype=np.int64),
        model=tuple(models[k] for k in kinds),
    )
    cls = rng.choice(4, size=n_pods, p=(0.13, 0.38, 0.48, 0.01))
    num_gpu = np.select([cls == 0, cls == 3], [0, rng.choice([2, 4, 8], size=n_pods)], 1)
    share = np.select([cls == 0, cls == 1], [0, rng.choice([100, 250, 500, 700], size=n_pods)], 1000)
    pods = PodTable(
        names=tuple(f"pod-{i:05d}" for i in range(n_pods)),
        cpu_milli=rng.choice([1000, 4000, 8000], size=n_pods).astype(np.int64),
        memory_mib=rng.choice([2048, 8192, 16384], size=n_pods).astype(np.int64),
        num_gpu=num_gpu.astype(np.int64),
        gpu_milli=share.astype(np.int64),
        gpu_spec=tuple(frozenset() for _ in range(n_pods)),
    )
    return Trace(nodes, pods)


TRACE = synthetic_trace()
NON_DEFAULT = [name for name, v in VARIANTS.items() if v.kind != "default"]


def rows(pods: PodTable, mask: np.ndarray) -> Counter:
    """The pods of ``mask`` as a multiset of (resources, spec), names aside."""
    return Counter(
        (
            int(pods.cpu_milli[i]),
            int(pods.memory_mib[i]),
            int(pods.num_gpu[i]),
            int(pods.gpu_milli[i]),
            pods.gpu_spec[i],
        )
        for i in np.flatnonzero(mask)
    )


def tolerance(pods: PodTable, kind: str) -> float:
    """How close a share can get: one pod's worth of the measure."""
    if kind in ("cpu", "gpuspec"):
        return 1.0 / len(pods)
    return float(pods.total_gpu_milli.max() / pods.total_gpu_milli.sum())


@pytest.mark.parametrize("name", NON_DEFAULT)
def test_each_variant_reaches_its_share(name: str) -> None:
    variant = VARIANTS[name]
    pods = build_variant(TRACE, name, np.random.default_rng(1)).pods
    assert class_share(pods, variant.kind) == pytest.approx(variant.percent / 100, abs=tolerance(pods, variant.kind))
    assert len(set(pods.names)) == len(pods), "copies get names of their own"


@pytest.mark.parametrize("name", NON_DEFAULT)
def test_each_variant_is_deterministic_for_a_seed(name: str) -> None:
    first = build_variant(TRACE, name, variant_generator(42)).pods
    again = build_variant(TRACE, name, variant_generator(42)).pods
    other = build_variant(TRACE, name, variant_generator(43)).pods
    assert first.names == again.names and first.gpu_spec == again.gpu_spec
    for column in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"):
        assert np.array_equal(getattr(first, column), getattr(again, column))
    assert (first.names, first.gpu_spec) != (other.names, other.gpu_spec)


def test_cpu_variants_keep_every_gpu_pod() -> None:
    base = TRACE.pods
    for name in ("cpu050", "cpu250"):
        pods = build_variant(TRACE, name, np.random.default_rng(3)).pods
        assert rows(pods, ~is_cpu_only(pods)) == rows(base, ~is_cpu_only(base))
        # CPU-only pods come from the trace's CPU-only pods only.
        assert set(rows(pods, is_cpu_only(pods))) <= set(rows(base, is_cpu_only(base)))
    fewer = build_variant(TRACE, "cpu050", np.random.default_rng(3)).pods
    assert is_cpu_only(fewer).sum() < is_cpu_only(base).sum()
    # Shrinking draws without replacement: no CPU-only pod appears twice.
    assert not any(name.count("-v") for name in np.array(fewer.names)[is_cpu_only(fewer)])


def test_gpushare_variants_keep_cpu_pods_and_the_number_of_gpu_pods() -> None:
    base = TRACE.pods
    for name in ("gpushare40", "gpushare100"):
        pods = build_variant(TRACE, name, np.random.default_rng(3)).pods
        assert rows(pods, is_cpu_only(pods)) == rows(base, is_cpu_only(base))
        assert (pods.num_gpu > 0).sum() == (base.num_gpu > 0).sum()
        assert set(rows(pods, is_sharing(pods))) <= set(rows(base, is_sharing(base)))
    only_shares = build_variant(TRACE, "gpushare100", np.random.default_rng(3)).pods
    assert not ((only_shares.num_gpu > 0) & ~is_sharing(only_shares)).any()


def test_multigpu_variants_only_add_multi_gpu_pods() -> None:
    base = TRACE.pods
    pods = build_variant(TRACE, "multigpu40", np.random.default_rng(3)).pods
    assert rows(pods, ~is_multi_gpu(pods)) == rows(base, ~is_multi_gpu(base))
    assert is_multi_gpu(pods).sum() > is_multi_gpu(base).sum()
    assert set(rows(pods, is_multi_gpu(pods))) <= set(rows(base, is_multi_gpu(base)))


def test_gpuspec_variants_constrain_gpu_pods_to_a_model_that_can_hold_them() -> None:
    base = TRACE.pods
    pods = build_variant(TRACE, "gpuspec33", np.random.default_rng(3)).pods
    assert pods.names == base.names
    for column in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"):
        assert np.array_equal(getattr(pods, column), getattr(base, column))
    nodes = TRACE.nodes
    for i in np.flatnonzero(has_gpu_spec(pods)):
        (model,) = pods.gpu_spec[i]
        hosts = [n for n in range(len(nodes)) if nodes.model[n] == model]
        assert any(
            nodes.gpu_count[n] >= pods.num_gpu[i]
            and nodes.cpu_milli[n] >= pods.cpu_milli[i]
            and nodes.memory_mib[n] >= pods.memory_mib[i]
            for n in hosts
        )
    assert not any(pods.gpu_spec[i] for i in np.flatnonzero(pods.num_gpu == 0))
    # Every model is asked for: the draw follows supply, not a single favourite.
    assert {next(iter(s)) for s in pods.gpu_spec if s} == {"G2", "T4", "P100"}


def test_default_variant_is_the_trace_itself() -> None:
    assert build_variant(TRACE, "default", np.random.default_rng(0)) is TRACE
    assert variant_trace(TRACE, "default", 42) is TRACE


def test_unknown_variant_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown variant 'cpu999'.*known: default, cpu050"):
        build_variant(TRACE, "cpu999", np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown variant"):
        get_variant("gpushare")
    with pytest.raises(typer.BadParameter, match="unknown variant 'nope'"):
        parse_variants("default,nope")


def test_parse_variants_accepts_names_kinds_and_all() -> None:
    assert parse_variants("cpu200") == ["cpu200"]
    assert parse_variants("multigpu") == ["multigpu20", "multigpu30", "multigpu40", "multigpu50"]
    assert parse_variants("all") == list(VARIANTS)
    assert parse_variants("default, cpu050,default") == ["default", "cpu050"]


def test_draw_sequence_prefixes_are_subsets_then_copies() -> None:
    members = np.array([3, 5, 7, 9], dtype=np.int64)
    seq = draw_sequence(np.random.default_rng(0), members, 10)
    assert sorted(seq[:4].tolist()) == [3, 5, 7, 9]
    assert set(seq[4:].tolist()) <= {3, 5, 7, 9}
    assert draw_sequence(np.random.default_rng(0), members, 2).size == 2
    with pytest.raises(ValueError, match="empty class"):
        draw_sequence(np.random.default_rng(0), np.empty(0, dtype=np.int64), 1)


def test_every_policy_runs_on_a_variant_with_the_same_pods() -> None:
    demand = 1.3
    results = {p: run_one(TRACE, p, seed=7, demand=demand, variant="gpuspec33") for p in REGISTRY}
    arrived = {p: tuple(r.arrived_gpu_milli.tolist()) for p, r in results.items()}
    assert len(set(arrived.values())) == 1, "every policy sees the same arrivals"
    for result in results.values():
        curve = allocation_curve(result)
        assert len(curve) == 131
        assert 0 < result.allocation_at(130) <= 1
        assert curve[130] == pytest.approx(result.allocation_at(130))


_DATA = default_data_dir()
_HAVE_TRACE = (_DATA / NODE_LISTS["gpu"]).is_file() and (_DATA / POD_LIST_DEFAULT).is_file()


@pytest.mark.skipif(not _HAVE_TRACE, reason="Alibaba v2023 trace not present")
def test_variants_of_the_real_trace_reach_the_papers_shares() -> None:
    trace = load_trace(_DATA, "gpu")
    assert class_share(trace.pods, "cpu") == pytest.approx(0.133, abs=0.001)
    assert class_share(trace.pods, "gpushare") == pytest.approx(0.285, abs=0.001)
    assert class_share(trace.pods, "multigpu") == pytest.approx(0.073, abs=0.001)
    for name in NON_DEFAULT:
        variant = VARIANTS[name]
        pods = variant_trace(trace, name, 42).pods
        assert class_share(pods, variant.kind) == pytest.approx(variant.percent / 100, abs=0.002), name
