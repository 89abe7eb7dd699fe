"""One decision cell: inputs in, decisions and commands out, deterministically.

The cell is a router over small folds, each with a state of its own: the pending-pod queue
(:mod:`.queue`), hand-overs between cells (:mod:`.handovers`), gangs (:mod:`.gangs`), pool
scaling (:mod:`.pool_scaling`), spot drains (:mod:`.spot_drain`), descheduling rounds on
ticks (:mod:`.descheduling`) and the census of the other cells' nodes (:mod:`.foreign_nodes`,
for messages over the whole cluster), over one engine
(:class:`berth.core.engine.Engine`, the cell's snapshot and the only commit path). An input's
kind selects its handler in :data:`HANDLERS`; the handler calls the folds that care, in a fixed
order. After every input the open spot moves advance, a change of the cluster sends the
unschedulable pods back to the queue, and the scheduling round (:mod:`.scheduling`) tries the
active pods. Decisions come out in that order.

Contract of :meth:`Cell.handle`: given the same sequence of ``(event, position)`` calls and the
same configuration, it returns the same decisions, byte for byte. It reads no clock (time is
the events' own), draws no random numbers and iterates nothing unordered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from berth.core.engine import Engine
from berth.schemas import (
    CellTick,
    CommandResult,
    ForeignNodeObserved,
    ForeignNodeRemoved,
    InputPosition,
    NodeObserved,
    NodeRemoved,
    PodDeleted,
    PodInfo,
    PodObserved,
    PodRouted,
    PolicyObserved,
    PolicyRemoved,
    PoolLagState,
    SpotInterruptionNotice,
    event_time,
)

from . import descheduling, foreign_nodes, gangs, handovers, pool_scaling, queue, spot_drain
from .config import CellConfig
from .context import CellContext
from .nodes import NodeBook, forget_node, observe_node, release_reservations
from .records import CellDecision, Recorder
from .scheduling import schedule_round

__all__ = ["HANDLERS", "SCHEDULER_NAME", "Cell", "CellDecision"]

SCHEDULER_NAME = "berth"

Handled = tuple[list[CellDecision], bool]
"""What a handler returns: its decisions, and whether the cluster changed (which sends the
unschedulable pods back to the queue)."""


class Cell:
    """One cell's folds and the router between them. Not thread-safe; one writer per cell."""

    def __init__(
        self, cell: int, config: CellConfig, scheduler_name: str = SCHEDULER_NAME, *, engine: Engine | None = None
    ) -> None:
        """``engine``: the engine to decide with; default a fresh one of ``config`` (another is
        for unit tests of the folds alone)."""
        self.cell = cell
        self.config = config
        self.engine = engine if engine is not None else config.engine()
        self.recorder = Recorder(cell, self.engine, config.hash, config.version)
        self.nodes = NodeBook()
        self.queue = queue.QueueState(scheduler_name=scheduler_name)
        self.ctx = CellContext(cell, self.engine, self.recorder, self.nodes, self.queue, config.spot_labels)
        self.handovers = handovers.HandOverState()
        self.gangs = gangs.GangState()
        self.pools = pool_scaling.PoolState.of(config.pools)
        self.drain = spot_drain.DrainState()
        self.descheduling = descheduling.DeschedulingState()
        self.decisions_made = 0

    def folded(self) -> dict[str, Any]:
        """Everything this cell has folded from its inputs (not its configuration, nor its
        engine's plugins): what a snapshot of the cell keeps. :meth:`restored` continues from
        it exactly as this cell would."""
        return {
            "cluster": self.engine.state,
            "nodes": self.nodes,
            "queue": self.queue,
            "foreign": self.ctx.foreign,
            "handovers": self.handovers,
            "gangs": self.gangs,
            "pools": self.pools,
            "drain": self.drain,
            "descheduling": self.descheduling,
            "decisions_made": self.decisions_made,
        }

    @classmethod
    def restored(
        cls, cell: int, config: CellConfig, folded: Mapping[str, Any], scheduler_name: str = SCHEDULER_NAME
    ) -> Cell:
        """The cell that :meth:`folded` described, configured by ``config`` (the configuration
        it was folded with: the caller checks that)."""
        engine = config.engine()
        engine.adopt(folded["cluster"])
        restored = cls(cell, config, scheduler_name, engine=engine)
        restored.nodes, restored.queue = folded["nodes"], folded["queue"]
        restored.ctx = CellContext(
            cell, engine, restored.recorder, restored.nodes, restored.queue, config.spot_labels, folded["foreign"]
        )
        restored.handovers, restored.gangs = folded["handovers"], folded["gangs"]
        restored.pools, restored.drain = folded["pools"], folded["drain"]
        restored.descheduling = folded["descheduling"]
        restored.decisions_made = folded["decisions_made"]
        return restored

    @property
    def cell_name(self) -> str:
        return self.recorder.cell_name

    @property
    def pending_count(self) -> int:
        return len(self.queue.pending)

    @property
    def unschedulable_count(self) -> int:
        return len(self.queue.unschedulable)

    def handle(self, event: Any, position: InputPosition) -> list[CellDecision]:
        """Fold one input into the cell and decide whatever it makes decidable."""
        now = event_time(event)
        handler = HANDLERS.get(type(event))
        decisions, cluster_changed = handler(self, event, position, now) if handler is not None else ([], False)
        if self.drain.moves:
            decisions.extend(spot_drain.advance_moves(self.drain, self.pools, self.ctx, position, now))
        if cluster_changed:
            queue.requeue_unschedulable(self.queue)
        decisions.extend(
            schedule_round(self.ctx, self.handovers, self.gangs, self.pools, self.drain.moves, position, now)
        )
        self.decisions_made += len(decisions)
        return decisions

    # -- pods, as more than one fold sees them ----------------------------------------------------

    def observe_pod(self, pod: PodInfo, position: InputPosition) -> None:
        if pod.node_name:
            handovers.take_back(self.handovers, pod.uid)
            if queue.observe_bound(self.queue, self.engine, pod):
                spot_drain.track_bound(self.drain, self.pools, pod)
                gangs.member_bound(self.gangs, pod)
            return
        if not queue.is_schedulable_here(self.queue, pod):
            return
        if handovers.is_given_up(self.handovers, pod.uid):
            return  # given up: the inventory routes it (and this update) to another cell
        queue.observe_pending(self.queue, pod, position)


def _node_observed(cell: Cell, event: NodeObserved, position: InputPosition, now: datetime) -> Handled:
    foreign_nodes.forget(cell.ctx.foreign, event.node.name)  # this cell's own node now
    observe_node(cell.nodes, cell.engine, event.node)
    return [], True


def _node_removed(cell: Cell, event: NodeRemoved, position: InputPosition, now: datetime) -> Handled:
    forget_node(cell.nodes, cell.engine, event.name)
    return [], False


def _pod_observed(cell: Cell, event: PodObserved, position: InputPosition, now: datetime) -> Handled:
    cell.observe_pod(event.pod, position)
    return [], False


def _pod_routed(cell: Cell, event: PodRouted, position: InputPosition, now: datetime) -> Handled:
    handovers.take_back(cell.handovers, event.pod.uid)
    cell.observe_pod(event.pod, position)
    handovers.on_routed(cell.queue, event)
    return [], False


def _pod_deleted(cell: Cell, event: PodDeleted, position: InputPosition, now: datetime) -> Handled:
    if handovers.take_back(cell.handovers, event.uid):
        return [], False  # taken away after a hand-over: nothing of it was here
    decisions = spot_drain.pod_gone(cell.drain, cell.pools, cell.ctx, event.uid, position, now)
    if queue.pod_deleted(cell.queue, event.uid):
        release_reservations(cell.nodes, cell.engine, {event.uid})
    gangs.member_deleted(cell.gangs, event.uid)
    cell.engine.delete_pod(event.uid)
    return decisions, True


def _policy_observed(cell: Cell, event: PolicyObserved, position: InputPosition, now: datetime) -> Handled:
    if event.kind == "AgentPool":
        return pool_scaling.on_agent_pool(cell.pools, cell.ctx, event, position, now, cell.drain.moves), False
    cell.engine.upsert_policy(event)
    gangs.pod_group_observed(cell.gangs, event)
    return [], True


def _policy_removed(cell: Cell, event: PolicyRemoved, position: InputPosition, now: datetime) -> Handled:
    if event.kind == "AgentPool":
        pool_scaling.drop_agent_pool(cell.pools, f"{event.namespace}/{event.name}")
        return [], False
    cell.engine.remove_policy(event.kind, event.namespace, event.name)
    gangs.pod_group_removed(cell.gangs, event.kind, event.namespace, event.name)
    return [], True


def _command_result(cell: Cell, event: CommandResult, position: InputPosition, now: datetime) -> Handled:
    released, restored = queue.on_result(cell.queue, cell.engine, event)
    release_reservations(cell.nodes, cell.engine, restored)
    return [], released


def _spot_notice(cell: Cell, event: SpotInterruptionNotice, position: InputPosition, now: datetime) -> Handled:
    return spot_drain.on_spot(cell.drain, cell.pools, cell.ctx, event, position, now), False


def _lag_state(cell: Cell, event: PoolLagState, position: InputPosition, now: datetime) -> Handled:
    return pool_scaling.on_lag(cell.pools, cell.ctx, event, position, now, cell.drain.moves), False


def _tick(cell: Cell, event: CellTick, position: InputPosition, now: datetime) -> Handled:
    handovers.on_tick(cell.queue)
    return descheduling.on_tick(cell.descheduling, cell.config.descheduler, cell.ctx, position, now), False


def _foreign_node_observed(cell: Cell, event: ForeignNodeObserved, position: InputPosition, now: datetime) -> Handled:
    if event.cell == cell.cell or event.name in cell.nodes.nodes:
        foreign_nodes.forget(cell.ctx.foreign, event.name)  # not another cell's after all
    else:
        foreign_nodes.observe(cell.ctx.foreign, event)
    return [], False  # nothing here changed: no pod fits better for it, only messages read better


def _foreign_node_removed(cell: Cell, event: ForeignNodeRemoved, position: InputPosition, now: datetime) -> Handled:
    foreign_nodes.forget(cell.ctx.foreign, event.name)
    return [], False


HANDLERS: Mapping[type, Callable[[Cell, Any, InputPosition, datetime], Handled]] = MappingProxyType(
    {
        NodeObserved: _node_observed,
        NodeRemoved: _node_removed,
        PodObserved: _pod_observed,
        PodRouted: _pod_routed,
        PodDeleted: _pod_deleted,
        PolicyObserved: _policy_observed,
        PolicyRemoved: _policy_removed,
        CommandResult: _command_result,
        SpotInterruptionNotice: _spot_notice,
        PoolLagState: _lag_state,
        CellTick: _tick,
        ForeignNodeObserved: _foreign_node_observed,
        ForeignNodeRemoved: _foreign_node_removed,
    }
)
"""Input kind → the handler that folds it. A kind not listed changes nothing (the scheduling
round still runs)."""
