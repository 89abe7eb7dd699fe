"""Descheduling in a running cell: at most every ``interval``, on a :class:`~berth.schemas.CellTick`,
the cell plans a DeschedulerPolicy's evictions on its own live state and issues them.

Time comes from the ticks (their ``issued_at``), never from a clock, so that a replay of the
cell's log plans the same evictions at the same inputs. A round runs on the first tick at least
``interval`` after the previous round. It plans with :func:`berth.core.descheduling.plan_evictions`
on a copy of the cell's engine (the planner leaves its engine in the planned state; the cell's own
snapshot changes only when the cluster reports the evicted pods gone), with the cell's pending
pods as what GPU defragmentation makes room for and, as the cooldown's memory, when each workload
was last evicted by this fold.

Each planned eviction of a pod the cluster reported bound becomes an ``evicting`` decision with an
:class:`~berth.schemas.EvictPod` command, the same decision a spot drain makes: the binder evicts
through the Eviction API, which honours PodDisruptionBudgets, and the pod's controller recreates
it for the scheduling round to place. Pods only assumed here (a binding not confirmed yet) are left
alone. The scope is the cell: its nodes are the sources and the targets.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from berth.core.descheduling import DEFAULT_COOLDOWN, Eviction, Plan, plan_evictions, workload_of
from berth.core.engine import Engine
from berth.schemas import InputPosition
from berth.schemas.descheduler import DeschedulingPolicy, EvictorRules, parse_policy

from .context import CellContext
from .queue import queue_key
from .records import CellDecision
from .spot_drain import eviction

__all__ = ["DEFAULT_INTERVAL", "DeschedulerSettings", "DeschedulingState", "on_tick"]

DEFAULT_INTERVAL = timedelta(minutes=5)
"""How often a cell plans descheduling when the configuration does not say (the descheduler's
own ``--descheduling-interval`` has no default; five minutes is what its Helm chart runs)."""


@dataclass(frozen=True)
class DeschedulerSettings:
    """A cell's descheduling: the DeschedulerPolicy document as the operator wrote it, how often
    to plan, and how long a workload evicted once is left alone. Validated on construction."""

    policy_document: Mapping[str, Any]
    interval: timedelta = DEFAULT_INTERVAL
    cooldown: timedelta = DEFAULT_COOLDOWN
    policy: DeschedulingPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.interval <= timedelta(0) or self.cooldown < timedelta(0):
            raise ValueError("descheduler: the interval must be positive and the cooldown not negative")
        object.__setattr__(self, "policy", parse_policy(dict(self.policy_document)))

    def to_document(self) -> dict[str, Any]:
        """The part of the cell's configuration document this is (see :class:`~.config.CellConfig`)."""
        return {
            "policy": dict(self.policy_document),
            "intervalSeconds": self.interval.total_seconds(),
            "cooldownSeconds": self.cooldown.total_seconds(),
        }

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> DeschedulerSettings:
        """The inverse of :meth:`to_document`."""
        return cls(
            data["policy"],
            interval=timedelta(seconds=data["intervalSeconds"]),
            cooldown=timedelta(seconds=data["cooldownSeconds"]),
        )


@dataclass
class DeschedulingState:
    last_round: datetime | None = None
    """The tick time of the last planning round (None: none yet)."""
    evicted_at: dict[str, datetime] = field(default_factory=dict)
    """Workload (:func:`~berth.core.descheduling.workload_of`) → when this cell last evicted it;
    entries older than the cooldown are dropped at the next round."""
    evictions: Counter[str] = field(default_factory=Counter)
    """Strategy → evictions issued, since the cell's log began (for the service's metrics)."""
    loops_prevented: Counter[str] = field(default_factory=Counter)
    """Strategy → candidates refused because moving them would not have helped or their workload
    was cooling down, since the cell's log began."""


def on_tick(
    state: DeschedulingState,
    settings: DeschedulerSettings | None,
    ctx: CellContext,
    position: InputPosition,
    now: datetime,
) -> list[CellDecision]:
    """A tick at ``now``: plan and issue a round of evictions when one is due, else nothing."""
    if settings is None or not _due(state, settings, now):
        return []
    state.last_round = now
    state.evicted_at = {workload: at for workload, at in state.evicted_at.items() if now - at < settings.cooldown}
    plan = _plan(state, settings, ctx, now)
    state.loops_prevented.update(plan.loops_prevented())
    decisions: list[CellDecision] = []
    for planned in plan.evictions:
        if not _evictable_now(ctx, planned):
            continue
        state.evicted_at[workload_of(planned.pod)] = now
        state.evictions[planned.strategy] += 1
        rules = _evictor_rules(settings, planned)
        decisions.append(
            eviction(
                ctx,
                planned.pod,
                _reason(planned),
                position,
                now,
                keep_with_local_storage=not rules.evict_local_storage_pods,
                keep_with_pvc=rules.ignore_pvc_pods,
            )
        )
    return decisions


def _evictor_rules(settings: DeschedulerSettings, planned: Eviction) -> EvictorRules:
    """The DefaultEvictor rules of the profile that planned ``planned``. The planner applies the
    rules it can judge from the cell's state; those about volumes go to the binder on the command."""
    for strategy in settings.policy.strategies:
        if strategy.name == planned.strategy and strategy.profile == planned.profile:
            return strategy.evictor
    return EvictorRules()


def _due(state: DeschedulingState, settings: DeschedulerSettings, now: datetime) -> bool:
    return state.last_round is None or now - state.last_round >= settings.interval


def _plan(state: DeschedulingState, settings: DeschedulerSettings, ctx: CellContext, now: datetime) -> Plan:
    waiting = sorted((entry for entry in ctx.queue.pending.values() if entry.in_flight is None), key=queue_key)
    return plan_evictions(
        _scratch_engine(ctx.engine),
        settings.policy,
        pending=[entry.pod for entry in waiting],
        recent_evictions=state.evicted_at,
        now=now,
        cooldown=settings.cooldown,
    )


def _scratch_engine(engine: Engine) -> Engine:
    """An engine of the same configuration on a copy of ``engine``'s snapshot, for the planner
    to change (a pickle round trip, as a cell snapshot is restored)."""
    scratch = Engine(engine.scheduler_document)
    scratch.adopt(pickle.loads(pickle.dumps(engine.state, protocol=5)))
    return scratch


def _evictable_now(ctx: CellContext, planned: Eviction) -> bool:
    """Only pods the cluster reported bound, and not already on their way out as preemption victims."""
    uid = planned.pod.uid
    return uid in ctx.queue.bound and uid not in ctx.queue.evicting


def _reason(planned: Eviction) -> str:
    return f"descheduler {planned.strategy}: {planned.reason}; the engine places it on {planned.target_node}"
