"""The plugin registry: every plugin Berth knows, by the one name used everywhere.

One explicit mapping, no discovery magic: adding a plugin means adding its module under
``berth/core/plugins/`` (with a ``NAME`` constant) and one line here. The names of plugins that
mean what a kube-scheduler plugin means are kube's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from berth.core.framework import Plugin
from berth.core.plugins import (
    cache,
    carbon,
    cost,
    dynamic_resources,
    gpu_devices,
    gpu_fragmentation,
    inter_pod_affinity,
    node_affinity,
    node_name,
    node_resources_balanced_allocation,
    node_resources_fit,
    node_unschedulable,
    pod_topology_spread,
    preemption,
    taint_toleration,
)

__all__ = ["REGISTRY", "with_plugins"]

_CORE: tuple[type[Plugin], ...] = (
    node_unschedulable.NodeUnschedulable,
    node_name.NodeName,
    taint_toleration.TaintToleration,
    node_affinity.NodeAffinity,
    node_resources_fit.NodeResourcesFit,
    node_resources_balanced_allocation.NodeResourcesBalancedAllocation,
    inter_pod_affinity.InterPodAffinity,
    pod_topology_spread.PodTopologySpread,
    # GPU devices, preemption, and Berth's own score terms (cost, carbon, caches).
    gpu_devices.GpuDeviceFit,
    gpu_devices.GpuBinPack,
    gpu_devices.GpuTopologyFitness,
    gpu_devices.GpuAvailability,
    gpu_fragmentation.GpuFragmentation,
    dynamic_resources.DynamicResources,
    preemption.DefaultPreemption,
    cost.NodeCost,
    carbon.CarbonIntensity,
    cache.ModelCache,
    cache.DataLocality,
)

REGISTRY: Mapping[str, type[Plugin]] = MappingProxyType({cls.NAME: cls for cls in _CORE})
"""Plugin name → class. Read-only."""


def with_plugins(*classes: type[Plugin], base: Mapping[str, type[Plugin]] = REGISTRY) -> Mapping[str, type[Plugin]]:
    """A registry extended with more plugin classes (tests, experiments). Names must be new."""
    merged = dict(base)
    for cls in classes:
        if cls.NAME in merged and merged[cls.NAME] is not cls:
            raise ValueError(f"plugin name {cls.NAME!r} is already registered")
        merged[cls.NAME] = cls
    return MappingProxyType(merged)
