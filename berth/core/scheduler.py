"""Running a profile's plugins over a ClusterState: one scheduling cycle per pod.

:class:`Framework` is one profile's plugins, instantiated from a :class:`SchedulerConfig`;
:class:`Scheduler` holds one Framework per profile and picks it by the pod's ``schedulerName``.

Selection differs from kube-scheduler on purpose, so that a decision is a pure function of the
pod, the snapshot and the configuration (replayable, auditable): every node is evaluated (no
``percentageOfNodesToScore``, no rotating start index), and among the nodes with the highest
total score the one with the lowest tie-break key wins — a hash of (pod UID, node name), see
:func:`berth.core.hashing.tie_break_keys` — instead of a random pick.

The cycle never mutates the state. The caller commits a placed (or held) decision with
``state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)``.
"""

from __future__ import annotations

from types import MappingProxyType

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core import messages
from berth.core.config import DEFAULT_PROFILE, SchedulerConfig
from berth.core.decision import Decision, NodeScore, RejectionGroup, pack_node_groups
from berth.core.framework import (
    MAX_NODE_SCORE,
    Code,
    CycleContext,
    Diagnosis,
    FilterPlugin,
    NodeArray,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from berth.core.hashing import canonical_json, sha256_hex, tie_break_keys
from berth.core.memo import NodeMemo, membership, stale_nodes
from berth.core.registry import REGISTRY
from berth.core.state import ClusterState
from berth.schemas.cluster import PodInfo

__all__ = ["Feasibility", "Framework", "Scheduler", "Scores"]

_CODE_NAMES = MappingProxyType({
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.ERROR: "Error",
})
_HASH_BITS = 40
"""Low bits of the selection key taken by the tie-break hash; totals use the bits above (a
total is at most MAX_NODE_SCORE × MAX_WEIGHT × plugins, far below 2**23)."""
_RANK_STEPS = 4
"""Distinct totals _rank steps down through before ranking every feasible node instead."""


@dataclass(frozen=True, slots=True)
class Feasibility:
    """The outcome of PreFilter + Filter: feasible slots (name order) and why others failed."""

    feasible: NodeArray
    diagnosis: Diagnosis


@dataclass(frozen=True, slots=True)
class Scores:
    """Weighted scores of the feasible nodes: ``per_plugin[name]`` aligned with ``nodes``."""

    nodes: NodeArray
    total: npt.NDArray[np.int64]
    per_plugin: Mapping[str, npt.NDArray[np.int64]]
    error: Status | None = None
    """Set when a PreScore failed or a plugin broke the score contract; the cycle then ends
    with an ``error`` decision, as kube fails the attempt."""
    matrix: npt.NDArray[np.int64] | None = None
    """``per_plugin``'s arrays as the rows of one matrix, in the same order (None: separate
    arrays), so that the top nodes' columns are gathered at once."""


class _StatusTable:
    """Interns statuses so each distinct rejection gets one small integer."""

    def __init__(self) -> None:
        self.statuses: list[Status] = []
        self._index: dict[Status, int] = {}

    def intern(self, status: Status) -> int:
        index = self._index.get(status)
        if index is None:
            index = self._index[status] = len(self.statuses)
            self.statuses.append(status)
        return index


class Framework:
    """One profile: its plugins per extension point, in configured order, with weights.

    Build once per configuration; :meth:`schedule` may be called any number of times, on any
    number of states. Instances hold no per-cycle state.
    """

    def __init__(self, config: SchedulerConfig, profile: str = DEFAULT_PROFILE,
                 registry: Mapping[str, type[Plugin]] | None = None) -> None:
        if registry is None:
            registry = REGISTRY
        resolved = config.profile(profile)
        self.profile = resolved
        self.name = resolved.scheduler_name
        self.config_hash = config.hash
        self.keep_top_scores = resolved.keep_top_scores
        instances = {name: registry[name](resolved.args.get(name))
                     for name in resolved.plugin_names()}
        self.plugins: Mapping[str, Plugin] = instances
        for plugin in instances.values():
            plugin.bind_framework(self)

        def at(point: str) -> list:
            return [instances[name] for name in resolved.points.get(point, ())]

        self.pre_filter_plugins: list[PreFilterPlugin] = at("preFilter")
        self.filter_plugins: list[FilterPlugin] = at("filter")
        self.post_filter_plugins: list[PostFilterPlugin] = at("postFilter")
        self.pre_score_plugins: list[PreScorePlugin] = at("preScore")
        self.score_plugins: list[ScorePlugin] = at("score")
        self.weights: Mapping[str, int] = dict(resolved.weights)
        self.reserve_plugins: list[ReservePlugin] = at("reserve")
        self.permit_plugins: list[PermitPlugin] = at("permit")
        # Selection packs (total, tie-break hash) into one int64: totals must stay below 2**22.
        top_total = MAX_NODE_SCORE * sum(self.weights.values())
        if top_total >= 1 << (63 - _HASH_BITS - 1):
            raise ValueError(f"profile {self.name!r}: score weights sum to "
                             f"{sum(self.weights.values())}, too large to rank exactly")
        self._extension_factories = tuple(
            {ext.KEY: ext for plugin in instances.values()
             for ext in plugin.STATE_EXTENSIONS}.values())

    # ------------------------------------------------------------------ public entry points

    def prepare(self, state: ClusterState) -> None:
        """Attach the state extensions this profile's plugins need (once per state)."""
        for factory in self._extension_factories:
            state.ensure_extension(factory)

    def schedule(self, pod: PodInfo, state: ClusterState) -> Decision:
        """One scheduling cycle for ``pod`` on ``state`` → a sealed :class:`Decision`.
        The state is not modified (extensions may be attached on first use)."""
        self.prepare(state)
        cycle = CycleContext(pod, state, self.name, self)
        base = {
            "pod_uid": pod.uid,
            "pod": pod.key,
            "profile": self.name,
            "pod_hash": sha256_hex(state.pod_json(pod)),
            "snapshot_hash": state.snapshot_hash(),
            "config_hash": self.config_hash,
        }
        if state.node_count == 0:
            # kube-scheduler's ErrNoNodesAvailable: no FitError, no preemption attempt.
            return Decision(status="unschedulable", message=messages.NO_NODES_TO_SCHEDULE, nodes_total=0,
                            feasible_nodes=0, **base).sealed()
        feasibility = self._find_feasible(cycle, None)
        diagnosis = feasibility.diagnosis
        rejections, node_groups, width = _summarise(diagnosis)
        summary = {"nodes_total": int(diagnosis.nodes.size),
                   "feasible_nodes": int(feasibility.feasible.size),
                   "rejections": rejections, "node_groups": node_groups,
                   "node_group_width": width}
        error = next((s for s in diagnosis.statuses if s.code is Code.ERROR), None)
        if error is not None:
            return Decision(status="error", message=f"{error.plugin}: {error.message}",
                            **base, **summary).sealed()
        if feasibility.feasible.size == 0:
            return self._unschedulable(cycle, diagnosis, base, summary)

        scores = self.score(cycle, feasibility.feasible)
        if scores.error is not None:
            return Decision(status="error", message=f"{scores.error.plugin}: "
                                                    f"{scores.error.message}",
                            **base, **summary).sealed()
        ranked = self._rank(pod, state, scores)
        top = _top_scores(state, scores, ranked[: self.keep_top_scores])
        chosen = int(scores.nodes[ranked[0]])
        chosen_name = state.name_of(chosen)

        reserved: list[ReservePlugin] = []
        gpu_devices: tuple[int, ...] = ()
        gpu_milli: int | None = None
        for plugin in self.reserve_plugins:
            result = plugin.reserve(cycle, chosen)
            reserved.append(plugin)
            if not result.status.is_success:
                self._unreserve(cycle, reserved, chosen)
                return self._rejected_on_node(result.status.with_plugin(plugin.NAME), base,
                                              summary, top)
            if result.gpu_devices:
                gpu_devices = tuple(result.gpu_devices)
            if result.gpu_milli is not None:
                gpu_milli = result.gpu_milli
        held = False
        for plugin in self.permit_plugins:
            status = plugin.permit(cycle, chosen).status.with_plugin(plugin.NAME)
            if status.code is Code.WAIT:
                held = True
            elif not status.is_success:
                self._unreserve(cycle, reserved, chosen)
                return self._rejected_on_node(status, base, summary, top)
        return Decision(status="held" if held else "placed", node=chosen_name,
                        gpu_devices=gpu_devices, gpu_milli=gpu_milli, top_scores=top,
                        **base, **summary).sealed()

    def find_feasible(self, pod: PodInfo, state: ClusterState,
                      nodes: Sequence[str] | None = None) -> Feasibility:
        """PreFilter + Filter from scratch for ``pod`` on ``state``, optionally only on the
        named nodes (others are ignored, not reported). For preemption's what-ifs: remove the
        victims from the state, call this, add them back."""
        self.prepare(state)
        return self._find_feasible(CycleContext(pod, state, self.name, self), nodes)

    def score(self, cycle: CycleContext, feasible: NodeArray) -> Scores:
        """PreScore + Score + NormalizeScore + weights over ``feasible`` (name order)."""
        for plugin in self.pre_score_plugins:
            status = plugin.pre_score(cycle, feasible)
            if status.is_skip:
                cycle.skip_score.add(plugin.NAME)
            elif not status.is_success:
                return Scores(feasible, np.zeros(feasible.size, dtype=np.int64), {},
                              status.with_plugin(plugin.NAME))
        per_plugin: dict[str, npt.NDArray[np.int64]] = {}
        state = cycle.state
        in_feasible: npt.NDArray[np.bool_] | None = None
        active = [plugin for plugin in self.score_plugins if plugin.NAME not in cycle.skip_score]
        # Each plugin's weighted scores go straight into its row (no array per plugin).
        matrix = np.empty((len(active), feasible.size), dtype=np.int64)
        # Every node, and slots numbered in name order (nodes added sorted): the feasible
        # slots are 0..n-1, and a gather from a slot-indexed array is a plain copy.
        dense = feasible.size == state.node_count and state.order_is_identity()
        for done, (row, plugin) in enumerate(zip(matrix, active)):
            signature = plugin.score_signature(cycle)
            if signature is not None and in_feasible is None:
                in_feasible = _mask_of(state, feasible)
            if signature is not None and type(plugin).normalizes_per_node():
                weighted = self._memo_weighted(cycle, plugin, signature, feasible, in_feasible,  # type: ignore[arg-type]
                                               row, dense)
                if weighted is not None:
                    per_plugin[plugin.NAME] = weighted
                    continue
                # An out-of-range score (the weighted memo recorded nothing): the raw-score
                # path below meets it again and reports it.
            if signature is None:
                raw = plugin.score(cycle, feasible)
            else:
                memo: NodeMemo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]
                entry = memo.score_entry((self.config_hash, self.name, plugin.NAME, signature))
                todo = stale_nodes(entry.versions, state.node_version, in_feasible, state.slot_bound)
                if todo.size:
                    entry.values[todo] = plugin.score(cycle, todo)
                    entry.versions[todo] = state.node_version.take(todo)
                raw = entry.values.take(feasible)
            normalized = plugin.normalize_score(cycle, feasible, raw).astype(np.int64, copy=False)
            # One unsigned reduction catches both ends: negatives wrap to huge values.
            if normalized.size and int(normalized.view(np.uint64).max()) > MAX_NODE_SCORE:
                bad = int(normalized[(normalized < 0) | (normalized > MAX_NODE_SCORE)][0])
                return Scores(feasible, matrix[:done].sum(axis=0), per_plugin, Status.error(
                    f"plugin {plugin.NAME!r} returns an invalid score {bad}, it should in the "
                    f"range of [0, {MAX_NODE_SCORE}] after normalizing", plugin=plugin.NAME))
            weighted = np.multiply(normalized, self.weights[plugin.NAME], out=row)
            per_plugin[plugin.NAME] = weighted
        # One reduction over the rows instead of an addition per plugin (integers: the same
        # totals in any order).
        return Scores(nodes=feasible, total=matrix.sum(axis=0), per_plugin=per_plugin, matrix=matrix)

    def _memo_weighted(self, cycle: CycleContext, plugin: ScorePlugin, signature: Hashable,
                       feasible: NodeArray, in_feasible: npt.NDArray[np.bool_],
                       out: npt.NDArray[np.int64], dense: bool) -> npt.NDArray[np.int64] | None:
        """The weighted scores of ``feasible`` for a plugin that normalises node by node,
        memoised as weighted scores: only nodes changed since are scored, normalised and
        checked. None if one of them is out of range (nothing is recorded then). Written into
        ``out`` (and returned); ``dense``: ``feasible`` is ``0..len(feasible)-1``."""
        state = cycle.state
        memo: NodeMemo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]
        entry = memo.score_entry((self.config_hash, self.name, plugin.NAME, signature, "weighted"))
        todo = stale_nodes(entry.versions, state.node_version, in_feasible, state.slot_bound)
        if todo.size:
            normalized = plugin.normalize_score(cycle, todo, plugin.score(cycle, todo)).astype(np.int64, copy=False)
            if int(normalized.view(np.uint64).max()) > MAX_NODE_SCORE:
                return None
            entry.values[todo] = normalized * self.weights[plugin.NAME]
            entry.versions[todo] = state.node_version.take(todo)
        if dense:
            np.copyto(out, entry.values[: out.size])
            return out
        # mode='clip' (slots are always in range): with the default 'raise' numpy buffers
        # ``out`` through a temporary array.
        return entry.values.take(feasible, out=out, mode="clip")

    # ------------------------------------------------------------------ cycle parts

    def _find_feasible(self, cycle: CycleContext, only: Sequence[str] | None) -> Feasibility:
        state = cycle.state
        all_nodes = state.order()
        if only is not None:
            wanted = {state.slot_of(name) for name in only} - {None}
            all_nodes = all_nodes[np.isin(all_nodes, np.fromiter(wanted, dtype=np.intp,
                                                                 count=len(wanted)))]
        table = _StatusTable()
        codes = np.full(all_nodes.size, -1, dtype=np.int32)

        def reject_all(status: Status) -> Feasibility:
            # kube: every node gets the PreFilter status; its message replaces the histogram.
            codes[:] = table.intern(status)
            return Feasibility(all_nodes[:0], Diagnosis(all_nodes, codes, tuple(table.statuses),
                                                        status))

        restrict: frozenset[str] | None = None
        restricting: set[str] = set()
        deferred: Status | None = None
        for plugin in self.pre_filter_plugins:
            status, result = plugin.pre_filter(cycle)
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
                return reject_all(status)
            if result is not None and result.node_names is not None:
                restricting.add(plugin.NAME)
                restrict = result.node_names if restrict is None else restrict & result.node_names
                if not restrict:
                    reason = (messages.plugins_not_satisfied_simultaneously(restricting)
                              if len(restricting) > 1 else
                              messages.plugin_not_satisfied(next(iter(restricting))))
                    return reject_all(Status.unresolvable(reason))
        if deferred is not None:
            return reject_all(deferred)

        positions = np.arange(all_nodes.size)
        if restrict is not None:
            slots = np.fromiter((s for s in (state.slot_of(n) for n in restrict) if s is not None),
                                dtype=np.intp)
            inside = np.isin(all_nodes, slots)
            absent = Status.unresolvable(messages.plugins_not_satisfied(restricting))
            codes[~inside] = table.intern(absent)
            positions = positions[inside]
        candidates = all_nodes if restrict is None else all_nodes[positions]
        memo: NodeMemo | None = None
        for plugin in self.filter_plugins:
            if candidates.size == 0:
                break
            if plugin.NAME in cycle.skip_filter:
                continue
            signature = plugin.filter_signature(cycle)
            if signature is None:
                result = plugin.filter(cycle, candidates)
                if result.codes is None:
                    continue
                local, statuses = result.codes, result.statuses
            else:
                if memo is None:
                    memo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]
                local, statuses = self._memo_filter(memo, plugin, signature, cycle, candidates)
            failed = local >= 0
            if not failed.any():
                continue
            failed_local = local[failed]
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
        return Feasibility(candidates, Diagnosis(all_nodes, codes, tuple(table.statuses)))

    def _memo_filter(self, memo: NodeMemo, plugin: FilterPlugin, signature: Hashable,
                     cycle: CycleContext, candidates: NodeArray
                     ) -> tuple[npt.NDArray[np.int32], Sequence[Status]]:
        """A memoised Filter: ask the plugin only about candidates that changed since their
        verdict for this signature was recorded."""
        state = cycle.state
        entry = memo.filter_entry((self.config_hash, self.name, plugin.NAME, signature))
        todo = stale_nodes(entry.versions, state.node_version, _mask_of(state, candidates),
                           state.slot_bound)
        if todo.size:
            result = plugin.filter(cycle, todo)
            if result.codes is None:
                entry.codes[todo] = -1
            else:
                # Index -1 (passed) picks the trailing -1.
                mapping = np.array([entry.intern(s) for s in result.statuses] + [-1],
                                   dtype=np.int32)
                entry.codes[todo] = mapping[result.codes]
            entry.versions[todo] = state.node_version.take(todo)
        if candidates.size == state.node_count and state.order_is_identity():
            return entry.codes[: candidates.size].copy(), entry.statuses  # slots 0..n-1
        return entry.codes.take(candidates), entry.statuses

    def _rank(self, pod: PodInfo, state: ClusterState, scores: Scores) -> npt.NDArray[np.intp]:
        """Positions into ``scores.nodes``, best first, at least ``keep_top_scores`` long
        (and at least 1): highest total, then lowest tie-break hash, then name order."""
        total = scores.total
        wanted = max(1, self.keep_top_scores)
        if wanted >= total.size:
            return np.argsort(-self._selection_keys(pod, state, scores, None), kind="stable")
        # Only nodes whose total reaches the wanted-th largest total can be among the wanted
        # best keys (a key's high bits are its total): hash and rank those alone.
        # Found by stepping down through the few highest distinct totals: np.partition is
        # far slower on score arrays (many equal values) than these passes.
        floor = total.max()
        covered = np.count_nonzero(total == floor)
        above = 0  # nodes whose total is above the floor
        for _ in range(_RANK_STEPS):
            if covered >= wanted:
                break
            floor = total[total < floor].max()
            above = covered
            covered = np.count_nonzero(total >= floor)
        if covered >= wanted and 2 * covered <= total.size:
            candidates: npt.NDArray[np.intp] | None = np.flatnonzero(total >= floor)
        else:  # most nodes are in: gathering them would cost more than keying them all
            candidates = None
        key = self._selection_keys(pod, state, scores, candidates)
        if wanted < key.size:
            top = None
            if covered >= wanted:
                top = _keys_above_cut(key, int(floor), wanted, above, covered - above)
            if top is None:
                # The wanted-th largest key; every larger key is in, equal ones (a 40-bit hash
                # collision between equal totals) by position, so the choice never depends on
                # how a partition algorithm orders equal values.
                kth = np.partition(key, key.size - wanted)[key.size - wanted]
                better = np.flatnonzero(key > kth)
                equal = np.flatnonzero(key == kth)[: wanted - better.size]
                top = np.concatenate([better, equal])
            ranked = top[np.lexsort((top, -key[top]))][:wanted]
        else:
            ranked = np.argsort(-key, kind="stable")
        return ranked if candidates is None else candidates[ranked]

    @staticmethod
    def _selection_keys(pod: PodInfo, state: ClusterState, scores: Scores,
                        positions: npt.NDArray[np.intp] | None) -> npt.NDArray[np.int64]:
        """``total << 40 | inverted high bits of the tie-break hash`` for ``positions`` of
        ``scores.nodes`` (None: all): larger is better, unique unless the hash collides."""
        nodes = scores.nodes if positions is None else scores.nodes.take(positions)
        total = scores.total if positions is None else scores.total.take(positions)
        tie = tie_break_keys(pod.uid, state.name_hash.take(nodes), overwrite=True)
        tie >>= np.uint64(64 - _HASH_BITS)
        # tie < 2**40: the same value as int64, and ``(2**40 - 1) - tie`` is its 40-bit
        # complement. In place: these arrays are this call's own temporaries.
        key = tie.view(np.int64)
        key ^= (1 << _HASH_BITS) - 1
        key |= total << _HASH_BITS
        return key

    def _unreserve(self, cycle: CycleContext, reserved: list[ReservePlugin], node: int) -> None:
        for plugin in reversed(reserved):
            plugin.unreserve(cycle, node)

    def _unschedulable(self, cycle: CycleContext, diagnosis: Diagnosis, base: dict,
                       summary: dict) -> Decision:
        post: PostFilterResult | None = None
        for plugin in self.post_filter_plugins:
            result = plugin.post_filter(cycle, diagnosis)
            if result.status.is_success or result.nominated_node:
                post = result
                break
            if result.message and post is None:
                post = result
        prefilter = diagnosis.prefilter_status
        message = messages.fit_error(
            int(diagnosis.nodes.size), _reason_counts(diagnosis),
            prefilter_message=prefilter.message if prefilter else "",
            postfilter_message=post.message if post else "")
        if post is not None and post.nominated_node:
            return Decision(status="preempting", message=message,
                            nominated_node=post.nominated_node, victims=tuple(post.victims),
                            **base, **summary).sealed()
        return Decision(status="unschedulable", message=message, **base, **summary).sealed()

    def _rejected_on_node(self, status: Status, base: dict, summary: dict,
                          top: tuple[NodeScore, ...]) -> Decision:
        if status.code is Code.ERROR:
            return Decision(status="error", message=f"{status.plugin}: {status.message}",
                            top_scores=top, **base, **summary).sealed()
        # kube reports a Reserve/Permit rejection as a FitError over the one chosen node.
        message = messages.fit_error(1, {reason: 1 for reason in status.reasons})
        return Decision(status="unschedulable", message=message, top_scores=top,
                        **base, **summary).sealed()


def _keys_above_cut(key: npt.NDArray[np.int64], floor: int, wanted: int, above: int,
                    at_floor: int) -> npt.NDArray[np.intp] | None:
    """Positions (ascending) of every selection key at or above a cut placed among the keys
    of the ``at_floor`` nodes whose total is ``floor``, so that about twice the
    ``wanted - above`` of them still needed pass it (their low bits are a well-spread hash);
    ``above`` nodes have a larger total. None when the cut would not leave out most of them,
    or when fewer than ``wanted`` keys passed.

    Exact whatever the hash values: every key with a larger total passes, so when ``wanted``
    keys pass, the ``wanted`` best keys (and any key equal to the last of them) are among the
    positions returned. One comparison pass instead of a partition of every key."""
    spare = 2 * (wanted - above) + 16
    if 4 * spare > at_floor:
        return None
    cut = (floor << _HASH_BITS) | ((1 << _HASH_BITS) - ((spare << _HASH_BITS) // at_floor))
    top = (key >= cut).nonzero()[0]
    return top if top.size >= wanted else None


def _top_scores(state: ClusterState, scores: Scores,
                positions: npt.NDArray[np.intp]) -> tuple[NodeScore, ...]:
    # One gather per plugin, then plain Python over at most keep_top_scores entries.
    names = state.names_of(scores.nodes.take(positions).tolist())
    totals = scores.total.take(positions).tolist()
    plugins = tuple(scores.per_plugin)
    if not plugins:
        return tuple(NodeScore(node=name, total=total, scores=()) for name, total in zip(names, totals))
    if scores.matrix is not None:
        rows = scores.matrix.take(positions, axis=1).T.tolist()
    else:
        rows = zip(*[values.take(positions).tolist() for values in scores.per_plugin.values()])
    return tuple(NodeScore(name, total, tuple(zip(plugins, row)))
                 for name, total, row in zip(names, totals, rows))


def _codes_by_first_use(codes: npt.NDArray[np.integer], count: int) -> list[int]:
    """The distinct values of ``codes`` (each in ``0..count-1``) in order of first occurrence.
    A plugin has a handful of statuses: a count and one search per status used is cheaper
    than sorting every code."""
    if count > 8:
        used, first = np.unique(codes, return_index=True)
        return used[np.argsort(first, kind="stable")].tolist()
    present = np.flatnonzero(np.bincount(codes, minlength=count)).tolist()
    if len(present) == 1:
        return present
    return sorted(present, key=lambda code: int(np.argmax(codes == code)))


def _mask_of(state: ClusterState, nodes: NodeArray) -> npt.NDArray[np.bool_]:
    """A mask over slots, True for ``nodes`` (live slots without repeats): the state's own
    live-slot mask when they are every node (read-only use), else a new one."""
    if nodes.size == state.node_count:
        return state.alive
    return membership(nodes, state.capacity)


def _reason_counts(diagnosis: Diagnosis) -> dict[str, int]:
    counts: dict[str, int] = {}
    rejected = diagnosis.node_codes[diagnosis.node_codes >= 0]
    per_status = np.bincount(rejected, minlength=len(diagnosis.statuses))
    for status, count in zip(diagnosis.statuses, per_status.tolist()):
        if count:
            for reason in status.reasons:
                counts[reason] = counts.get(reason, 0) + count
    return counts


def _summarise(diagnosis: Diagnosis) -> tuple[tuple[RejectionGroup, ...], str, int]:
    """Rejection groups (one per status, with its node count) and the packed per-node index."""
    codes = diagnosis.node_codes
    if not diagnosis.statuses:  # nothing rejected (the common case)
        return (), "", 1
    per_status = np.bincount(codes[codes >= 0], minlength=len(diagnosis.statuses)).tolist()
    groups = tuple(RejectionGroup(plugin=s.plugin, code=_CODE_NAMES.get(s.code, s.code.name),
                                  reasons=s.reasons, count=count)
                   for s, count in zip(diagnosis.statuses, per_status))
    packed, width = pack_node_groups(codes, len(groups))
    return groups, packed, width


class Scheduler:
    """Every profile of a configuration; routes a pod to the profile named by its
    ``schedulerName`` (or ``default_profile``)."""

    def __init__(self, config: SchedulerConfig,
                 registry: Mapping[str, type[Plugin]] | None = None) -> None:
        self.config = config
        self.frameworks = {p.scheduler_name: Framework(config, p.scheduler_name, registry)
                           for p in config.profiles}

    @property
    def config_hash(self) -> str:
        return self.config.hash

    def schedule(self, pod: PodInfo, state: ClusterState, profile: str | None = None) -> Decision:
        framework = self.frameworks.get(profile or pod.scheduler_name)
        if framework is None:
            known = ", ".join(sorted(self.frameworks))
            return Decision(
                pod_uid=pod.uid, pod=pod.key, profile=profile or pod.scheduler_name,
                status="error", message=f"no profile {profile or pod.scheduler_name!r} "
                                        f"(profiles: {known})",
                pod_hash=sha256_hex(canonical_json(pod)), snapshot_hash=state.snapshot_hash(),
                config_hash=self.config.hash).sealed()
        return framework.schedule(pod, state)
