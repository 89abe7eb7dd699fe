"""Berth decision core: pure, deterministic scheduling logic (no I/O, no clock, no randomness).

The public surface::

    from berth.core import ClusterState, Scheduler, default_config, load_config

    config = default_config()                   # or load_config(yaml_text)
    scheduler = Scheduler(config)                # one Framework per profile
    state = ClusterState()
    state.upsert_node(node)                      # NodeInfo
    state.upsert_bound_pod(pod)                  # PodInfo with node_name
    decision = scheduler.schedule(pending_pod, state)
    if decision.status in ("placed", "held"):
        state.assume(pending_pod, decision.node, decision.gpu_devices, decision.gpu_milli)

Modules: :mod:`~berth.core.framework` (plugin contracts), :mod:`~berth.core.state`
(ClusterState), :mod:`~berth.core.scheduler` (Framework, Scheduler), :mod:`~berth.core.config`,
:mod:`~berth.core.registry`, :mod:`~berth.core.decision`, :mod:`~berth.core.messages`.
Imports are lazy so that importing a leaf module (e.g. ``berth.core.gpu``) stays cheap.
"""

from __future__ import annotations

from types import MappingProxyType

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from berth.core.config import ConfigError, SchedulerConfig, default_config, load_config
    from berth.core.decision import Decision
    from berth.core.scheduler import Framework, Scheduler
    from berth.core.state import ClusterState

__all__ = ["ClusterState", "ConfigError", "Decision", "Framework", "Scheduler",
           "SchedulerConfig", "default_config", "load_config"]

_WHERE = MappingProxyType({
    "ClusterState": "berth.core.state",
    "ConfigError": "berth.core.config",
    "SchedulerConfig": "berth.core.config",
    "default_config": "berth.core.config",
    "load_config": "berth.core.config",
    "Decision": "berth.core.decision",
    "Framework": "berth.core.scheduler",
    "Scheduler": "berth.core.scheduler",
})


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'berth.core' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
