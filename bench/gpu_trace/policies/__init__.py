"""Placement policies for the GPU trace benchmark, by name (one module each)."""

from __future__ import annotations

from bench.gpu_trace.policies.base import Policy
from bench.gpu_trace.policies.berth import BerthFGD, BerthFillMeasure, BerthPaperMeasure
from bench.gpu_trace.policies.best_fit import BestFit
from bench.gpu_trace.policies.dot_product import DotProduct
from bench.gpu_trace.policies.engine import (
    BerthEngine,
    BerthEngineNoFragmentation,
    BerthEngineNoLeastAllocated,
    BerthEngineNoSpread,
    BerthEngineSpreadCpuPods,
)
from bench.gpu_trace.policies.fgd import FGD
from bench.gpu_trace.policies.gpu_clustering import GpuClustering
from bench.gpu_trace.policies.gpu_packing import GpuPacking
from bench.gpu_trace.policies.random_fit import RandomFit

REGISTRY: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        BerthEngine,
        BerthFGD,
        FGD,
        BestFit,
        GpuPacking,
        GpuClustering,
        DotProduct,
        RandomFit,
        BerthPaperMeasure,
        BerthFillMeasure,
        BerthEngineNoSpread,
        BerthEngineNoLeastAllocated,
        BerthEngineNoFragmentation,
        BerthEngineSpreadCpuPods,
    )
}
DEFAULT_POLICIES = ("berth-engine", "berth", "fgd", "bestfit", "gpupacking", "gpuclustering", "dotprod", "random")
"""What the runner measures by default: the real engine (default profile), Berth's harness policy
(the engine's fragmentation functions alone) and the paper's six; the rest are ablations."""


def make_policy(name: str) -> Policy:
    """A fresh policy instance (policies keep per-run state; never share one across runs)."""
    try:
        return REGISTRY[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(REGISTRY)}") from None


__all__ = ["DEFAULT_POLICIES", "REGISTRY", "Policy", "make_policy"]
