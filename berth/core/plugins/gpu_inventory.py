"""Per-device GPU accounting over all nodes at once: the state behind Berth's GPU plugins.

Kubernetes counts GPUs (``nvidia.com/gpu: 8``); Berth places pods on *devices*. This module keeps,
for every node of the cluster (rows, in the cluster's node order) and every GPU of that node
(columns, in device-index order, padded on the right), what is free:

- ``free_milli``: thousandths of the device nobody holds; 0 for padding, unhealthy devices and
  MIG-partitioned devices (those serve only MIG slices), so "fits" is a plain comparison;
- ``mem_free`` / ``mem_total``: device memory in MiB (0 when the node did not say);
- ``mig_free[profile]``: free MIG slices of that profile per device;
- per node: ``full_mask`` (bit c set = column c is a healthy whole device nobody touches) and
  ``full_count``, the inputs of every whole-GPU decision.

Whole-GPU choices depend only on a node's *topology* (NUMA node and NVLink peers per device) and
its ``full_mask``, so they are computed once per (topology, mask, count, locality) and looked up
as arrays over nodes: 5,000 nodes cost one fancy-indexing operation, not 5,000 Python calls.

Contract: pure and deterministic. Methods that change state (:meth:`GpuInventory.allocate`,
:meth:`~GpuInventory.release`) mutate this object in place and are exact inverses of each other,
which is what gang scheduling's roll-back relies on; :meth:`~GpuInventory.copy` gives an
independent inventory. Misfits are values (:class:`GpuMisfit`), never exceptions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

from berth.schemas.cluster import NodeInfo, PodInfo

__all__ = [
    "GPU_RESOURCE",
    "MIG_PREFIX",
    "GpuAllocation",
    "GpuInventory",
    "GpuMisfit",
    "GpuRequest",
    "Locality",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MILLI = 1000
_DENSE_TABLE_MAX_DEVICES = 10  # 2**10 masks per topology: tables stay small and fill fast

Locality = Literal["any", "same-node", "same-socket", "nvlink"]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
_Item = TypeVar("_Item", bound=np.generic)


@dataclass(frozen=True)
class GpuRequest:
    """What one pod asks of GPU devices.

    Exactly one shape (or none, for a CPU-only pod): ``whole`` devices (from the
    ``nvidia.com/gpu`` request), a *share* of one device (``milli`` from ``gpu-fraction`` and/or
    ``memory_mib`` from ``gpu-memory``), or MIG slices (``mig``: profile → count). ``locality``
    constrains a multi-device set and is ignored for a single device.
    """

    whole: int = 0
    milli: int = 0
    memory_mib: int = 0
    mig: tuple[tuple[str, int], ...] = ()
    locality: Locality = "any"

    @classmethod
    def of(cls, pod: PodInfo) -> GpuRequest:
        mig = tuple(
            sorted(
                (name[len(MIG_PREFIX) :], amount)
                for name, amount in pod.requests.items()
                if name.startswith(MIG_PREFIX) and amount > 0
            )
        )
        return cls(
            whole=pod.requests.get(GPU_RESOURCE, 0),
            milli=pod.gpu_fraction_milli or 0,
            memory_mib=pod.gpu_memory_mib or 0,
            mig=mig,
            locality=pod.gpu_locality,
        )

    @property
    def is_share(self) -> bool:
        return self.whole == 0 and (self.milli > 0 or self.memory_mib > 0)

    @property
    def wants_gpu(self) -> bool:
        return self.whole > 0 or self.is_share or bool(self.mig)


@dataclass(frozen=True)
class GpuAllocation:
    """Devices a pod holds on one node. ``milli``/``memory_mib`` are per device taken (1000 and
    the whole memory for whole devices); ``mig`` lists (device index, profile, slices)."""

    devices: tuple[int, ...] = ()
    milli: int = 0
    memory_mib: int = 0
    mig: tuple[tuple[int, str, int], ...] = ()


@dataclass(frozen=True)
class GpuMisfit:
    """Why a node cannot host a GPU request: ``kind`` picks the message (see the messages
    module), ``detail`` carries its numbers."""

    kind: Literal["count", "socket", "nvlink", "share", "mig"]
    detail: tuple[int | str, ...] = ()


@dataclass
class _Topology:
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


@dataclass
class _RowCache:
    """A per-slot array derived from one row's state only; ``dirty`` rows must be recomputed."""

    values: IntArray
    dirty: set[int] = field(default_factory=set)


@dataclass
class _ShareSummary:
    """Cached per-node answer for one share shape; ``dirty`` rows must be recomputed."""

    best_col: IntArray
    best_free: IntArray
    dirty: set[int] = field(default_factory=set)


class GpuInventory:
    """Free GPU capacity of every node slot, per device.

    Rows are node *slots* (as the ClusterState assigns them; a slot may be empty), columns the
    node's devices in index order. Build incrementally with :meth:`grow`, :meth:`set_node`,
    :meth:`clear_node`, or at once with :meth:`of`.
    """

    def __init__(self) -> None:
        self.node_names: list[str | None] = []
        self.width = 0
        self.dev_index: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.free_milli: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.mem_free: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.mem_total: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.usable: BoolArray = np.zeros((0, 0), dtype=bool)
        self.models: list[tuple[str, ...]] = []
        self.mig_free: dict[str, IntArray] = {}
        self.mig_total: dict[str, IntArray] = {}
        self.full_mask: IntArray = np.zeros(0, dtype=np.int64)
        self.full_count: IntArray = np.zeros(0, dtype=np.int64)
        self.node_total: IntArray = np.zeros(0, dtype=np.int64)
        self.node_free: IntArray = np.zeros(0, dtype=np.int64)
        self._summaries: dict[tuple[int, int], _ShareSummary] = {}
        self._row_caches: dict[tuple[object, ...], _RowCache] = {}
        self.topo_id: IntArray = np.zeros(0, dtype=np.int64)
        self.topologies: list[_Topology] = []
        self._topo_ids: dict[tuple[object, ...], int] = {}
        self.device_count: IntArray = np.zeros(0, dtype=np.int64)
        self._tables: dict[tuple[int, str], tuple[BoolArray, IntArray]] = {}
        self._share_needs: dict[tuple[int, int], tuple[IntArray, IntArray]] = {}

    # --- construction --------------------------------------------------------------------------

    @classmethod
    def of(cls, nodes: Sequence[NodeInfo]) -> GpuInventory:
        """An inventory with ``nodes`` in slots 0.. (in the given order), nothing allocated."""
        inv = cls()
        inv.grow(len(nodes), max((len(node.gpus) for node in nodes), default=0))
        for slot, node in enumerate(nodes):
            inv.set_node(slot, node)
        return inv

    def grow(self, capacity: int, width: int | None = None) -> None:
        """Make room for ``capacity`` slots and ``width`` devices per node (never shrinks)."""
        rows = max(capacity, len(self.node_names))
        cols = max(width or 0, self.width)
        if rows == len(self.node_names) and cols == self.width:
            return

        def resized(array: npt.NDArray[_Item], fill: int | bool) -> npt.NDArray[_Item]:
            out: npt.NDArray[_Item] = np.full((rows, cols), fill, dtype=array.dtype)
            out[: array.shape[0], : array.shape[1]] = array
            return out

        self.dev_index = resized(self.dev_index, -1)
        self.free_milli = resized(self.free_milli, 0)
        self.mem_free = resized(self.mem_free, 0)
        self.mem_total = resized(self.mem_total, 0)
        self.usable = resized(self.usable, False)
        self.mig_free = {p: resized(a, 0) for p, a in self.mig_free.items()}
        self.mig_total = {p: resized(a, 0) for p, a in self.mig_total.items()}
        extra = rows - len(self.node_names)
        self.full_mask = np.concatenate([self.full_mask, np.zeros(extra, dtype=np.int64)])
        self.full_count = np.concatenate([self.full_count, np.zeros(extra, dtype=np.int64)])
        self.node_total = np.concatenate([self.node_total, np.zeros(extra, dtype=np.int64)])
        self.node_free = np.concatenate([self.node_free, np.zeros(extra, dtype=np.int64)])
        self.topo_id = np.concatenate([self.topo_id, np.zeros(extra, dtype=np.int64)])
        self.device_count = np.concatenate([self.device_count, np.zeros(extra, dtype=np.int64)])
        self._summaries = {}
        self._row_caches = {}
        self.node_names += [None] * extra
        self.models += [()] * extra
        if cols != self.width:
            # Lookup tables are sized by 2**width and shares' needs by the matrix shape.
            self.width = cols
            self._tables = {}
        self._share_needs = {}

    def _topology(self, node: NodeInfo) -> int:
        column = {device.index: c for c, device in enumerate(node.gpus)}
        numa, links = [], []
        for device in node.gpus:
            numa.append(device.numa_node)
            mask = 0
            for peer in device.nvlink_peers:
                if peer in column:
                    mask |= 1 << column[peer]
            links.append(mask)
        # NVLink is a two-way cable; accept a one-sided listing as a link.
        for c in range(len(links)):
            for peer in range(len(links)):
                if links[peer] >> c & 1:
                    links[c] |= 1 << peer
        key = (len(node.gpus), tuple(numa), tuple(links))
        if key not in self._topo_ids:
            self._topo_ids[key] = len(self.topologies)
            self.topologies.append(_Topology(len(node.gpus), tuple(numa), tuple(links)))
            self._tables = {}  # tables have a row per topology
        return self._topo_ids[key]

    def set_node(self, slot: int, node: NodeInfo) -> None:
        """Describe ``node`` in ``slot`` with all its devices free (re-apply holdings after)."""
        self.grow(slot + 1, len(node.gpus))
        self.clear_node(slot)
        self.node_names[slot] = node.name
        self.device_count[slot] = len(node.gpus)
        self.models[slot] = tuple(device.model for device in node.gpus)
        for c, device in enumerate(node.gpus):
            self.dev_index[slot, c] = device.index
            self.mem_total[slot, c] = device.memory_mib
            self.mem_free[slot, c] = device.memory_mib
            whole = device.healthy and not device.mig
            self.usable[slot, c] = whole
            self.free_milli[slot, c] = MILLI if whole else 0
            if device.healthy:
                for piece in device.mig:
                    if piece.profile not in self.mig_free:
                        self.mig_free[piece.profile] = np.zeros(self.free_milli.shape, dtype=np.int64)
                        self.mig_total[piece.profile] = np.zeros(self.free_milli.shape, dtype=np.int64)
                    self.mig_free[piece.profile][slot, c] += piece.count
                    self.mig_total[piece.profile][slot, c] += piece.count
        self.topo_id[slot] = self._topology(node)
        self._share_needs = {}
        self._refresh(slot)

    def clear_node(self, slot: int) -> None:
        """Empty ``slot`` (the node left): no devices, nothing free."""
        if slot >= len(self.node_names):
            return
        self.node_names[slot] = None
        self.device_count[slot] = 0
        self.models[slot] = ()
        for array, fill in ((self.dev_index, -1), (self.free_milli, 0), (self.mem_free, 0), (self.mem_total, 0)):
            array[slot] = fill
        self.usable[slot] = False
        for array in (*self.mig_free.values(), *self.mig_total.values()):
            array[slot] = 0
        self.topo_id[slot] = 0
        self.full_mask[slot] = 0
        self.full_count[slot] = 0
        self.node_total[slot] = 0
        self.node_free[slot] = 0
        self._share_needs = {}
        self._summaries = {}
        self._row_caches = {}

    def copy(self) -> GpuInventory:
        """An independent inventory (the memoised choices of a topology are shared: they never change)."""
        other = GpuInventory()
        other.node_names = list(self.node_names)
        other.width = self.width
        other.dev_index = self.dev_index.copy()
        other.mem_total = self.mem_total.copy()
        other.usable = self.usable.copy()
        other.models = list(self.models)
        other.topo_id = self.topo_id.copy()
        other.topologies = list(self.topologies)
        other._topo_ids = dict(self._topo_ids)
        other.device_count = self.device_count.copy()
        other.mig_total = {p: a.copy() for p, a in self.mig_total.items()}
        other._tables = dict(self._tables)
        other._share_needs = dict(self._share_needs)
        other.free_milli = self.free_milli.copy()
        other.mem_free = self.mem_free.copy()
        other.mig_free = {p: a.copy() for p, a in self.mig_free.items()}
        other.full_mask = self.full_mask.copy()
        other.full_count = self.full_count.copy()
        other.node_total = self.node_total.copy()
        other.node_free = self.node_free.copy()
        return other

    def _refresh(self, row: int) -> None:
        # Plain Python over one row (a handful of devices) beats numpy's per-call overhead.
        mask = count = total = free = 0
        for c, (milli, ok) in enumerate(zip(self.free_milli[row].tolist(), self.usable[row].tolist(), strict=True)):
            if ok:
                total += MILLI
                free += milli
                if milli == MILLI:
                    mask |= 1 << c
                    count += 1
        self.full_mask[row] = mask
        self.full_count[row] = count
        self.node_total[row] = total
        self.node_free[row] = free
        for summary in self._summaries.values():
            summary.dirty.add(row)
        for cache in self._row_caches.values():
            cache.dirty.add(row)

    # --- whole-GPU lookup tables ---------------------------------------------------------------

    def _table(self, count: int, locality: str) -> tuple[BoolArray, IntArray] | None:
        """(feasible, fitness) as [topology, mask] arrays, or None when devices are too many."""
        if self.width > _DENSE_TABLE_MAX_DEVICES:
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

    def _whole_lookup(self, rows: IntArray, count: int, locality: str) -> tuple[BoolArray, IntArray]:
        if len(rows) > 64:
            # Feasibility and fitness of a node's best set depend only on its own row.
            def compute(sub: IntArray) -> IntArray:
                ok, fit = self._whole_lookup_direct(sub, count, locality)
                return np.where(ok, fit, -1)

            values = self.per_slot(("whole", count, locality), compute).take(rows)
            return values >= 0, np.maximum(values, 0)
        return self._whole_lookup_direct(rows, count, locality)

    def _whole_lookup_direct(self, rows: IntArray, count: int, locality: str) -> tuple[BoolArray, IntArray]:
        table = self._table(count, locality)
        if table is not None:
            ok, fit = table
            return ok[self.topo_id[rows], self.full_mask[rows]], fit[self.topo_id[rows], self.full_mask[rows]]
        feasible = np.zeros(len(rows), dtype=bool)
        fitness = np.zeros(len(rows), dtype=np.int64)
        for i, row in enumerate(rows):
            topo = self.topologies[int(self.topo_id[row])]
            cols = topo.choose(int(self.full_mask[row]), count, locality)
            if cols is not None:
                feasible[i], fitness[i] = True, topo.fitness(cols)
        return feasible, fitness

    # --- filtering -------------------------------------------------------------------------------

    def _share_need(self, request: GpuRequest) -> tuple[IntArray, IntArray]:
        """Per-device (milli, MiB) a share takes: a fraction implies its part of the memory and a
        memory size implies its part of the compute, so shares of both kinds can share a device."""
        key = (request.milli, request.memory_mib)
        if key in self._share_needs:
            return self._share_needs[key]
        total = self.mem_total
        if request.milli:
            milli = np.full(total.shape, request.milli, dtype=np.int64)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                milli = np.where(total > 0, -((-request.memory_mib * MILLI) // np.maximum(total, 1)), MILLI + 1)
        memory = (
            np.full(total.shape, request.memory_mib, dtype=np.int64)
            if request.memory_mib
            else (total * request.milli) // MILLI
        )
        # Device memory never changes, so a share's per-device need is computed once per shape.
        self._share_needs[key] = (milli, memory)
        return milli, memory

    def share_fits(self, request: GpuRequest, rows: IntArray | None = None) -> BoolArray:
        """[rows, devices]: which devices can take the share."""
        milli, memory = self._share_need(request)
        if rows is not None and len(rows) <= 8:
            return self.usable[rows] & (self.free_milli[rows] >= milli[rows]) & (self.mem_free[rows] >= memory[rows])
        # Whole-matrix comparisons then a row pick: fancy-indexing three [N, D] operands first
        # costs ten times more than comparing everything.
        fits = self.usable & (self.free_milli >= milli) & (self.mem_free >= memory)
        return fits if rows is None else fits[rows]

    def _summary(self, request: GpuRequest) -> _ShareSummary:
        """Per node, for one share shape: does any device fit, and which one bin-packing picks.

        Kept incrementally: a placement changes one node, so only the rows that changed since
        the last use of this shape are recomputed (a handful), not the whole [nodes, devices]
        matrix — which is what makes per-pod cost independent of the cluster size."""
        key = (request.milli, request.memory_mib)
        summary = self._summaries.get(key)
        if summary is None:
            if len(self._summaries) >= 64:  # many distinct shapes: start over rather than grow
                self._summaries = {}
            fits = self.share_fits(request)
            masked = np.where(fits, self.free_milli, np.iinfo(np.int64).max)
            col = np.argmin(masked, axis=1) if self.width else np.zeros(len(fits), dtype=np.int64)
            best = np.where(fits.any(axis=1), col, -1)
            summary = _ShareSummary(best, self._free_at(np.arange(len(best)), best))
            self._summaries[key] = summary
        elif summary.dirty:
            milli, memory = self._share_need(request)
            if len(summary.dirty) <= 16:
                # A few changed nodes: plain Python over their devices beats numpy's overhead.
                for row in summary.dirty:
                    free = self.free_milli[row].tolist()
                    mem = self.mem_free[row].tolist()
                    use = self.usable[row].tolist()
                    need = milli[row].tolist()
                    need_mem = memory[row].tolist()
                    best_col, best_free = -1, 0
                    for c in range(self.width):
                        if (
                            use[c]
                            and free[c] >= need[c]
                            and mem[c] >= need_mem[c]
                            and (best_col < 0 or free[c] < best_free)
                        ):
                            best_col, best_free = c, free[c]
                    summary.best_col[row] = best_col
                    summary.best_free[row] = best_free
            else:
                rows = np.fromiter(sorted(summary.dirty), dtype=np.intp, count=len(summary.dirty))
                fits = (
                    self.usable[rows] & (self.free_milli[rows] >= milli[rows]) & (self.mem_free[rows] >= memory[rows])
                )
                masked = np.where(fits, self.free_milli[rows], np.iinfo(np.int64).max)
                col = np.argmin(masked, axis=1) if self.width else np.zeros(len(rows), dtype=np.int64)
                best = np.where(fits.any(axis=1), col, -1)
                summary.best_col[rows] = best
                summary.best_free[rows] = self._free_at(rows, best)
            summary.dirty.clear()
        return summary

    def _free_at(self, rows: IntArray, cols: IntArray) -> IntArray:
        if not self.width:
            return np.zeros(len(rows), dtype=np.int64)
        return np.where(cols >= 0, self.free_milli[rows, np.maximum(cols, 0)], 0)

    def per_slot(self, key: tuple[object, ...], compute: Callable[[IntArray], IntArray]) -> IntArray:
        """A per-slot array that depends only on each slot's own row, kept incrementally.

        ``compute(rows)`` must return the values of ``rows`` from the current state. The first
        call computes every slot; later calls recompute only the slots changed since (a
        placement changes one), so a score that is a pure function of a node's own GPU state
        costs O(changed rows) per pod instead of O(nodes). Read-only result: do not modify.
        """
        cache = self._row_caches.get(key)
        if cache is None:
            if len(self._row_caches) >= 128:
                self._row_caches = {}
            cache = _RowCache(np.asarray(compute(np.arange(len(self.node_names))), dtype=np.int64))
            self._row_caches[key] = cache
        elif cache.dirty:
            rows = np.fromiter(sorted(cache.dirty), dtype=np.intp, count=len(cache.dirty))
            cache.dirty.clear()
            cache.values[rows] = compute(rows)
        return cache.values

    def touch(self, row: int) -> None:
        """Mark ``row`` changed for every per-slot cache, e.g. because something outside the
        GPU state that a cached value also reads (free CPU) changed on that node."""
        for cache in self._row_caches.values():
            cache.dirty.add(row)

    def share_choice(self, request: GpuRequest) -> tuple[IntArray, IntArray]:
        """Per slot: the column bin-packing gives the share (-1: none fits) and that device's
        free milli now. Read-only views of cached arrays: do not modify."""
        summary = self._summary(request)
        return summary.best_col, summary.best_free

    def filter_codes(self, request: GpuRequest, rows: IntArray) -> tuple[IntArray, list[GpuMisfit]]:
        """Per row of ``rows``: -1 if it fits, else the index of its reason in the returned list.

        The same answer as :meth:`filter`, in the shape a Filter plugin returns, and kept per
        slot between pods (only changed nodes are recomputed) for whole GPUs and shares."""
        if request.whole:
            misfits = [GpuMisfit("count", (GPU_RESOURCE,))]
            if request.whole > 1 and request.locality in ("same-socket", "nvlink"):
                kind: Literal["socket", "nvlink"] = "socket" if request.locality == "same-socket" else "nvlink"
                misfits.append(GpuMisfit(kind, (request.whole,)))

            def compute(sub: IntArray) -> IntArray:
                fits, failures = self.filter(request, sub)
                codes = np.full(len(sub), -1, dtype=np.int64)
                for index, (_, mask) in enumerate(failures):
                    codes[mask] = index
                return codes

            return self.per_slot(("filter", request.whole, request.locality), compute).take(rows), misfits
        if request.is_share:
            best_col, _ = self.share_choice(request)
            codes = np.where(best_col.take(rows) >= 0, -1, 0)
            return codes, [GpuMisfit("share", (request.milli, request.memory_mib))]
        fits, failures = self.filter(request, rows)
        codes = np.full(len(rows), -1, dtype=np.int64)
        for index, (_, mask) in enumerate(failures):
            codes[mask] = index
        return codes, [misfit for misfit, _ in failures]

    def filter(
        self, request: GpuRequest, rows: IntArray | None = None
    ) -> tuple[BoolArray, list[tuple[GpuMisfit, BoolArray]]]:
        """Which of ``rows`` (default: all nodes, in order) can host ``request``.

        Returns ``(fits, failures)``: ``failures`` pairs each reason with the rows it explains
        (disjoint masks over ``rows``; every row that does not fit is in exactly one), so a caller
        can count nodes per reason for a kube-style message without a Python loop over nodes.
        """
        rows = np.arange(len(self.node_names)) if rows is None else rows
        if not request.wants_gpu:
            return np.ones(len(rows), dtype=bool), []
        if request.whole:
            count_ok = self.full_count[rows] >= request.whole
            failures = [(GpuMisfit("count", (GPU_RESOURCE,)), ~count_ok)]
            if request.whole == 1 or request.locality in ("any", "same-node"):
                return count_ok, failures
            feasible, _ = self._whole_lookup(rows, request.whole, request.locality)
            feasible &= count_ok
            # Enough free devices, but not in the places the locality asks for.
            kind: Literal["socket", "nvlink"] = "socket" if request.locality == "same-socket" else "nvlink"
            failures.append((GpuMisfit(kind, (request.whole,)), count_ok & ~feasible))
            return feasible, failures
        if request.is_share:
            fits = self._summary(request).best_col[rows] >= 0
            return fits, [(GpuMisfit("share", (request.milli, request.memory_mib)), ~fits)]
        fits = np.ones(len(rows), dtype=bool)
        failures = []
        for profile, count in request.mig:
            free = self.mig_free.get(profile)
            ok = (free.sum(axis=1)[rows] >= count) if free is not None else np.zeros(len(rows), dtype=bool)
            failures.append((GpuMisfit("mig", (f"{MIG_PREFIX}{profile}",)), fits & ~ok))
            fits = fits & ok
        return fits, failures

    # --- scoring inputs ------------------------------------------------------------------------

    def total_milli(self) -> IntArray:
        """Per node: milli of its healthy, whole (non-MIG) devices (kept current, O(1))."""
        return self.node_total

    def used_milli(self) -> IntArray:
        """Per node: milli of those devices held by pods."""
        return self.node_total - self.node_free

    def share_device(self, request: GpuRequest, rows: IntArray | None = None) -> IntArray:
        """Column each node would give the share: the most used device that fits (bin-packing),
        lowest index among equals; -1 where none fits."""
        if rows is not None and len(rows) <= 8:
            fits = self.share_fits(request, rows)
            free = self.free_milli[rows]
            key = np.where(fits, free, np.iinfo(np.int64).max)
            col = np.argmin(key, axis=1) if self.width else np.zeros(len(key), dtype=np.int64)
            return np.where(fits.any(axis=1), col, -1)
        best = self._summary(request).best_col
        return best.copy() if rows is None else best[rows]

    def whole_fitness(self, request: GpuRequest, rows: IntArray) -> IntArray:
        """0..100 topology fitness of the device set each row would give a whole-GPU request."""
        _, fitness = self._whole_lookup(rows, request.whole, request.locality)
        return fitness

    # --- choosing and holding devices ----------------------------------------------------------

    def choose(self, row: int, request: GpuRequest) -> GpuAllocation | None:
        """The devices node ``row`` would give ``request``, or None if it cannot."""
        if not request.wants_gpu:
            return GpuAllocation()
        if request.whole:
            topo = self.topologies[int(self.topo_id[row])]
            cols = topo.choose(
                int(self.full_mask[row]), request.whole, request.locality if request.whole > 1 else "any"
            )
            if cols is None:
                return None
            devices = tuple(int(self.dev_index[row, c]) for c in cols)
            return GpuAllocation(devices=tuple(sorted(devices)), milli=MILLI)
        if request.is_share:
            col = int(self.share_choice(request)[0][row])
            if col < 0:
                return None
            milli, memory = self._share_need(request)
            return GpuAllocation(
                devices=(int(self.dev_index[row, col]),), milli=int(milli[row, col]), memory_mib=int(memory[row, col])
            )
        pieces = self._mig_pieces(row, request, range(self.width))
        if pieces is None:
            return None
        devices = tuple(sorted({d for d, _, _ in pieces}))
        return GpuAllocation(devices=devices, mig=pieces)

    def share_at(self, row: int, request: GpuRequest, col: int) -> GpuAllocation | None:
        """The share ``request`` taken from column ``col`` of node ``row``, or None if that
        device cannot take it (unusable, or too little free compute or memory)."""
        if not request.is_share or not 0 <= col < self.width:
            return None
        if not self.share_fits(request, np.array([row], dtype=np.intp))[0, col]:
            return None
        milli, memory = self._share_need(request)
        return GpuAllocation(
            devices=(int(self.dev_index[row, col]),), milli=int(milli[row, col]), memory_mib=int(memory[row, col])
        )

    def _mig_pieces(
        self, row: int, request: GpuRequest, columns: Iterable[int]
    ) -> tuple[tuple[int, str, int], ...] | None:
        """Slices for ``request.mig`` from ``columns`` of node ``row``: the device with the
        fewest free slices of the profile first (bin-packing), lowest index among equals; a
        slice never spans devices. None when the columns do not have enough."""
        columns = list(columns)
        pieces: list[tuple[int, str, int]] = []
        for profile, count in request.mig:
            free = self.mig_free.get(profile)
            if free is None:
                return None
            order = sorted((int(free[row, c]), c) for c in columns if free[row, c] > 0)
            need = count
            for have, c in order:
                take = min(have, need)
                pieces.append((int(self.dev_index[row, c]), profile, take))
                need -= take
                if need == 0:
                    break
            if need:
                return None
        return tuple(sorted(pieces))

    def _column(self, row: int, device: int) -> int:
        if 0 <= device < self.width and self.dev_index[row, device] == device:
            return device  # the usual layout: device i in column i
        hits = np.flatnonzero(self.dev_index[row] == device)
        if not len(hits):
            raise KeyError(f"node {self.node_names[row]} has no GPU device {device}")
        return int(hits[0])

    def _apply(self, row: int, allocation: GpuAllocation, sign: int) -> None:
        for piece_device, profile, count in allocation.mig:
            c = self._column(row, piece_device)
            self.mig_free[profile][row, c] = max(0, int(self.mig_free[profile][row, c]) - sign * count)
        if allocation.milli or allocation.memory_mib:
            for device in allocation.devices:
                c = self._column(row, device)
                if not self.usable[row, c]:
                    continue
                memory = (
                    int(self.mem_total[row, c])
                    if allocation.milli == MILLI and not allocation.memory_mib
                    else allocation.memory_mib
                )
                # Clamp: a bound pod's claim is a fact even if the cluster is over-committed.
                self.free_milli[row, c] = min(MILLI, max(0, int(self.free_milli[row, c]) - sign * allocation.milli))
                self.mem_free[row, c] = min(
                    int(self.mem_total[row, c]), max(0, int(self.mem_free[row, c]) - sign * memory)
                )
        self._refresh(row)

    def allocate(self, row: int, allocation: GpuAllocation) -> None:
        """Hold ``allocation`` on node ``row`` (in place)."""
        self._apply(row, allocation, 1)

    def release(self, row: int, allocation: GpuAllocation) -> None:
        """Give ``allocation`` back (the exact inverse of :meth:`allocate` for a fitting claim)."""
        self._apply(row, allocation, -1)

    def allocation_of_bound(self, row: int, pod: PodInfo, devices: Sequence[int] | None = None) -> GpuAllocation:
        """What a pod already bound to node ``row`` holds.

        Uses ``devices`` (default: the pod's recorded ``berth.io/gpu-devices``) when given;
        otherwise assigns devices deterministically, as :meth:`choose` would now, so that
        replaying the same bound pods in the same order always yields the same layout. A
        recorded device the node does not have is dropped (the node changed under the pod); an
        over-committed claim is kept. MIG slices are spread over the recorded devices the way
        :meth:`choose` fills them (fullest first), so a decision replays to the same slices.
        """
        request = GpuRequest.of(pod)
        if not request.wants_gpu:
            return GpuAllocation()
        known = self.dev_index[row].tolist()
        recorded = tuple(sorted(d for d in (pod.gpu_devices if devices is None else devices) if d in known))
        if recorded:
            if request.whole:
                return GpuAllocation(devices=recorded, milli=MILLI)
            if request.is_share:
                milli, memory = self._share_need(request)
                c = self._column(row, recorded[0])
                return GpuAllocation(devices=recorded[:1], milli=int(milli[row, c]), memory_mib=int(memory[row, c]))
            allowed = [self._column(row, d) for d in recorded]
            pieces = self._mig_pieces(row, request, allowed)
            return GpuAllocation(devices=recorded, mig=pieces or ())
        chosen = self.choose(row, request)
        if chosen is not None:
            return chosen
        # Over-committed node: still record the claim on the lowest-indexed devices.
        usable = [int(self.dev_index[row, c]) for c in range(self.width) if self.usable[row, c]]
        if request.whole:
            return GpuAllocation(devices=tuple(usable[: request.whole]), milli=MILLI)
        if request.is_share and usable:
            milli, memory = self._share_need(request)
            c = self._column(row, usable[0])
            return GpuAllocation(devices=(usable[0],), milli=int(milli[row, c]), memory_mib=int(memory[row, c]))
        return GpuAllocation()

    # --- views ---------------------------------------------------------------------------------

    def describe(self, row: int) -> dict[int, dict[str, int]]:
        """Per device index: free milli and MiB, and free MIG slices (for tests and explain)."""
        out: dict[int, dict[str, int]] = {}
        for c in range(int(self.device_count[row])):
            entry = {"free_milli": int(self.free_milli[row, c]), "mem_free": int(self.mem_free[row, c])}
            for profile, free in sorted(self.mig_free.items()):
                if free[row, c]:
                    entry[profile] = int(free[row, c])
            out[int(self.dev_index[row, c])] = entry
        return out
