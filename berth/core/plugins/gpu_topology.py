"""Device layouts (topologies) of GPU nodes and the whole-GPU choices they imply.

Whole-GPU choices depend only on a node's *topology* (NUMA node and NVLink peers per device) and
the mask of its whole free devices, so they are computed once per (topology, mask, count,
locality) and, for nodes of up to :data:`DENSE_TABLE_MAX_DEVICES` devices, laid out as dense
``[topology, mask]`` tables: 5,000 nodes cost one fancy-indexing operation, not 5,000 Python calls.

Contract: pure and deterministic; a topology's memoised choices never change once computed, so
copies of a catalog may share its :class:`DeviceTopology` objects and tables.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from berth.core.plugins.gpu_requests import BoolArray, IntArray
from berth.schemas.cluster import NodeInfo

__all__ = ["DENSE_TABLE_MAX_DEVICES", "DeviceTopology", "TopologyCatalog"]

DENSE_TABLE_MAX_DEVICES = 10  # 2**10 masks per topology: tables stay small and fill fast


@dataclass
class DeviceTopology:
    """One distinct device layout (many nodes share one) and its memoised whole-GPU choices."""

    width: int
    numa: tuple[int, ...]
    links: tuple[int, ...]  # per column: bitmask of NVLink-connected columns
    best: dict[tuple[int, int, str], tuple[int, ...] | None] = field(default_factory=dict)
    clique: dict[int, int] = field(default_factory=dict)

    def max_clique(self, mask: int) -> int:
        """Size of the largest all-pairs-NVLinked set inside ``mask`` (memoised per mask)."""
        if mask in self.clique:
            return self.clique[mask]
        if mask == 0:
            return 0
        low = (mask & -mask).bit_length() - 1
        rest = mask & ~(1 << low)
        # Either the lowest device is out, or it is in and only its peers may join it.
        size = max(self.max_clique(rest), 1 + self.max_clique(rest & self.links[low]))
        self.clique[mask] = size
        return size

    def fitness(self, cols: Sequence[int]) -> int:
        """0..100: how well a device set suits one multi-GPU job (one NUMA node, all NVLinked)."""
        if len(cols) <= 1:
            return 100
        span = len({self.numa[c] for c in cols})
        pairs = sum(1 for a, b in itertools.combinations(cols, 2) if self.links[a] >> b & 1)
        total = len(cols) * (len(cols) - 1) // 2
        return ((100 // span) + (100 * pairs) // total) // 2

    def choose(self, mask: int, count: int, locality: str) -> tuple[int, ...] | None:
        """The best ``count`` columns among the free ones in ``mask`` for ``locality``.

        Ranking (first difference wins): the locality constraint holds; fewer NUMA nodes spanned;
        more NVLink-connected pairs; the largest NVLink-connected set left free afterwards is
        larger (keeps room for the next big job); lowest device indices.
        """
        key = (mask, count, locality)
        if key in self.best:
            return self.best[key]
        free = [c for c in range(self.width) if mask >> c & 1]
        chosen: tuple[int, ...] | None = None
        if len(free) >= count:
            best_rank: tuple[int, ...] | None = None
            for cols in itertools.combinations(free, count):
                numas = {self.numa[c] for c in cols}
                if locality == "same-socket" and len(numas) > 1:
                    continue
                pairs = sum(1 for a, b in itertools.combinations(cols, 2) if self.links[a] >> b & 1)
                if locality == "nvlink" and pairs != count * (count - 1) // 2:
                    continue
                taken = 0
                for c in cols:
                    taken |= 1 << c
                rank = (len(numas), -pairs, -self.max_clique(mask & ~taken), *cols)
                if best_rank is None or rank < best_rank:
                    best_rank, chosen = rank, cols
        self.best[key] = chosen
        return chosen


class TopologyCatalog:
    """The distinct device layouts seen so far (topology ids are positions in :attr:`topologies`;
    id 0 is whatever layout came first) and dense whole-GPU tables over them.

    ``width`` is the device columns of the inventory the ids index into; tables are sized by it.
    """

    def __init__(self) -> None:
        self.topologies: list[DeviceTopology] = []
        self.width = 0
        self._ids: dict[tuple[object, ...], int] = {}
        self._tables: dict[tuple[int, str], tuple[BoolArray, IntArray]] = {}

    def copy(self) -> TopologyCatalog:
        """An independent catalog sharing the (immutable once computed) topologies and tables."""
        other = TopologyCatalog()
        other.topologies = list(self.topologies)
        other.width = self.width
        other._ids = dict(self._ids)
        other._tables = dict(self._tables)
        return other

    def widen(self, width: int) -> None:
        """Index ``width`` device columns; tables are sized by ``2**width``, so they start over."""
        if width != self.width:
            self.width = width
            self._tables = {}

    def id_of(self, node: NodeInfo) -> int:
        """The topology id of ``node``'s device layout, registering the layout if it is new.

        NVLink is a two-way cable, so a link listed by one side only counts as a link."""
        column = {device.index: c for c, device in enumerate(node.gpus)}
        numa, links = [], []
        for device in node.gpus:
            numa.append(device.numa_node)
            mask = 0
            for peer in device.nvlink_peers:
                if peer in column:
                    mask |= 1 << column[peer]
            links.append(mask)
        for c in range(len(links)):
            for peer in range(len(links)):
                if links[peer] >> c & 1:
                    links[c] |= 1 << peer
        key = (len(node.gpus), tuple(numa), tuple(links))
        if key not in self._ids:
            self._ids[key] = len(self.topologies)
            self.topologies.append(DeviceTopology(len(node.gpus), tuple(numa), tuple(links)))
            self._tables = {}  # tables have a row per topology
        return self._ids[key]

    def choose(self, topo_id: int, mask: int, count: int, locality: str) -> tuple[int, ...] | None:
        """The best ``count`` columns of topology ``topo_id`` among the whole free ones in ``mask``
        (see :meth:`DeviceTopology.choose`)."""
        return self.topologies[topo_id].choose(mask, count, locality)

    def table(self, count: int, locality: str) -> tuple[BoolArray, IntArray] | None:
        """(feasible, fitness) as [topology, mask] arrays, or None when devices are too many."""
        if self.width > DENSE_TABLE_MAX_DEVICES:
            return None
        key = (count, locality)
        if key not in self._tables:
            size = 1 << self.width
            ok = np.zeros((len(self.topologies), size), dtype=bool)
            fit = np.zeros((len(self.topologies), size), dtype=np.int64)
            for t, topo in enumerate(self.topologies):
                for mask in range(1 << topo.width):
                    cols = topo.choose(mask, count, locality)
                    if cols is not None:
                        ok[t, mask] = True
                        fit[t, mask] = topo.fitness(cols)
            self._tables[key] = (ok, fit)
        return self._tables[key]

    def lookup(self, topo_ids: IntArray, full_masks: IntArray, count: int, locality: str) -> tuple[BoolArray, IntArray]:
        """Per (topology id, whole-free mask) pair: can ``count`` devices be had for ``locality``,
        and the 0..100 fitness of the best such set (0 where none)."""
        table = self.table(count, locality)
        if table is not None:
            ok, fit = table
            return ok[topo_ids, full_masks], fit[topo_ids, full_masks]
        feasible = np.zeros(len(topo_ids), dtype=bool)
        fitness = np.zeros(len(topo_ids), dtype=np.int64)
        for i, (topo_id, mask) in enumerate(zip(topo_ids.tolist(), full_masks.tolist(), strict=True)):
            topo = self.topologies[topo_id]
            cols = topo.choose(mask, count, locality)
            if cols is not None:
                feasible[i], fitness[i] = True, topo.fitness(cols)
        return feasible, fitness
