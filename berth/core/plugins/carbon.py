"""CarbonIntensity (Score): prefer nodes on cleaner grids.

Intensity (gCO2eq/kWh) comes from the node (``berth.io/carbon-intensity`` in manifests,
``NodeInfo.carbon_intensity`` in events). Among feasible nodes the cleanest scores 100 and the
dirtiest 0, linearly; a node whose intensity is unknown scores 0.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt

from berth.core.framework import CycleContext, NodeArray, ScorePlugin
from berth.core.plugins.cost import NodeEconomics, linear_preference, node_economics

__all__ = ["CarbonIntensity"]


class CarbonIntensity(ScorePlugin):
    NAME: ClassVar[str] = "CarbonIntensity"
    STATE_EXTENSIONS = (NodeEconomics,)

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        return linear_preference(node_economics(cycle.state).carbon[nodes])
