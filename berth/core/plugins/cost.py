"""NodeCost (Score): prefer cheaper nodes per hour — spot over on-demand when prices are equal.

Price comes from the node (``berth.io/price-per-hour`` in manifests, ``NodeInfo.price_per_hour``
in events). Among the feasible nodes that have a price, the cheapest scores 100 and the dearest 0,
linearly in between; a node without a price scores ``unpricedSpotScore`` if it is spot and 0
otherwise (an unknown price is not a cheap one). With a single price level every priced node
scores 100. The attributes are kept per node slot by :class:`NodeEconomics`, so scoring is a
few array operations.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import Field

from berth.core.framework import MAX_NODE_SCORE, CycleContext, NodeArray, PluginArgs, ScorePlugin, StateExtension
from berth.core.state import ClusterState
from berth.schemas.cluster import NodeInfo

__all__ = ["NodeCost", "NodeEconomics", "linear_preference", "node_economics"]


class NodeEconomics(StateExtension):
    """Per slot: price per hour and carbon intensity (NaN = unknown), and whether it is spot."""

    KEY = "NodeEconomics"

    def __init__(self) -> None:
        self.price = np.zeros(0, dtype=np.float64)
        self.carbon = np.zeros(0, dtype=np.float64)
        self.spot = np.zeros(0, dtype=bool)

    def grow(self, capacity: int) -> None:
        extra = capacity - len(self.price)
        if extra > 0:
            self.price = np.concatenate([self.price, np.full(extra, np.nan)])
            self.carbon = np.concatenate([self.carbon, np.full(extra, np.nan)])
            self.spot = np.concatenate([self.spot, np.zeros(extra, dtype=bool)])

    def node_upserted(self, slot: int, node: NodeInfo, previous: NodeInfo | None) -> None:
        self.grow(slot + 1)
        self.price[slot] = np.nan if node.price_per_hour is None else node.price_per_hour
        self.carbon[slot] = np.nan if node.carbon_intensity is None else node.carbon_intensity
        self.spot[slot] = node.capacity_type == "spot"

    def node_removed(self, slot: int, node: NodeInfo) -> None:
        self.price[slot] = np.nan
        self.carbon[slot] = np.nan
        self.spot[slot] = False


def node_economics(state: ClusterState) -> NodeEconomics:
    return state.ensure_extension(NodeEconomics)  # type: ignore[return-value]  # ensure_extension is typed by the extension base class


def linear_preference(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Lowest value → 100, highest → 0, linear; NaN → 0; all equal → 100."""
    known = ~np.isnan(values)
    if not known.any():
        return np.zeros(len(values), dtype=np.int64)
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    if high == low:
        return np.where(known, MAX_NODE_SCORE, 0).astype(np.int64)
    scaled = np.floor(MAX_NODE_SCORE * (high - np.where(known, values, high)) / (high - low))
    return np.where(known, scaled, 0).astype(np.int64)


class NodeCostArgs(PluginArgs):
    unpriced_spot_score: int = Field(default=50, ge=0, le=MAX_NODE_SCORE, alias="unpricedSpotScore")


class NodeCost(ScorePlugin):
    NAME: ClassVar[str] = "NodeCost"
    Args = NodeCostArgs
    STATE_EXTENSIONS = (NodeEconomics,)

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        economics = node_economics(cycle.state)
        price = economics.price[nodes]
        scores = linear_preference(price)
        unpriced_spot = np.isnan(price) & economics.spot[nodes]
        return np.where(unpriced_spot, self.args.unpriced_spot_score, scores).astype(np.int64)  # type: ignore[attr-defined]  # self.args is typed as the base PluginArgs
