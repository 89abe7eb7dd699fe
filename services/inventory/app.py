"""The inventory faust app: its topics, tables and agents. Agents do I/O; :mod:`.fold` decides.

Topology (one consumer group, ``berth-inventory``)::

    berth.cluster.pods.v1 ────────┐
    berth.scheduler.handovers.v1 ─┴─▶ pods agent ─(table pod-routes, key pod UID)──▶ unbound pods to a cell
                                   │ bound pods, deletions of bound pods
    berth.cluster.nodes.v1 ─┐      ▼
    berth.gpu.telemetry.v1 ─┼──▶ berth-inventory-node-inputs (internal, key node name)
    berth.cloud.spot.v1 ────┘      │
                                   ▼
                             node agent ─(table nodes, key node name)──▶ inventory state + cells
                             (a batch of inputs at a time: NODE_BATCH_MAX, NODE_BATCH_WITHIN_S)
    berth.cluster.policies.v1 ──▶ policies agent ──▶ cells (stateless)
    timer (group leader, every 30 s) ──▶ a CellTick to every cell

Why the internal topic: a faust table is partitioned like the stream that writes it (a key's
changelog partition is the partition of the event being processed). Pods are keyed by UID and
nodes by name, and producers outside Berth may hash keys differently from topic to topic, so every
node-scoped input is re-keyed onto one topic this app produces itself; one agent then owns each
node's state, in one order, and the ``nodes`` table restores partition by partition with it.

Pods need no such hop (most of the pipeline's records are pod events): the pods agent reads the
pod topic, and the hand-overs come back on the partition of ``berth.scheduler.handovers.v1`` with
the number of the pod's partition (``PodRouted.route_partition``, echoed by the cell), so a pod's
route is read and written under one partition whatever hash the pod's producer used. The two
topics must have as many partitions (checked at start).

Outputs go through an :class:`~berth.bus.streams.Outbox` (faust's producer buffer in production,
a list in tests), so the records of one input leave in the order the fold returned them and
before that input's offset is committed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import faust
from berth.schemas import CellTick, KafkaNames, NodeObserved, NodeRemoved, PodDeleted, PodObserved
from berth.schemas.topics import (
    CONTRACT_NAMES,
    DECISION_INPUTS,
    GPU_TELEMETRY,
    HANDOVERS,
    INVENTORY_STATE,
    NODES,
    PODS,
    POLICIES,
    SPOT,
)
from pydantic import ValidationError

from berth.bus.deadletter import dead_letter_for
from berth.bus.streams import (
    FaustOutbox,
    ModelTable,
    Outbox,
    StartupError,
    accept,
    derived_event_id,
    faust_app,
    origin_of,
    refuse,
    tables_act_for,
    track_consumer_lag,
)
from berth.logs import get_logger

from .fold import (
    NODE_INPUT,
    NODE_STATE,
    POD_ROUTE,
    InventoryChanged,
    NodeInput,
    NodeState,
    Output,
    ToCell,
    ToNode,
    fold_node_inputs,
    fold_pod_input,
    route_policy,
)

log = get_logger(__name__)

APP_ID = "berth-inventory"
CONSUMER = "inventory"
SOURCE = "berth/inventory"
NODE_INPUTS = "berth-inventory-node-inputs"
"""Internal topic: every node-scoped input, keyed by node name (see the module docstring)."""
NODE_FACT_TOPICS = (NODES, GPU_TELEMETRY, SPOT)
SOURCE_TOPICS = (PODS, HANDOVERS, NODES, GPU_TELEMETRY, SPOT, POLICIES)
TICK_INTERVAL_S = 30.0
"""How often every cell gets a :class:`~berth.schemas.CellTick` (see ``berth.cells.cell``)."""
NODE_BATCH_MAX = 256
"""At most this many node-stage inputs are folded as one batch."""
NODE_BATCH_WITHIN_S = 0.1
"""How long the node stage gathers inputs before folding what it has. No pending pod waits on this
stage (the pods agent routes those straight to their cells); what it delays by up to 100 ms is a
binding's, a deletion's or a node's change's way to the node's cell. It buys fewer records:
Berth packs, so consecutive bindings mostly land on one node, and a batch writes that node's
state and inventory once instead of once per binding (in ``bench.k8s``, 2,867 published
inventories for 4,992 bindings at 100 ms, 4,144 at 20 ms)."""
INPUT_TOPICS = (*(topic.name for topic in SOURCE_TOPICS), NODE_INPUTS)
"""Every topic the consumer group reads: its sources and its own internal topic (contract names)."""


@dataclass(frozen=True)
class Layout:
    """Partition counts the app is built for, read from the brokers at start.

    ``cells``: partitions of the decision inputs (one per cell). ``pod_partitions``: of the pod
    topic and of the hand-over topic (they must be equal), which the pod-routes table follows.
    ``node_partitions``: of the internal by-node topic and the nodes table (we use the node
    topic's count, so node parallelism follows it).
    """

    cells: int
    pod_partitions: int
    node_partitions: int

    @classmethod
    def of(cls, partitions: dict[str, int]) -> Layout:
        """The layout for the brokers' partition counts (of :data:`LAYOUT_TOPICS`); a hand-over
        topic split unlike the pod topic is refused, saying what to do (module docstring)."""
        pods, handovers = partitions[PODS.name], partitions[HANDOVERS.name]
        if pods != handovers:
            raise StartupError(
                f"{HANDOVERS.name} has {handovers} partitions and {PODS.name} {pods}: they must have as "
                f"many (a hand-over returns to its pod's partition); add partitions to the smaller one "
                f"(kafka-topics.sh --alter --partitions {max(pods, handovers)})"
            )
        return cls(cells=partitions[DECISION_INPUTS.name], pod_partitions=pods, node_partitions=partitions[NODES.name])


LAYOUT_TOPICS = (DECISION_INPUTS.name, PODS.name, HANDOVERS.name, NODES.name)
"""The topics whose partition counts make the :class:`Layout`."""


@dataclass
class InventoryApp:
    """The faust app with handles on what tests and the CLI need."""

    app: faust.App
    layout: Layout
    outbox: Outbox
    pod_routes: ModelTable[Any]
    nodes: ModelTable[Any]
    agents: dict[str, Any]


Emit = Callable[[tuple[Output, ...], str, str], None]
"""Sends a fold's outputs: ``emit(outputs, origin, stage)``."""


def create_app(
    layout: Layout,
    *,
    app_options: dict[str, Any],
    outbox: Outbox | None = None,
    app_id: str = APP_ID,
    tick_interval_s: float = TICK_INTERVAL_S,
    names: KafkaNames = CONTRACT_NAMES,
) -> InventoryApp:
    """Declare the app, its topics, tables, agents and timer for ``layout``.

    ``app_options`` are extra ``faust.App`` settings (broker, credentials, store, datadir ...);
    ``outbox`` defaults to the app's own producer; every ``tick_interval_s`` the group's leader
    sends a :class:`~berth.schemas.CellTick` to every cell. ``names``: the installation's topic
    and group names (``KafkaSettings.names``); the app reads and writes its topics only.
    """
    app = faust_app(
        app_id,
        names,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=layout.node_partitions,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        **app_options,
    )
    sink: Outbox = outbox if outbox is not None else FaustOutbox(app, source=SOURCE, names=names)
    raw = {"key_serializer": "raw", "value_serializer": "raw"}
    topics = {topic.name: app.topic(names.topic(topic), **raw) for topic in (*NODE_FACT_TOPICS, POLICIES)}
    node_inputs = app.topic(names.topic(NODE_INPUTS), partitions=layout.node_partitions, internal=True, **raw)
    pod_routes = ModelTable.declare(
        app,
        "pod-routes",
        POD_ROUTE,
        partitions=layout.pod_partitions,
        help="pod UID → where its events were last routed",
    )
    nodes = ModelTable.declare(
        app,
        "nodes",
        NODE_STATE,
        partitions=layout.node_partitions,
        help="node name → everything the inventory knows about the node",
    )
    emit = _emitter(sink)
    agents = {
        "pods": _pods_agent(
            app,
            app.topic(names.topic(PODS), names.topic(HANDOVERS), **raw),
            {names.topic(PODS): PODS, names.topic(HANDOVERS): HANDOVERS},
            sink,
            emit,
            pod_routes,
            layout.cells,
        )
    }
    for topic in NODE_FACT_TOPICS:
        agents[topic.name] = _node_fact_agent(app, topics[topic.name], topic, sink, emit)
    agents["policies"] = _policies_agent(app, topics[POLICIES.name], sink, emit, layout.cells)
    agents["node-stage"] = _node_stage_agent(app, node_inputs, sink, emit, nodes, layout.cells)

    @app.timer(interval=tick_interval_s, on_leader=True)
    async def tick_cells() -> None:
        # The cells read no clock; this is how time reaches a cell where nothing else happens.
        at = datetime.now(UTC)
        for cell in range(layout.cells):
            sink.publish(DECISION_INPUTS.name, CellTick(issued_at=at), partition=cell)

    track_consumer_lag(app, consumer=CONSUMER, topics=[names.topic(name) for name in INPUT_TOPICS])
    return InventoryApp(app=app, layout=layout, outbox=sink, pod_routes=pod_routes, nodes=nodes, agents=agents)


def _emitter(sink: Outbox) -> Emit:
    """An :data:`Emit` onto ``sink``."""

    def emit(outputs: tuple[Output, ...], origin: str, stage: str) -> None:
        """Send a fold's outputs in order. Ids derive from the input's first position and the
        stage that emitted them (one input may reach the stages of two nodes)."""
        for index, output in enumerate(outputs):
            event_id = derived_event_id(f"{CONSUMER}/{stage}", origin, index)
            if isinstance(output, ToCell):
                sink.publish(DECISION_INPUTS.name, output.event, partition=output.cell, event_id=event_id)
                _log_routed(output)
            elif isinstance(output, ToNode):
                payload = (
                    output.payload if output.payload.origin else output.payload.model_copy(update={"origin": origin})
                )
                sink.publish_raw(NODE_INPUTS, output.node.encode(), NODE_INPUT.dump_json(payload))
            elif isinstance(output, InventoryChanged):
                sink.publish(INVENTORY_STATE.name, output.inventory, event_id=event_id)

    return emit


def _pods_agent(
    app: faust.App,
    channel: Any,
    pod_sources: dict[str, Any],
    sink: Outbox,
    emit: Emit,
    pod_routes: ModelTable[Any],
    cells: int,
) -> Any:
    """The agent that routes pod events and hand-overs (``pod_sources``: their topics' names on
    the brokers → contract topic), keeping each pod's route in ``pod_routes``."""

    async def route_pods(stream: Any) -> None:
        async for record in stream.events():
            message = record.message
            decoded = accept(pod_sources[message.topic], record, consumer=CONSUMER, outbox=sink)
            if decoded is None:
                continue
            event = decoded.event
            uid = event.partition_key  # the pod's UID, for pod events and hand-overs alike
            route = pod_routes.get(uid)
            folded = fold_pod_input(route, event, cells, partition=message.partition)
            if folded.state != route:
                pod_routes.put(uid, folded.state)
            emit(folded.outputs, origin_of(record), "pods")

    return app.agent(channel, name="pods")(route_pods)


def _policies_agent(app: faust.App, channel: Any, sink: Outbox, emit: Emit, cells: int) -> Any:
    """The agent that sends every policy to the cells (stateless)."""

    async def route_policies(stream: Any) -> None:
        async for record in stream.events():
            decoded = accept(POLICIES, record, consumer=CONSUMER, outbox=sink)
            if decoded is not None:
                emit(route_policy(decoded.event, cells), origin_of(record), "policies")

    return app.agent(channel, name="policies")(route_policies)


def _node_stage_agent(
    app: faust.App, channel: Any, sink: Outbox, emit: Emit, nodes: ModelTable[Any], cells: int
) -> Any:
    """The agent that folds every node-scoped input into the node's state in ``nodes``, a batch
    at a time (:data:`NODE_BATCH_MAX`, :data:`NODE_BATCH_WITHIN_S`): a node's state is written
    to the table, and its inventory published, once per batch instead of once per input."""

    async def fold_nodes(stream: Any) -> None:
        async for records in stream.take_events(NODE_BATCH_MAX, within=NODE_BATCH_WITHIN_S):
            accepted = [(item, record) for record in records if (item := _node_input(record, sink)) is not None]
            if not accepted:
                continue
            last_record = {item.node: record for item, record in accepted}
            before: dict[str, NodeState | None] = {}
            for node, record in last_record.items():
                with tables_act_for(record):
                    before[node] = nodes.get(node)
            folded = fold_node_inputs(before, [item for item, _ in accepted], cells)
            for (item, record), outputs in zip(accepted, folded.outputs, strict=True):
                emit(outputs, item.origin or origin_of(record), f"node/{item.node}")
            for node, state in folded.states.items():
                if state != before[node]:
                    with tables_act_for(last_record[node]):
                        nodes.put(node, state)

    return app.agent(channel, name="node-stage")(fold_nodes)


def _node_input(record: Any, sink: Outbox) -> NodeInput | None:
    """The node input a record of the by-node topic carries; None after dead-lettering it."""
    message = record.message
    try:
        return NODE_INPUT.validate_json(message.value)
    except ValidationError as exc:  # written by this app: only a version skew gets here
        refuse(
            dead_letter_for(
                topic=message.topic,
                partition=message.partition,
                offset=message.offset,
                key=message.key,
                value=message.value,
                headers=list(message.headers or ()),
                consumer=CONSUMER,
                reason=f"not a node input: {exc}",
            ),
            outbox=sink,
        )
        return None


def _node_fact_agent(app: faust.App, channel: Any, topic: Any, sink: Outbox, emit: Emit) -> Any:
    """An agent that validates one node-keyed source topic and re-keys it onto the node stage."""

    async def forward(stream: Any) -> None:
        async for record in stream.events():
            decoded = accept(topic, record, consumer=CONSUMER, outbox=sink)
            if decoded is not None:
                origin = origin_of(record)
                emit((ToNode(NodeInput.of(decoded.event, origin=origin)),), origin, "ingress")

    return app.agent(channel, name=topic.name.removeprefix("berth.").rsplit(".", 1)[0])(forward)


def _log_routed(output: ToCell) -> None:
    event = output.event
    if isinstance(event, (NodeObserved, NodeRemoved)):
        log.info("node routed", node=event.subject, type=event.type, cell=output.cell)
    elif isinstance(event, (PodObserved, PodDeleted)):
        log.debug("pod routed", pod=event.subject, pod_uid=event.partition_key, type=event.type, cell=output.cell)
    else:
        log.debug("routed", subject=event.subject, type=event.type, cell=output.cell)
