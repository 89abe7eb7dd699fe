"""The token-lag faust app: one agent over the queue topic, one table of pool lag states.

    berth.inference.queue.v1 ──▶ queue agent ─(table pools, key namespace/pool)──▶ berth.inference.lag-state.v1
                                                                                 └▶ berth.scheduler.inputs.v1
                                                                                    at the pool's cell

The table is keyed by ``namespace/pool`` while the queue topic is keyed by pool name; both keys
of one pool always meet in the same source partition (a pool's name is part of its table key),
so the table can follow the queue topic's partitioning as faust requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust
from berth.schemas import PoolLagState
from berth.schemas.cells import cell_of_pool
from berth.schemas.topics import CONTRACT_NAMES, DECISION_INPUTS, LAG_STATE, QUEUE_LAG, KafkaNames
from pydantic import TypeAdapter

from berth.bus.streams import (
    FaustOutbox,
    ModelTable,
    Outbox,
    accept,
    derived_event_id,
    faust_app,
    origin_of,
    track_consumer_lag,
)
from berth.logs import get_logger

from .fold import LagSettings, fold_queue_lag, is_stalled, pool_key
from .pool_metrics import observe_lag

log = get_logger(__name__)

APP_ID = "berth-token-lag"
CONSUMER = "token-lag"
SOURCE = "berth/token-lag"
POOL_STATE = TypeAdapter(PoolLagState)


@dataclass(frozen=True)
class Layout:
    """``cells``: partitions of the decision inputs; ``queue_partitions``: of the queue topic."""

    cells: int
    queue_partitions: int


@dataclass
class TokenLagApp:
    app: faust.App
    layout: Layout
    outbox: Outbox
    pools: ModelTable[PoolLagState]
    agent: Any


def create_app(
    layout: Layout,
    settings: LagSettings,
    *,
    app_options: dict[str, Any],
    outbox: Outbox | None = None,
    app_id: str = APP_ID,
    names: KafkaNames = CONTRACT_NAMES,
) -> TokenLagApp:
    """Declare the app, its table and agent; ``app_options`` are extra ``faust.App`` settings;
    ``names``: the installation's topic and group names (``KafkaSettings.names``)."""
    app = faust_app(
        app_id,
        names,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=layout.queue_partitions,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        **app_options,
    )
    sink: Outbox = outbox if outbox is not None else FaustOutbox(app, source=SOURCE, names=names)
    queue = app.topic(names.topic(QUEUE_LAG), key_serializer="raw", value_serializer="raw")
    pools = ModelTable.declare(
        app,
        "pools",
        POOL_STATE,
        partitions=layout.queue_partitions,
        help="namespace/pool → the pool's latest lag state",
    )

    @app.agent(queue, name="queue")
    async def track_lag(stream: Any) -> None:
        async for record in stream.events():
            decoded = accept(QUEUE_LAG, record, consumer=CONSUMER, outbox=sink)
            if decoded is None:
                continue
            observation = decoded.event
            key = pool_key(observation.namespace, observation.pool)
            state = fold_queue_lag(pools.get(key), observation, settings)
            if state is None:
                log.debug("stale observation ignored", pool=key, observed_at=observation.observed_at.isoformat())
                continue
            pools.put(key, state)
            observe_lag(state)
            origin = origin_of(record)
            cell = cell_of_pool(state.namespace, state.pool, layout.cells)
            sink.publish(LAG_STATE.name, state, event_id=derived_event_id(CONSUMER, origin, 0))
            sink.publish(DECISION_INPUTS.name, state, partition=cell, event_id=derived_event_id(CONSUMER, origin, 1))
            if is_stalled(state):
                log.warning(
                    "pool stalled: tokens queued, none processed",
                    pool=key,
                    tokens_in_queue=state.tokens_in_queue,
                    expected_ttft_ms=state.expected_ttft_ms,
                )
            else:
                log.debug(
                    "pool lag",
                    pool=key,
                    cell=cell,
                    tokens_in_queue=state.tokens_in_queue,
                    smoothed_token_rate=state.smoothed_token_rate,
                    expected_ttft_ms=state.expected_ttft_ms,
                )

    track_consumer_lag(app, consumer=CONSUMER, topics=[names.topic(QUEUE_LAG)])
    return TokenLagApp(app=app, layout=layout, outbox=sink, pools=pools, agent=track_lag)
