"""The inventory's pure folds: state + one event → new state + what to emit.

Nothing here does I/O or reads a clock; the faust agents in :mod:`.app` decode records, call these
functions, store the returned state in tables and send the returned outputs. Time is the event's.

Two stages, because pods and nodes are keyed differently (pod UID vs node name) and faust tables
are partitioned like the stream that writes them:

* the **pod stage** (:func:`fold_pod_event` and :func:`fold_hand_over`, state :class:`PodRoute`
  per pod UID) routes pods that are not bound to any node straight to a cell, passes them on when
  a cell hands them over, and hands everything about a bound pod to the node stage, keyed by the
  node's name;
* the **node stage** (:func:`fold_node_inputs`, a batch of inputs at a time, and
  :func:`fold_node_input`, one; state :class:`NodeState` per node name) owns one node: its facts,
  telemetry, spot notice and bound pods. It derives the published
  :class:`~berth.schemas.NodeInventory` (once per batch for a node the batch changed) and routes
  node-related inputs to the node's cell.

Routing contract (the cell inputs of ``berth.scheduler.inputs.v1``):

* a node's ``NodeObserved`` / ``NodeRemoved`` and its ``SpotInterruptionNotice`` go to the node's
  cell; the forwarded node is the *effective* one (a device that telemetry reports unhealthy has
  ``healthy=False``), and a ``NodeObserved`` that would change nothing for the cell is not sent;
* an unbound pod of the ``berth`` scheduler goes to :func:`~berth.schemas.cells.cell_of_pod`:
  as a ``PodObserved`` when it is pinned there (:func:`~berth.schemas.cells.pinned_cell`), else as
  a :class:`~berth.schemas.PodRouted` opening its round of cells; a
  :class:`~berth.schemas.HandOverPod` from the cell holding it sends it to the next cell of the
  round (the first after the handing cell, in cell order, not tried yet; all tried: a new round)
  as a ``PodRouted``, and that cell a ``PodDeleted``; later changes of the pod go, as
  ``PodObserved``, to the cell holding it, while the rules that placed it are unchanged;
* a bound pod (any scheduler: it holds capacity) goes to its node's cell, or to ``cell_of_pod``
  while that node has not been observed yet;
* a ``PodDeleted`` goes to the cell the pod was last routed to;
* when a pod or node moves to another cell (node relabelled, node observed after its pods, pod
  bound after waiting in another cell) the old cell receives a ``PodDeleted`` / ``NodeRemoved``
  for it, meaning "this no longer concerns you", and the new cell receives the node first and
  then its bound pods, so that everything about a node meets in one ordered log;
* every other cell gets the node's census (:class:`~berth.schemas.ForeignNodeObserved`: its
  cell, labels, taints and cordon; :class:`~berth.schemas.ForeignNodeRemoved` when it goes), so
  that a pod pinned to one cell is reported unschedulable over every node of the cluster. Sent
  when one of those facts (or the number of cells) changed since the census last sent, not on
  status-only changes, after the node's own cell was told;
* every policy is broadcast to every cell (quotas, priorities and budgets constrain every cell);
  PodGroups too, because a gang's members need not be in the group's own cell: a node-pool
  selector or a ``berth.io/cell`` label routes them first (:func:`~berth.schemas.cells.cell_of_pod`).

GPU accounting (per device, in milli-GPUs): a pod with ``gpu_fraction_milli`` holds that share on
each device it lists (normally exactly one); any other pod holds each listed device whole. Pods in
phase ``Succeeded`` / ``Failed`` hold nothing (as in kube-scheduler) but stay known until deleted,
so that their deletion still reaches the cell they were routed to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from berth.schemas import (
    DeviceInventory,
    ForeignNodeObserved,
    ForeignNodeRemoved,
    GpuTelemetry,
    HandOverPod,
    NodeInfo,
    NodeInventory,
    NodeObserved,
    NodeRemoved,
    PodAllocation,
    PodDeleted,
    PodInfo,
    PodObserved,
    PodRouted,
    PolicyObserved,
    PolicyRemoved,
    SpotInterruptionNotice,
)
from berth.schemas.cells import cell_of_node, cell_of_pod, pinned_cell
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

BERTH_SCHEDULER = "berth"
"""``spec.schedulerName`` of the pods Berth places."""

WHOLE_DEVICE_MILLI = 1000
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


class _State(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- outputs ------------------------------------------------------------------------------------

CellEvent = (
    PodObserved
    | PodDeleted
    | PodRouted
    | NodeObserved
    | NodeRemoved
    | PolicyObserved
    | PolicyRemoved
    | SpotInterruptionNotice
    | ForeignNodeObserved
    | ForeignNodeRemoved
)


@dataclass(frozen=True)
class ToCell:
    """Append ``event`` to cell ``cell``'s input log (partition ``cell`` of the decision inputs)."""

    cell: int
    event: CellEvent


@dataclass(frozen=True)
class ToNode:
    """Hand ``payload`` to the node stage of its node (the by-node topic, keyed by node name)."""

    payload: NodeInput

    @property
    def node(self) -> str:
        return self.payload.node


@dataclass(frozen=True)
class InventoryChanged:
    """Publish ``inventory`` as the node's latest state (compacted state topic, key node name)."""

    inventory: NodeInventory


Output = ToCell | ToNode | InventoryChanged


# --- node-stage input: what reaches the node stage, from whichever source topic ---------------------


NodeScopedEvent = Annotated[
    NodeObserved | NodeRemoved | GpuTelemetry | SpotInterruptionNotice | PodObserved | PodDeleted,
    Field(discriminator="type"),
]


class NodeInput(_State):
    """One event concerning one node, as carried on the inventory's internal by-node topic.

    ``withdraw_from`` is set by the pod stage when a pod it had routed (unbound) to some cell is
    now bound: the node stage tells that cell to forget the pod if the node lives elsewhere.
    """

    node: str
    event: NodeScopedEvent
    withdraw_from: int | None = None
    origin: str = ""
    """Where the event was first read (``topic/partition/offset``): what the node stage emits
    for it gets ids derived from this, so a re-forwarded duplicate yields the same ids."""

    @classmethod
    def of(cls, event: Any, *, origin: str = "") -> NodeInput:
        """Wrap an event of the node, telemetry or spot topic (they name their node)."""
        return cls(node=node_of(event), event=event, origin=origin)


NODE_INPUT = TypeAdapter(NodeInput)


def node_of(event: Any) -> str:
    """The node an event of the node topics, the telemetry topic or the spot topic is about."""
    if isinstance(event, NodeObserved):
        return event.node.name
    if isinstance(event, NodeRemoved):
        return event.name
    if isinstance(event, (GpuTelemetry, SpotInterruptionNotice)):
        return event.node
    raise TypeError(f"{type(event).__name__} is not about one node")


# --- pod stage -----------------------------------------------------------------------------------


class PodRoute(_State):
    """Where the pod stage last sent a pod.

    ``node`` is the node the pod is bound to (its events then go through that node's stage);
    ``cell`` is the cell an unbound pod was routed to (None once bound: the node stage owns it),
    ``home`` the cell its placement rules name. For a pod in a round of cells
    (:class:`~berth.schemas.PodRouted`): ``pod`` as last observed (handed on with it), ``tried``
    the round's cells so far (``cell`` last), when the round began, and ``hop``, its routings.
    """

    node: str | None = None
    cell: int | None = None
    home: int | None = None
    pod: PodInfo | None = None
    tried: tuple[int, ...] = ()
    round_started_at: datetime | None = None
    hop: int = 0


POD_ROUTE = TypeAdapter(PodRoute)


@dataclass(frozen=True)
class Folded:
    """A fold's result: the new state (None = delete the table entry) and the outputs, in order."""

    state: Any
    outputs: tuple[Output, ...] = field(default=())


def fold_pod_input(
    route: PodRoute | None, event: PodObserved | PodDeleted | HandOverPod, cells: int, *, partition: int = 0
) -> Folded:
    """The pod stage: route one pod event, or act on one hand-over. ``partition``: of the pod
    topic, where this stage keeps the pod's route (hand-overs are sent back to it)."""
    if isinstance(event, HandOverPod):
        return fold_hand_over(route, event, cells)
    return fold_pod_event(route, event, cells, partition=partition)


def fold_pod_event(
    route: PodRoute | None, event: PodObserved | PodDeleted, cells: int, *, partition: int = 0
) -> Folded:
    """Route one pod event; ``route`` is what this stage remembers of the pod (None: nothing);
    ``partition``: the pod topic's partition the event came from (a round's hand-overs return there)."""
    if isinstance(event, PodDeleted):
        return _pod_deleted(route, event)
    pod = event.pod
    outputs: list[Output] = []
    if route is not None and route.node is not None and not pod.node_name:
        # A binding is final in Kubernetes (spec.nodeName is never unset), so an unbound
        # observation of a pod we know bound is an older event seen again: after a crash this
        # stage re-reads input its table had already folded. Acting on it would free the pod's
        # node and queue the pod again, and the cell would hand its capacity to another pod.
        return Folded(route)
    if route is not None and route.node is not None and route.node != pod.node_name:
        # Bound somewhere else before (a UID reused): release it there.
        outputs.append(ToNode(NodeInput(node=route.node, event=_deletion_of(pod, event.observed_at, route.node))))
        route = PodRoute()
    if pod.node_name:
        withdraw = route.cell if route is not None else None
        outputs.append(ToNode(NodeInput(node=pod.node_name, event=event, withdraw_from=withdraw)))
        return Folded(PodRoute(node=pod.node_name), tuple(outputs))
    if pod.scheduler_name != BERTH_SCHEDULER:
        return Folded(None, tuple(outputs))  # not ours to place, and it holds nothing yet
    home = cell_of_pod(pod, cells)
    previous = route.cell if route is not None else None
    if route is not None and previous is not None and route.home == home and (route.tried or previous == home):
        # Its rules still name the same cell: the change goes to the cell holding the pod
        # (where its round has taken it), which keeps its place in the round.
        outputs.append(ToCell(previous, event))
        return Folded(route.model_copy(update={"pod": pod}) if route.tried else route, tuple(outputs))
    if previous is not None and previous != home:
        outputs.append(ToCell(previous, _deletion_of(pod, event.observed_at, None)))
    hop = route.hop + 1 if route is not None else 0
    if cells > 1 and pinned_cell(pod, cells) is None:
        at = event.observed_at
        outputs.append(
            ToCell(
                home,
                PodRouted(
                    pod=pod,
                    tried=(home,),
                    cells=cells,
                    hop=hop,
                    route_partition=partition,
                    round_started_at=at,
                    observed_at=at,
                ),
            )
        )
        return Folded(
            PodRoute(cell=home, home=home, pod=pod, tried=(home,), round_started_at=at, hop=hop), tuple(outputs)
        )
    outputs.append(ToCell(home, event))
    return Folded(PodRoute(cell=home, home=home, hop=hop), tuple(outputs))


def fold_hand_over(route: PodRoute | None, request: HandOverPod, cells: int) -> Folded:
    """Pass a pod a cell gave up on to the next cell of its round (see the module docstring).

    Ignored unless the pod is still pending in a round, routed to the handing cell, at the hop
    the cell saw: a pod bound, deleted or moved since, or a repeated hand-over, changes nothing.
    """
    if (
        route is None
        or route.node is not None
        or route.pod is None
        or not route.tried
        or route.cell != request.cell
        or route.hop != request.hop
        or cells < 2
    ):
        return Folded(route)
    tried, started = route.tried, route.round_started_at
    if len(set(tried)) >= cells:  # every cell had its try: a new round, from this cell on
        tried, started = (request.cell,), request.issued_at
    target = next(cell for cell in ((request.cell + step) % cells for step in range(1, cells)) if cell not in tried)
    at = request.issued_at
    routed = PodRouted(
        pod=route.pod,
        tried=(*tried, target),
        cells=cells,
        hop=route.hop + 1,
        route_partition=request.route_partition,
        elsewhere=request.rejected,
        round_started_at=started or at,
        observed_at=at,
    )
    outputs = (ToCell(request.cell, _deletion_of(route.pod, at, None)), ToCell(target, routed))
    return Folded(
        route.model_copy(
            update={
                "cell": target,
                "tried": routed.tried,
                "hop": routed.hop,
                "round_started_at": routed.round_started_at,
            }
        ),
        outputs,
    )


def _pod_deleted(route: PodRoute | None, event: PodDeleted) -> Folded:
    if route is not None and route.node is not None:
        forwarded = event if event.node_name == route.node else event.model_copy(update={"node_name": route.node})
        return Folded(None, (ToNode(NodeInput(node=route.node, event=forwarded)),))
    if route is not None and route.cell is not None:
        return Folded(None, (ToCell(route.cell, event),))
    if event.node_name:
        # We never saw the pod (e.g. it was bound before our history starts); its node may have.
        return Folded(None, (ToNode(NodeInput(node=event.node_name, event=event)),))
    return Folded(None)  # never routed anywhere: no cell needs to hear of it


def _deletion_of(pod: PodInfo, at: datetime, node_name: str | None) -> PodDeleted:
    return PodDeleted(uid=pod.uid, namespace=pod.namespace, name=pod.name, node_name=node_name, observed_at=at)


# --- policies ------------------------------------------------------------------------------------


def route_policy(event: PolicyObserved | PolicyRemoved, cells: int) -> tuple[ToCell, ...]:
    """Every policy to every cell, in cell order (PodGroups included: see the module docstring)."""
    return tuple(ToCell(cell, event) for cell in range(cells))


# --- node stage ----------------------------------------------------------------------------------


class DeviceSample(_State):
    """The latest telemetry of one device."""

    healthy: bool = True
    utilization_pct: float | None = None
    memory_used_mib: int | None = None


class BoundPod(_State):
    """A pod bound to the node, and the cell its events were last routed to."""

    pod: PodInfo
    cell: int


class NodeState(_State):
    """Everything the node stage knows about one node (the value of the ``nodes`` table).

    ``info`` is the node as last observed (None until a ``NodeObserved`` arrives: telemetry, spot
    notices and bound pods may come first). ``forwarded`` / ``forwarded_cell`` are the effective
    node last sent to a cell and that cell (None when no cell currently has the node).
    """

    name: str
    info: NodeInfo | None = None
    resource_version: str = ""
    removed: bool = False
    samples: dict[int, DeviceSample] = Field(default_factory=dict)
    spot_notice: SpotInterruptionNotice | None = None
    pods: dict[str, BoundPod] = Field(default_factory=dict)
    forwarded: NodeInfo | None = None
    forwarded_cell: int | None = None
    census: ForeignNodeObserved | None = None
    """The census of the node last sent to the other cells (None: none sent, or withdrawn)."""
    census_cells: int = 0
    """How many cells there were when ``census`` was sent (more cells: the new ones lack it)."""
    updated_at: datetime | None = None

    @property
    def present(self) -> bool:
        """Observed and not removed: the node exists for the scheduler."""
        return self.info is not None and not self.removed


NODE_STATE = TypeAdapter(NodeState)


def effective_node(state: NodeState) -> NodeInfo | None:
    """The node as the scheduler must see it: devices reported unhealthy by telemetry are."""
    info = state.info
    if info is None:
        return None
    sick = {index for index, sample in state.samples.items() if not sample.healthy}
    if not any(device.index in sick and device.healthy for device in info.gpus):
        return info
    gpus = tuple(
        device.model_copy(update={"healthy": False}) if device.index in sick else device for device in info.gpus
    )
    return info.model_copy(update={"gpus": gpus})


def holds_capacity(pod: PodInfo) -> bool:
    return pod.phase not in TERMINATED_PHASES


def inventory_of(state: NodeState, cells: int) -> NodeInventory | None:
    """The published view of a node (None until the node has been observed)."""
    node = effective_node(state)
    if node is None or state.updated_at is None:
        return None
    holders = [state.pods[uid].pod for uid in sorted(state.pods) if holds_capacity(state.pods[uid].pod)]
    used: dict[int, int] = {}
    requested: dict[str, int] = {}
    allocations = []
    for pod in holders:
        share = pod.gpu_fraction_milli if pod.gpu_fraction_milli is not None else WHOLE_DEVICE_MILLI
        for index in pod.gpu_devices:
            used[index] = used.get(index, 0) + share
        for resource, amount in pod.requests.items():
            requested[resource] = requested.get(resource, 0) + amount
        allocations.append(
            PodAllocation(
                pod_uid=pod.uid,
                pod=pod.key,
                requests=pod.requests,
                gpu_devices=pod.gpu_devices,
                gpu_milli=pod.gpu_fraction_milli,
            )
        )
    devices = []
    for device in node.gpus:
        sample = state.samples.get(device.index)
        devices.append(
            DeviceInventory(
                index=device.index,
                # Over-commitment (two binders racing, stale device lists) shows as 0 free, never < 0.
                free_milli=max(0, WHOLE_DEVICE_MILLI - used.get(device.index, 0)),
                healthy=device.healthy,
                utilization_pct=sample.utilization_pct if sample else None,
                memory_used_mib=sample.memory_used_mib if sample else None,
            )
        )
    return NodeInventory(
        node=node,
        cell=state.forwarded_cell if state.forwarded_cell is not None else cell_of_node(node, cells),
        allocations=tuple(allocations),
        devices=tuple(devices),
        requested=dict(sorted(requested.items())),
        draining_until=state.spot_notice.deadline if state.spot_notice else None,
        removed=state.removed,
        updated_at=state.updated_at,
    )


def fold_node_input(state: NodeState | None, item: NodeInput, cells: int) -> Folded:
    """Apply one node-scoped input to the node's state; returns the new state and the outputs.

    Outputs come in the order the cells must see them; an :class:`InventoryChanged` is last and
    only present when the published inventory differs (ignoring ``updated_at``).
    """
    folded = fold_node_inputs({item.node: state}, (item,), cells)
    return Folded(folded.states[item.node], folded.outputs[0])


@dataclass(frozen=True)
class NodesFolded:
    """What a batch of node-stage inputs did: each touched node's new state (by name) and, per
    input in order, its outputs."""

    states: dict[str, NodeState]
    outputs: tuple[tuple[Output, ...], ...]


def fold_node_inputs(states: Mapping[str, NodeState | None], items: Sequence[NodeInput], cells: int) -> NodesFolded:
    """Apply ``items`` in order, each to its node's state (``states``: every node they name, as
    before the batch; None when unknown).

    The cells get exactly what folding the inputs one at a time sends them. The published
    inventory is compared across the whole batch instead: a node whose inventory differs after
    the batch from before it gets one :class:`InventoryChanged`, last among the outputs of the
    batch's last input for that node (so a batch of one is :func:`fold_node_input`).
    """
    current = {name: state if state is not None else NodeState(name=name) for name, state in states.items()}
    last_input = {item.node: index for index, item in enumerate(items)}
    outputs: list[tuple[Output, ...]] = []
    for index, item in enumerate(items):
        sent: list[Output] = []
        current[item.node] = _apply_node_input(current[item.node], item, cells, sent)
        if last_input[item.node] == index:
            before = states[item.node]
            inventory_before = inventory_of(before, cells) if before is not None else None
            inventory_after = inventory_of(current[item.node], cells)
            if inventory_after is not None and not _same_inventory(inventory_before, inventory_after):
                sent.append(InventoryChanged(inventory_after))
        outputs.append(tuple(sent))
    return NodesFolded(states={name: current[name] for name in last_input}, outputs=tuple(outputs))


def _apply_node_input(before: NodeState, item: NodeInput, cells: int, outputs: list[Output]) -> NodeState:
    """One input's effect on its node's state; what the cells must hear of it goes to ``outputs``."""
    event = item.event
    if isinstance(event, NodeObserved):
        after = before.model_copy(
            update={
                "info": event.node,
                "resource_version": event.resource_version,
                "removed": False,
                "updated_at": event.observed_at,
            }
        )
        return _sync_cell(after, event.observed_at, cells, outputs)
    if isinstance(event, NodeRemoved):
        after = before.model_copy(update={"removed": True, "updated_at": event.observed_at})
        if before.forwarded_cell is not None:
            outputs.append(ToCell(before.forwarded_cell, event))
        after = after.model_copy(update={"forwarded": None, "forwarded_cell": None})
        return _withdraw_census(after, event.observed_at, cells, outputs)
    if isinstance(event, GpuTelemetry):
        samples = dict(before.samples)
        for sample in event.devices:
            samples[sample.index] = DeviceSample(
                healthy=sample.healthy, utilization_pct=sample.utilization_pct, memory_used_mib=sample.memory_used_mib
            )
        after = before.model_copy(update={"samples": samples, "updated_at": event.sampled_at})
        return _sync_cell(after, event.sampled_at, cells, outputs)
    if isinstance(event, SpotInterruptionNotice):
        after = before.model_copy(update={"spot_notice": event, "updated_at": event.issued_at})
        if after.present and after.forwarded_cell is not None and event != before.spot_notice:
            outputs.append(ToCell(after.forwarded_cell, event))
        return after
    if isinstance(event, PodObserved):
        return _pod_bound(before, event, item.withdraw_from, cells, outputs)
    return _pod_gone(before, event, outputs)


def _sync_cell(state: NodeState, at: datetime, cells: int, outputs: list[Output]) -> NodeState:
    """Bring the node's cell up to date with its effective node: forward it if it changed,
    move it (and its pods and pending spot notice) if its cell changed."""
    node = effective_node(state)
    if node is None or state.removed:
        return state
    cell = cell_of_node(node, cells)
    previous = state.forwarded_cell
    if previous is not None and previous != cell:
        outputs.append(ToCell(previous, NodeRemoved(name=node.name, observed_at=at)))
    first_time_here = previous != cell
    if first_time_here or node != state.forwarded:
        outputs.append(ToCell(cell, NodeObserved(node=node, resource_version=state.resource_version, observed_at=at)))
    state = state.model_copy(update={"forwarded": node, "forwarded_cell": cell})
    state = _send_census(state, node, cell, at, cells, outputs)
    if not first_time_here:
        return state
    # The cell has just (re)learnt the node: give it every pod bound there, even those it was
    # already sent (a NodeRemoved may have made it drop them), and withdraw them from elsewhere.
    pods = dict(state.pods)
    for uid in sorted(pods):
        bound = pods[uid]
        if bound.cell != cell:
            outputs.append(ToCell(bound.cell, _deletion_of(bound.pod, at, node.name)))
        outputs.append(ToCell(cell, PodObserved(pod=bound.pod, observed_at=at)))
        pods[uid] = BoundPod(pod=bound.pod, cell=cell)
    notice = state.spot_notice
    if notice is not None and notice.deadline > at:
        outputs.append(ToCell(cell, notice))
    return state.model_copy(update={"pods": pods})


def _send_census(
    state: NodeState, node: NodeInfo, cell: int, at: datetime, cells: int, outputs: list[Output]
) -> NodeState:
    """Tell every other cell the node's census when it changed (see the module docstring)."""
    census = ForeignNodeObserved(
        name=node.name,
        cell=cell,
        labels=node.labels,
        taints=node.taints,
        unschedulable=node.unschedulable,
        observed_at=at,
    )
    sent = state.census
    if sent is not None and state.census_cells == cells and sent.model_copy(update={"observed_at": at}) == census:
        return state
    outputs.extend(ToCell(other, census) for other in range(cells) if other != cell)
    return state.model_copy(update={"census": census, "census_cells": cells})


def _withdraw_census(state: NodeState, at: datetime, cells: int, outputs: list[Output]) -> NodeState:
    sent = state.census
    if sent is None:
        return state
    outputs.extend(
        ToCell(other, ForeignNodeRemoved(name=sent.name, observed_at=at))
        for other in range(cells)
        if other != sent.cell
    )
    return state.model_copy(update={"census": None, "census_cells": 0})


def _pod_bound(
    state: NodeState, event: PodObserved, withdraw_from: int | None, cells: int, outputs: list[Output]
) -> NodeState:
    pod = event.pod
    known = state.pods.get(pod.uid)
    if state.present and state.forwarded_cell is not None:
        cell = state.forwarded_cell
    elif known is not None:
        cell = known.cell
    else:
        cell = cell_of_pod(pod, cells)  # the node is not known yet; see _sync_cell for the move
    stale = {c for c in (withdraw_from, known.cell if known else None) if c is not None and c != cell}
    for old in sorted(stale):
        outputs.append(ToCell(old, _deletion_of(pod, event.observed_at, pod.node_name)))
    outputs.append(ToCell(cell, event))
    pods = {**state.pods, pod.uid: BoundPod(pod=pod, cell=cell)}
    return state.model_copy(update={"pods": pods, "updated_at": event.observed_at})


def _pod_gone(state: NodeState, event: PodDeleted, outputs: list[Output]) -> NodeState:
    known = state.pods.get(event.uid)
    if known is None:
        return state  # never routed by this node's stage: nothing to release or tell
    outputs.append(ToCell(known.cell, event))
    pods = {uid: bound for uid, bound in state.pods.items() if uid != event.uid}
    return state.model_copy(update={"pods": pods, "updated_at": event.observed_at})


def _same_inventory(a: NodeInventory | None, b: NodeInventory) -> bool:
    return a is not None and a.model_copy(update={"updated_at": b.updated_at}) == b
