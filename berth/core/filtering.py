"""Filtering: a profile's PreFilter and Filter plugins over the nodes of one cycle.

The outcome is the feasible nodes and a :class:`~berth.core.framework.Diagnosis` of every other
node: the status of the first plugin that rejected it, as kube reports them. Statuses are
numbered in order of first occurrence in node-name order, so a decision's rejection groups never
depend on how a plugin (or its memo) numbered them.

Plugins that declare a filter signature
(:meth:`~berth.core.framework.FilterPlugin.filter_signature`) are memoised per node
(:mod:`berth.core.memo`): only candidates changed since their verdict was recorded for an equal
signature are judged again.

**Sampling** (``percentageOfNodesToScore``, a pool's ``fastScheduling.maxNodesToScore``; see
:class:`Sampling`): like kube-scheduler, a cycle may stop filtering once it has found enough
feasible nodes, and only those are scored. kube visits the nodes from a start index that rotates
from cycle to cycle (it depends on every earlier cycle of the process, so a decision cannot be
replayed from its inputs). Berth starts at ``blake2b64(pod UID) mod n`` in the candidates' name
order and wraps around: which nodes are evaluated is a pure function of the pod UID, the node set
and the limit, so replaying a decision re-evaluates exactly the same nodes, and different pods
still start at different places (no hot spot at the first names). Berth's filters are vectorised
and memoised over the node array, so every candidate is filtered (a chunked visit that stopped
early measured no faster, and chose the same nodes) and the cycle then keeps what the visit would
have: the first ``limit`` feasible nodes in visit order; the nodes after the last of them count as
not evaluated (no status, as in kube's diagnosis). The saving is in scoring. When no node is feasible every node has
been evaluated, so an unschedulable pod's diagnosis (and preemption) is the same as without sampling.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core import messages
from berth.core.config import nodes_to_find
from berth.core.framework import (
    Code,
    CycleContext,
    Diagnosis,
    FilterPlugin,
    NodeArray,
    PreFilterPlugin,
    Status,
)
from berth.core.hashing import name_hash64
from berth.core.memo import NodeMemo, StatusTable, candidate_mask, stale_nodes

__all__ = ["Feasibility", "ProfileFilters", "Sampling"]


@dataclass(frozen=True, slots=True)
class Sampling:
    """How many feasible nodes a cycle looks for (see the module docstring).

    ``percentage``: the profile's ``percentageOfNodesToScore`` (None: every node; 0: kube's
    adaptive percentage), applied with kube's arithmetic
    (:func:`berth.core.config.nodes_to_find`) to the candidates left after PreFilter;
    ``max_nodes``: an absolute cap on top (a pool's ``fastScheduling.maxNodesToScore``; no
    100-node floor); ``scoring``: False when the profile has no Score plugin, where kube looks
    for a single feasible node once sampling is on."""

    percentage: int | None = None
    max_nodes: int | None = None
    scoring: bool = True

    @property
    def active(self) -> bool:
        return self.percentage is not None or self.max_nodes is not None

    def limit(self, candidates: int) -> int:
        """Feasible nodes to find among ``candidates``."""
        if not self.active:
            return candidates
        if not self.scoring:
            return 1
        found = nodes_to_find(self.percentage, candidates)
        if self.max_nodes is not None:
            found = min(found, max(1, self.max_nodes))
        return found


EVERY_NODE = Sampling()


@dataclass(frozen=True, slots=True)
class Feasibility:
    """The outcome of PreFilter + Filter: feasible slots (name order) and why others failed."""

    feasible: NodeArray
    diagnosis: Diagnosis


class ProfileFilters:
    """The filtering plugins of one profile, in configured order.

    ``config_hash`` and ``profile`` key the memo entries, so profiles and configurations sharing
    a state never share an entry. Holds no per-cycle state.
    """

    def __init__(
        self,
        pre_filter_plugins: Sequence[PreFilterPlugin],
        filter_plugins: Sequence[FilterPlugin],
        config_hash: str,
        profile: str,
    ) -> None:
        self.pre_filter_plugins = pre_filter_plugins
        self.filter_plugins = filter_plugins
        self.config_hash = config_hash
        self.profile = profile

    def find_feasible(
        self, cycle: CycleContext, only: Sequence[str] | None, sampling: Sampling = EVERY_NODE
    ) -> Feasibility:
        """PreFilter + Filter for the cycle's pod over every node of its state, or only over the
        nodes named in ``only`` (others are ignored, not reported); with an active ``sampling``,
        only until enough feasible nodes are found (see the module docstring)."""
        state = cycle.state
        all_nodes = state.nodes.order()
        if only is not None:
            wanted = {state.nodes.slot_of(name) for name in only} - {None}
            all_nodes = all_nodes[np.isin(all_nodes, np.fromiter(wanted, dtype=np.intp, count=len(wanted)))]
        table = StatusTable()
        codes = np.full(all_nodes.size, -1, dtype=np.int32)
        started = cycle.timer.start()
        rejection, restrict, restricting = self._pre_filter(cycle)
        cycle.timer.point("PreFilter", rejection, started)
        if rejection is not None:
            # kube: every node gets the PreFilter status; its message replaces the histogram.
            codes[:] = table.intern(rejection)
            return Feasibility(all_nodes[:0], Diagnosis(all_nodes, codes, tuple(table.statuses), rejection))
        positions = np.arange(all_nodes.size)
        if restrict is not None:
            slots = np.fromiter((s for s in (state.nodes.slot_of(n) for n in restrict) if s is not None), dtype=np.intp)
            inside = np.isin(all_nodes, slots)
            absent = Status.unresolvable(messages.plugins_not_satisfied(restricting))
            codes[~inside] = table.intern(absent)
            positions = positions[inside]
        candidates = all_nodes if restrict is None else all_nodes[positions]
        limit = sampling.limit(int(candidates.size))
        if limit >= candidates.size:
            feasible, _ = self._filter(cycle, candidates, positions, codes, table)
            return Feasibility(feasible, Diagnosis(all_nodes, codes, tuple(table.statuses)))
        found = self._filter_then_cut(cycle, candidates, positions, codes, table, limit)
        statuses = _compact(codes, table.statuses)
        return Feasibility(all_nodes[found], Diagnosis(all_nodes, codes, statuses))

    def _filter_then_cut(
        self,
        cycle: CycleContext,
        candidates: NodeArray,
        positions: npt.NDArray[np.intp],
        codes: npt.NDArray[np.int32],
        table: StatusTable,
        limit: int,
    ) -> npt.NDArray[np.intp]:
        """Filter every candidate (vectorised, memoised), then keep what a visit from the pod's
        start would have seen: the first ``limit`` feasible nodes in visit order, and no status
        for the nodes after the last of them."""
        total = int(candidates.size)
        start = name_hash64(cycle.pod.uid) % total
        _, passed = self._filter(cycle, candidates, positions, codes, table)
        if passed.size <= limit:
            return passed
        # Positions are ascending, so a passed node's index among the candidates is a search.
        local = passed if total == codes.size else np.searchsorted(positions, passed)
        rank = local - start
        rank[rank < 0] += total  # visit order: start, start + 1, ..., wrapping around
        cut = int(np.partition(rank, limit - 1)[limit - 1])
        visit = np.arange(total) - start
        visit[visit < 0] += total
        codes[positions[visit > cut]] = -1  # after the limit-th feasible node: not evaluated
        return passed[rank <= cut]

    def _pre_filter(self, cycle: CycleContext) -> tuple[Status | None, frozenset[str] | None, set[str]]:
        """Run the PreFilters: ``(rejection, restrict, restricting)`` — the status that rejects
        the pod on every node (None: none does), the node names the plugins in ``restricting``
        restrict the candidates to (None: no restriction). Skipping plugins are recorded."""
        restrict: frozenset[str] | None = None
        restricting: set[str] = set()
        deferred: Status | None = None
        timer = cycle.timer
        for plugin in self.pre_filter_plugins:
            started = timer.plugin_start()
            status, result = plugin.pre_filter(cycle)
            timer.plugin(plugin.NAME, "PreFilter", status, started)
            if status.is_skip:
                cycle.skip_filter.add(plugin.NAME)
                continue
            if not status.is_success:
                status = status.with_plugin(plugin.NAME)
                if status.code is Code.UNSCHEDULABLE:
                    # kube keeps running the other PreFilters (preemption needs their state)
                    # and reports the last such status.
                    deferred = status
                    continue
                return status, None, restricting
            if result is not None and result.node_names is not None:
                restricting.add(plugin.NAME)
                restrict = result.node_names if restrict is None else restrict & result.node_names
                if not restrict:
                    reason = (
                        messages.plugins_not_satisfied_simultaneously(restricting)
                        if len(restricting) > 1
                        else messages.plugin_not_satisfied(next(iter(restricting)))
                    )
                    return Status.unresolvable(reason), None, restricting
        return deferred, restrict, restricting

    def _filter(
        self,
        cycle: CycleContext,
        candidates: NodeArray,
        positions: npt.NDArray[np.intp],
        codes: npt.NDArray[np.int32],
        table: StatusTable,
    ) -> tuple[NodeArray, npt.NDArray[np.intp]]:
        """Run the Filters over ``candidates`` (at ``positions`` of ``codes``); a node leaves at
        its first rejection, whose status is interned into ``table`` and its index written into
        ``codes``. Returns the nodes every filter passed, and their positions."""
        state = cycle.state
        memo: NodeMemo | None = None
        timer = cycle.timer
        statuses: Sequence[Status]
        for plugin in self.filter_plugins:
            if candidates.size == 0:
                break
            if plugin.NAME in cycle.skip_filter:
                continue
            started = timer.plugin_start()
            signature = plugin.filter_signature(cycle)
            if signature is None:
                result = plugin.filter(cycle, candidates)
                if result.codes is None:
                    timer.plugin(plugin.NAME, "Filter", None, started)
                    continue
                local, statuses = result.codes, result.statuses
            else:
                if memo is None:
                    memo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
                local, statuses = self._memo_filter(memo, plugin, signature, cycle, candidates)  # type: ignore[arg-type]  # the memo is a NodeMemo (ensured above)
            failed = local >= 0
            if not failed.any():
                timer.plugin(plugin.NAME, "Filter", None, started)
                continue
            failed_local = local[failed]
            # One call judges many nodes: it is labelled with its first rejection's code.
            timer.plugin(plugin.NAME, "Filter", statuses[int(failed_local[0])], started)
            # Intern only the statuses that occur, in order of first occurrence in node-name
            # order, so the decision's groups never depend on how a plugin (or its memo)
            # happened to number them.
            mapping = np.full(len(statuses), -1, dtype=np.int32)
            for code in _codes_by_first_use(failed_local, len(statuses)):
                mapping[code] = table.intern(statuses[code].with_plugin(plugin.NAME))
            codes[positions[failed]] = mapping[failed_local]
            keep = ~failed
            positions = positions[keep]
            candidates = candidates[keep]
        return candidates, positions

    def _memo_filter(
        self, memo: NodeMemo, plugin: FilterPlugin, signature: Hashable, cycle: CycleContext, candidates: NodeArray
    ) -> tuple[npt.NDArray[np.int32], Sequence[Status]]:
        """A memoised Filter: ask the plugin only about candidates that changed since their
        verdict for this signature was recorded."""
        state = cycle.state
        entry = memo.filter_entry((self.config_hash, self.profile, plugin.NAME, signature))
        todo = stale_nodes(
            entry.versions, state.node_version, candidate_mask(state, candidates), state.nodes.slot_bound
        )
        if todo.size:
            result = plugin.filter(cycle, todo)
            if result.codes is None:
                entry.codes[todo] = -1
            else:
                # Index -1 (passed) picks the trailing -1.
                mapping = np.array([entry.intern(s) for s in result.statuses] + [-1], dtype=np.int32)
                entry.codes[todo] = mapping[result.codes]
            entry.versions[todo] = state.node_version.take(todo)
        if candidates.size == len(state.nodes) and state.nodes.order_is_identity():
            return entry.codes[: candidates.size].copy(), entry.statuses  # slots 0..n-1
        return entry.codes.take(candidates), entry.statuses


def _compact(codes: npt.NDArray[np.int32], statuses: Sequence[Status]) -> tuple[Status, ...]:
    """Drop the statuses no node has any more (their nodes were left unevaluated), renumbering
    ``codes`` in place, the order of the others kept."""
    used = np.zeros(len(statuses) + 1, dtype=bool)
    used[codes] = True  # index -1 marks the trailing slot
    used = used[:-1]
    if used.all():
        return tuple(statuses)
    mapping = np.full(len(statuses) + 1, -1, dtype=np.int32)
    mapping[:-1][used] = np.arange(int(used.sum()), dtype=np.int32)
    codes[:] = mapping[codes]
    return tuple(s for s, keep in zip(statuses, used.tolist(), strict=True) if keep)


def _codes_by_first_use(codes: npt.NDArray[np.integer], count: int) -> list[int]:
    """The distinct values of ``codes`` (each in ``0..count-1``) in order of first occurrence.
    A plugin has a handful of statuses: a count and one search per status used is cheaper
    than sorting every code."""
    if count > 8:
        used, first = np.unique(codes, return_index=True)
        in_order: list[int] = used[np.argsort(first, kind="stable")].tolist()
        return in_order
    present = np.flatnonzero(np.bincount(codes, minlength=count)).tolist()
    if len(present) == 1:
        return present
    return sorted(present, key=lambda code: int(np.argmax(codes == code)))
