"""Berth decision core: pure, deterministic scheduling logic (no I/O, no clock, no randomness).

The public surface::

    from berth.core import Engine, default_document

    engine = Engine(default_document())          # or a document the caller read
    engine.upsert_node(node)                     # NodeInfo
    engine.upsert_bound_pod(pod)                 # PodInfo with node_name
    outcome = engine.schedule(pending_pod)       # filter, score, reserve, assume (or preempt)
    if outcome.placed:
        placement = outcome.placements[0]        # node, GPU devices; held by the engine now

Modules: :mod:`~berth.core.engine` (the engine: state and the one commit path),
:mod:`~berth.core.framework` (plugin contracts), :mod:`~berth.core.state`
(ClusterState), :mod:`~berth.core.scheduler` (Framework, Scheduler; a cycle's parts in
:mod:`~berth.core.filtering`, :mod:`~berth.core.scoring` and :mod:`~berth.core.ranking`),
:mod:`~berth.core.config`, :mod:`~berth.core.registry`, :mod:`~berth.core.decision`,
:mod:`~berth.core.messages`.
"""

from berth.core.config import ConfigError, SchedulerConfig, default_config, default_document, parse_config
from berth.core.decision import Decision
from berth.core.engine import Engine, Outcome, Placement
from berth.core.scheduler import Framework, Scheduler
from berth.core.state import ClusterState

__all__ = [
    "ClusterState",
    "ConfigError",
    "Decision",
    "Engine",
    "Framework",
    "Outcome",
    "Placement",
    "Scheduler",
    "SchedulerConfig",
    "default_config",
    "default_document",
    "parse_config",
]
