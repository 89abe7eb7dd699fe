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
(ClusterState), :mod:`~berth.core.scheduler` (Framework, Scheduler; a cycle's parts in
:mod:`~berth.core.filtering`, :mod:`~berth.core.scoring` and :mod:`~berth.core.ranking`),
:mod:`~berth.core.config`, :mod:`~berth.core.registry`, :mod:`~berth.core.decision`,
:mod:`~berth.core.messages`.
"""

from berth.core.config import ConfigError, SchedulerConfig, default_config, load_config
from berth.core.decision import Decision
from berth.core.scheduler import Framework, Scheduler
from berth.core.state import ClusterState

__all__ = ["ClusterState", "ConfigError", "Decision", "Framework", "Scheduler",
           "SchedulerConfig", "default_config", "load_config"]
