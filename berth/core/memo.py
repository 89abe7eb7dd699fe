"""Per-node memo of plugin results, invalidated by the ClusterState's node versions.

Many plugins judge a node from that node's row alone: NodeResourcesFit's filter and score depend
only on the pod's requests and the node's allocatable/requested. Between two scheduling cycles
usually one node changed (the one the last pod was assumed on), so recomputing every node is
wasted work. A plugin opts in by returning a *signature* (see
:meth:`berth.core.framework.FilterPlugin.filter_signature` /
:meth:`~berth.core.framework.ScorePlugin.score_signature`): a hashable value such that its result
for a node is a pure function of (signature, the node's state). The framework then keeps, per
(plugin, signature), the last result and the node version it was computed at, and asks the
plugin only about nodes whose version moved.

This is derived data: results are bit-identical to recomputing, it is not part of the snapshot
hash, and evicting entries (least recently used first, bounded) only costs time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from berth.core.framework import Status
from berth.core.state import ClusterState, StateExtension

__all__ = ["FilterMemoEntry", "NodeMemo", "ScoreMemoEntry", "StatusTable", "candidate_mask", "stale_nodes"]

_NEVER = 0
# Rows start at version 0, the version of a slot no node ever used: unused slots never look
# stale, while every live node (version >= 1) is stale until first computed.


class ScoreMemoEntry:
    __slots__ = ("last_use", "values", "versions")

    def __init__(self, capacity: int) -> None:
        self.last_use = 0
        self.values = np.zeros(capacity, dtype=np.int64)
        self.versions = np.full(capacity, _NEVER, dtype=np.int64)

    def grow(self, capacity: int) -> None:
        extra = capacity - self.values.size
        if extra > 0:
            self.values = np.concatenate([self.values, np.zeros(extra, dtype=np.int64)])
            self.versions = np.concatenate([self.versions, np.full(extra, _NEVER, np.int64)])


class StatusTable:
    """Interns statuses so each distinct rejection gets one small integer (append-only)."""

    __slots__ = ("statuses", "_index")

    def __init__(self) -> None:
        self.statuses: list[Status] = []
        self._index: dict[Status, int] = {}

    def intern(self, status: Status) -> int:
        index = self._index.get(status)
        if index is None:
            index = self._index[status] = len(self.statuses)
            self.statuses.append(status)
        return index


class FilterMemoEntry(StatusTable):
    """Per slot: -1 (passed) or an index into ``statuses`` (interned, append-only)."""

    __slots__ = ("codes", "last_use", "versions")

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.last_use = 0
        self.codes = np.full(capacity, -1, dtype=np.int32)
        self.versions = np.full(capacity, _NEVER, dtype=np.int64)

    def grow(self, capacity: int) -> None:
        extra = capacity - self.codes.size
        if extra > 0:
            self.codes = np.concatenate([self.codes, np.full(extra, -1, dtype=np.int32)])
            self.versions = np.concatenate([self.versions, np.full(extra, _NEVER, np.int64)])


class NodeMemo(StateExtension):
    """The memo, attached to a ClusterState by the framework."""

    KEY = "berth.core/node-memo"
    MIN_ENTRIES = 64
    BUDGET_BYTES = 64 * 2**20
    """Entries kept: as many as fit in this budget (16 bytes per slot each), at least
    MIN_ENTRIES — a workload with many distinct pod shapes (the Alibaba trace has 151) needs one
    entry per shape and plugin, or every cycle recomputes every node."""
    IDLE_USES = 32_768
    """An entry not asked for in this many memo lookups (a scheduling cycle makes one per
    memoised plugin, so a few thousand cycles) is dropped, whatever the budget. By then most of
    its rows are stale anyway (every placement and deletion moves a node's version), so it
    would save little time. Without this bound the memo's size follows every shape ever seen,
    and a long-running cell with a varied workload grows for hours before it reaches the
    budget; with it, the size follows the shapes in recent use and levels off within minutes."""

    def __init__(self) -> None:
        self._capacity = 0
        self._uses = 0
        self._entries: OrderedDict[Hashable, ScoreMemoEntry | FilterMemoEntry] = OrderedDict()

    def grow(self, capacity: int) -> None:
        self._capacity = capacity
        for entry in self._entries.values():
            entry.grow(capacity)

    @property
    def max_entries(self) -> int:
        return max(self.MIN_ENTRIES, self.BUDGET_BYTES // (16 * max(self._capacity, 1)))

    def __len__(self) -> int:
        return len(self._entries)

    def _get(self, key: Hashable, kind: type) -> ScoreMemoEntry | FilterMemoEntry:
        self._uses += 1
        entry = self._entries.get(key)
        if entry is None:
            entry = kind(self._capacity)
            entry.last_use = self._uses
            self._entries[key] = entry
            self._evict()
        else:
            entry.last_use = self._uses
            self._entries.move_to_end(key)
        return entry

    def _evict(self) -> None:
        """Drop least recently used entries while over the budget or idle too long. The order
        of ``_entries`` is the order of last use, so the oldest is first, and the entry just
        added (used now, and the budget is at least MIN_ENTRIES) is never dropped."""
        entries = self._entries
        idle_before = self._uses - self.IDLE_USES
        while len(entries) > self.max_entries or next(iter(entries.values())).last_use < idle_before:
            entries.popitem(last=False)

    def score_entry(self, key: Hashable) -> ScoreMemoEntry:
        return self._get(("score", key), ScoreMemoEntry)  # type: ignore[return-value]  # _get returns the entry class it is given

    def filter_entry(self, key: Hashable) -> FilterMemoEntry:
        return self._get(("filter", key), FilterMemoEntry)  # type: ignore[return-value]  # _get returns the entry class it is given


def candidate_mask(state: ClusterState, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """A mask over the state's slots, True for ``nodes`` (live slots without repeats), for
    :func:`stale_nodes`: the state's own live-slot mask when they are every node (read-only
    use), else a new one."""
    if nodes.size == len(state.nodes):
        return state.alive
    mask = np.zeros(state.capacity, dtype=bool)
    mask[nodes] = True
    return mask


def stale_nodes(
    versions: npt.NDArray[np.int64],
    current: npt.NDArray[np.int64],
    in_nodes: npt.NDArray[np.bool_],
    bound: int | None = None,
) -> npt.NDArray[np.intp]:
    """Slots among ``in_nodes`` whose memoised result is older than the node. Compares whole
    contiguous arrays (cheap) and keeps the few changed slots that matter. ``bound``: compare
    only the slots below it (``state.nodes.slot_bound``: no node ever had a higher slot, so
    both versions there are still the initial 0 and never differ)."""
    if bound is not None:
        versions = versions[:bound]
        current = current[:bound]
    changed = (versions != current).nonzero()[0]  # 1-D: np.flatnonzero without its wrappers
    stale: npt.NDArray[np.intp] = changed[in_nodes[changed]]
    return stale
