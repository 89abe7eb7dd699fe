"""Workload variants of the default trace, as the ATC'23 paper evaluates FGD on (its section 6).

The paper (Weng et al., "Beware of Fragmentation", USENIX ATC'23) runs every policy on the
default trace and on variants of it in which one class of pods takes a larger (or smaller)
share, the other classes keeping their pods and their relative mix.  The variant files it used
are ``openb_pod_list_{cpu050..cpu250, gpushare40..100, multigpu20..50, gpuspec10..33}.csv``
of ``alibaba/clusterdata`` (cluster-trace-gpu-v2023), which its artifact
(``hkust-adsl/kubernetes-scheduler-simulator``, ``experiments/run_scripts``) replays with
``-tune 1.3`` and seeds 42-51; Figs. 11-14 plot them.  We do not ship those files: we build the
same kinds of variant from the shipped default trace, with a seed, by the method the files
show (we measured them; see bench/gpu_trace/README.md):

* ``cpuNNN`` - CPU-only pods are NNN/10 % of all pods (5, 10, 20, 25 %; the default trace has
  13.3 %).  Every GPU pod is kept; the CPU-only pods are a random subset of the trace's
  (fewer) or all of them plus copies drawn uniformly with replacement (more).
* ``gpushareNN`` - GPU-sharing pods (a fraction of one GPU) request NN % of the GPU milli of
  all pods (40, 60, 80, 100 %; default 28.5 %).  CPU-only pods are kept and the number of GPU
  pods is kept; among them, sharing pods replace whole-GPU pods.
* ``multigpuNN`` - pods asking for 2 or more GPUs request NN % of the GPU milli (20, 30, 40,
  50 %; default 7.3 %).  Every other pod is kept; multi-GPU pods are added.
* ``gpuspecNN`` - NN % of the GPU pods (by count) may only run on one GPU model (10, 20, 25,
  33 %; 33 % is the production share the trace's README gives; the default trace has none).
  The pods are a uniform random subset of the GPU pods; each one's model is drawn among the
  models with a node that could hold the pod when empty (GPUs, CPU, memory), with probability
  proportional to those nodes' GPUs - demand for each model follows its supply.

Resampling a class to a count: a uniform random subset without replacement when the count is
below the class's size in the trace, otherwise all of its pods plus copies drawn uniformly with
replacement.  Shares measured in GPU milli are met to within one pod (the count whose share is
closest to the target).  Copies are named ``<pod>-v<k>``.  ``default`` is the trace unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.gpu_trace.trace import NodeTable, PodTable, Trace
from berth.core.gpu.fragmentation import MILLI_PER_GPU

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

KINDS = ("default", "cpu", "gpushare", "multigpu", "gpuspec")


@dataclass(frozen=True)
class Variant:
    """One workload variant: ``kind`` and the target share of its class in percent."""

    name: str
    kind: str
    percent: float
    measure: str
    """What the percentage is a share of (for the README and the tests)."""


def _variant(kind: str, code: str, percent: float) -> Variant:
    measure = {
        "cpu": "CPU-only pods / all pods",
        "gpushare": "GPU milli of sharing pods / GPU milli of all pods",
        "multigpu": "GPU milli of multi-GPU pods / GPU milli of all pods",
        "gpuspec": "GPU pods with a GPU-model constraint / GPU pods",
    }[kind]
    return Variant(f"{kind}{code}", kind, percent, measure)


VARIANTS: dict[str, Variant] = {
    "default": Variant("default", "default", float("nan"), "the shipped trace unchanged"),
    **{
        v.name: v
        for v in (
            _variant("cpu", "050", 5),
            _variant("cpu", "100", 10),
            _variant("cpu", "200", 20),
            _variant("cpu", "250", 25),
            _variant("gpushare", "40", 40),
            _variant("gpushare", "60", 60),
            _variant("gpushare", "80", 80),
            _variant("gpushare", "100", 100),
            _variant("multigpu", "20", 20),
            _variant("multigpu", "30", 30),
            _variant("multigpu", "40", 40),
            _variant("multigpu", "50", 50),
            _variant("gpuspec", "10", 10),
            _variant("gpuspec", "20", 20),
            _variant("gpuspec", "25", 25),
            _variant("gpuspec", "33", 33),
        )
    },
}
"""The paper's variants (the artifact's file names), in the order its figures show them."""


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}") from None


# -- pod classes -------------------------------------------------------------------------------


def is_cpu_only(pods: PodTable) -> BoolArray:
    return pods.num_gpu == 0


def is_sharing(pods: PodTable) -> BoolArray:
    return (pods.num_gpu == 1) & (pods.gpu_milli < MILLI_PER_GPU)


def is_multi_gpu(pods: PodTable) -> BoolArray:
    return pods.num_gpu >= 2


def has_gpu_spec(pods: PodTable) -> BoolArray:
    return np.array([bool(s) for s in pods.gpu_spec], dtype=bool) & (pods.num_gpu > 0)


def class_share(pods: PodTable, kind: str) -> float:
    """The share a variant of ``kind`` sets, measured on ``pods`` (a fraction, not percent)."""
    gpu = pods.total_gpu_milli
    if kind == "cpu":
        return float(is_cpu_only(pods).mean())
    if kind == "gpushare":
        return float(gpu[is_sharing(pods)].sum() / gpu.sum())
    if kind == "multigpu":
        return float(gpu[is_multi_gpu(pods)].sum() / gpu.sum())
    if kind == "gpuspec":
        return float(has_gpu_spec(pods).sum() / (pods.num_gpu > 0).sum())
    raise ValueError(f"no class share for kind {kind!r}")


# -- resampling --------------------------------------------------------------------------------


def draw_sequence(rng: np.random.Generator, members: IntArray, length: int) -> IntArray:
    """``members`` in a random order, then uniform draws with replacement up to ``length``.

    Every prefix is a valid resample of the class to that count: a uniform random subset when
    it is no longer than the class, else all members plus copies."""
    if members.size == 0:
        if length:
            raise ValueError("cannot resample an empty class of pods")
        return np.empty(0, dtype=np.int64)
    order = rng.permutation(members).astype(np.int64)
    if length <= order.size:
        return order[:length]
    extra = rng.choice(members, size=length - order.size, replace=True).astype(np.int64)
    return np.concatenate([order, extra])


def _closest_count(class_milli: IntArray, rest_milli: IntArray | int, target: float) -> int:
    """The count k (0..len) for which ``cum(class)[k] / (cum(class)[k] + rest)`` is nearest to
    ``target``; ``rest`` may be an array of the same length + 1 (the rest's milli for each k)."""
    taken = np.concatenate([[0], np.cumsum(class_milli)])
    total = taken + rest_milli
    share = np.divide(taken, total, out=np.zeros(taken.shape, dtype=float), where=total > 0)
    return int(np.argmin(np.abs(share - target)))


def _select(pods: PodTable, index: IntArray, gpu_spec: tuple[frozenset[str], ...] | None = None) -> PodTable:
    """Pods ``index`` of ``pods``; an index seen again is a copy named ``<pod>-v<k>``."""
    seen: dict[int, int] = {}
    names = []
    for i in index.tolist():
        k = seen.get(i, 0)
        seen[i] = k + 1
        names.append(pods.names[i] if k == 0 else f"{pods.names[i]}-v{k}")
    return PodTable(
        names=tuple(names),
        cpu_milli=pods.cpu_milli[index],
        memory_mib=pods.memory_mib[index],
        num_gpu=pods.num_gpu[index],
        gpu_milli=pods.gpu_milli[index],
        gpu_spec=gpu_spec if gpu_spec is not None else tuple(pods.gpu_spec[i] for i in index.tolist()),
    )


def _keep_order(parts: list[IntArray]) -> IntArray:
    """Originals in trace order first, then copies in drawing order (the protocol shuffles)."""
    joined = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    first = np.zeros(joined.size, dtype=bool)
    _, at = np.unique(joined, return_index=True)
    first[at] = True
    return np.concatenate([np.sort(joined[first]), joined[~first]]).astype(np.int64)


def build_variant(trace: Trace, name: str, rng: np.random.Generator) -> Trace:
    """The variant ``name`` of ``trace`` (same nodes, resampled pods); deterministic for a given
    generator state.  See the module docstring for the method."""
    variant = get_variant(name)
    pods = trace.pods
    if variant.kind == "default":
        return trace
    target = variant.percent / 100.0
    everyone = np.arange(len(pods), dtype=np.int64)
    milli = pods.total_gpu_milli

    if variant.kind == "cpu":
        cpu = everyone[is_cpu_only(pods)]
        gpu = everyone[~is_cpu_only(pods)]
        count = int(round(target * gpu.size / (1.0 - target)))
        chosen = _keep_order([gpu, draw_sequence(rng, cpu, count)])
        return Trace(trace.nodes, _select(pods, chosen))

    if variant.kind == "gpushare":
        cpu = everyone[is_cpu_only(pods)]
        share = everyone[is_sharing(pods)]
        whole = everyone[(pods.num_gpu > 0) & ~is_sharing(pods)]
        n_gpu = share.size + whole.size
        share_seq = draw_sequence(rng, share, n_gpu)
        if whole.size:
            # k sharing pods and n_gpu - k whole-GPU pods, for each k in 0..n_gpu.
            whole_seq = draw_sequence(rng, whole, n_gpu)
            rest = np.concatenate([[0], np.cumsum(milli[whole_seq])])[::-1]
            k = _closest_count(milli[share_seq], rest, target)
        else:
            whole_seq, k = whole, n_gpu
        chosen = _keep_order([cpu, share_seq[:k], whole_seq[: n_gpu - k]])
        return Trace(trace.nodes, _select(pods, chosen))

    if variant.kind == "multigpu":
        multi = everyone[is_multi_gpu(pods)]
        others = everyone[~is_multi_gpu(pods)]
        rest = int(milli[others].sum())
        # Enough draws to reach the target: target share needs multi = rest x t / (1 - t).
        need = target / (1.0 - target) * rest if target < 1 else float(milli.sum()) * 100
        mean = float(milli[multi].mean()) if multi.size else 1.0
        length = int(need / mean * 1.5) + multi.size + 16
        multi_seq = draw_sequence(rng, multi, length)
        k = _closest_count(milli[multi_seq], rest, target)
        chosen = _keep_order([others, multi_seq[:k]])
        return Trace(trace.nodes, _select(pods, chosen))

    if variant.kind == "gpuspec":
        gpu = everyone[pods.num_gpu > 0]
        count = int(round(target * gpu.size))
        picked = draw_sequence(rng, gpu, min(count, gpu.size))
        specs = list(pods.gpu_spec)
        for i in np.sort(picked).tolist():
            specs[i] = frozenset((_draw_model(trace.nodes, pods, i, rng),))
        return Trace(trace.nodes, _select(pods, everyone, tuple(specs)))

    raise AssertionError(variant.kind)


def _draw_model(nodes: NodeTable, pods: PodTable, i: int, rng: np.random.Generator) -> str:
    """A GPU model for pod ``i``: among the models of nodes that could hold it when empty,
    drawn with probability proportional to those nodes' GPUs."""
    fits = (
        (nodes.gpu_count >= pods.num_gpu[i])
        & (nodes.cpu_milli >= pods.cpu_milli[i])
        & (nodes.memory_mib >= pods.memory_mib[i])
        & (nodes.gpu_count > 0)
    )
    supply: dict[str, int] = {}
    for n in np.flatnonzero(fits).tolist():
        model = nodes.model[n]
        if model:
            supply[model] = supply.get(model, 0) + int(nodes.gpu_count[n])
    if not supply:
        raise ValueError(f"pod {pods.names[i]} fits no GPU node: it cannot be given a GPU model")
    models = sorted(supply)
    weights = np.array([supply[m] for m in models], dtype=float)
    return models[int(rng.choice(len(models), p=weights / weights.sum()))]
