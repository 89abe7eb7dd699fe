"""Scoring: a profile's PreScore, Score and NormalizeScore plugins and weights over the feasible
nodes of one cycle.

Plugins that declare a score signature (:meth:`~berth.core.framework.ScorePlugin.score_signature`)
are memoised per node (:mod:`berth.core.memo`): only nodes changed since a score was recorded for
an equal signature are scored again. A plugin that also normalises node by node has its
*weighted* score memoised, so unchanged nodes are neither scored nor normalised.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    NodeArray,
    PreScorePlugin,
    ScorePlugin,
    Status,
)
from berth.core.memo import NodeMemo, candidate_mask, stale_nodes

__all__ = ["ProfileScorer", "Scores"]


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


class ProfileScorer:
    """The scoring plugins of one profile (in configured order) and their weights.

    ``config_hash`` and ``profile`` key the memo entries, so profiles and configurations sharing
    a state never share an entry. Holds no per-cycle state.
    """

    def __init__(
        self,
        pre_score_plugins: Sequence[PreScorePlugin],
        score_plugins: Sequence[ScorePlugin],
        weights: Mapping[str, int],
        config_hash: str,
        profile: str,
    ) -> None:
        self.pre_score_plugins = pre_score_plugins
        self.score_plugins = score_plugins
        self.weights = weights
        self.config_hash = config_hash
        self.profile = profile

    def score(self, cycle: CycleContext, feasible: NodeArray) -> Scores:
        """PreScore + Score + NormalizeScore + weights over ``feasible`` (name order)."""
        timer = cycle.timer
        started = timer.start()
        error = self._pre_score(cycle, feasible)
        timer.point("PreScore", error, started)
        if error is not None:
            return Scores(feasible, np.zeros(feasible.size, dtype=np.int64), {}, error)
        started = timer.start()
        scores = self._score(cycle, feasible)
        timer.point("Score", scores.error, started)
        return scores

    def _score(self, cycle: CycleContext, feasible: NodeArray) -> Scores:
        timer = cycle.timer
        per_plugin: dict[str, npt.NDArray[np.int64]] = {}
        state = cycle.state
        in_feasible: npt.NDArray[np.bool_] | None = None
        active = [plugin for plugin in self.score_plugins if plugin.NAME not in cycle.skip_score]
        # Each plugin's weighted scores go straight into its row (no array per plugin).
        matrix = np.empty((len(active), feasible.size), dtype=np.int64)
        # Every node, and slots numbered in name order (nodes added sorted): the feasible
        # slots are 0..n-1, and a gather from a slot-indexed array is a plain copy.
        dense = feasible.size == len(state.nodes) and state.nodes.order_is_identity()
        for done, (row, plugin) in enumerate(zip(matrix, active, strict=True)):
            plugin_started = timer.plugin_start()
            signature = plugin.score_signature(cycle)
            if signature is not None and in_feasible is None:
                in_feasible = candidate_mask(state, feasible)
            if signature is not None and type(plugin).normalizes_per_node():
                weighted = self._memo_weighted(
                    cycle,
                    plugin,
                    signature,
                    feasible,
                    in_feasible,  # type: ignore[arg-type]  # set when not dense (above)
                    row,
                    dense,
                )
                if weighted is not None:
                    per_plugin[plugin.NAME] = weighted
                    timer.plugin(plugin.NAME, "Score", None, plugin_started)
                    continue
                # An out-of-range score (the weighted memo recorded nothing): the raw-score
                # path below meets it again and reports it.
            raw = self._raw_scores(cycle, plugin, signature, feasible, in_feasible)
            normalized = plugin.normalize_score(cycle, feasible, raw).astype(np.int64, copy=False)
            # One unsigned reduction catches both ends: negatives wrap to huge values.
            if normalized.size and int(normalized.view(np.uint64).max()) > MAX_NODE_SCORE:
                return Scores(feasible, matrix[:done].sum(axis=0), per_plugin, _invalid_score(plugin, normalized))
            weighted = np.multiply(normalized, self.weights[plugin.NAME], out=row)
            per_plugin[plugin.NAME] = weighted
            timer.plugin(plugin.NAME, "Score", None, plugin_started)
        # One reduction over the rows instead of an addition per plugin (integers: the same
        # totals in any order).
        return Scores(nodes=feasible, total=matrix.sum(axis=0), per_plugin=per_plugin, matrix=matrix)

    def _pre_score(self, cycle: CycleContext, feasible: NodeArray) -> Status | None:
        """Run every PreScore, recording the plugins that skip; the first failure, if any."""
        timer = cycle.timer
        for plugin in self.pre_score_plugins:
            started = timer.plugin_start()
            status = plugin.pre_score(cycle, feasible)
            timer.plugin(plugin.NAME, "PreScore", status, started)
            if status.is_skip:
                cycle.skip_score.add(plugin.NAME)
            elif not status.is_success:
                return status.with_plugin(plugin.NAME)
        return None

    def _raw_scores(
        self,
        cycle: CycleContext,
        plugin: ScorePlugin,
        signature: Hashable | None,
        feasible: NodeArray,
        in_feasible: npt.NDArray[np.bool_] | None,
    ) -> npt.NDArray[np.int64]:
        """The plugin's raw scores of ``feasible``: asked directly without a signature, else
        from the raw-score memo, asking only about nodes changed since."""
        if signature is None:
            return plugin.score(cycle, feasible)
        state = cycle.state
        memo: NodeMemo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
        entry = memo.score_entry((self.config_hash, self.profile, plugin.NAME, signature))
        todo = stale_nodes(entry.versions, state.node_version, in_feasible, state.nodes.slot_bound)  # type: ignore[arg-type]  # set when not dense (above)
        if todo.size:
            entry.values[todo] = plugin.score(cycle, todo)
            entry.versions[todo] = state.node_version.take(todo)
        return entry.values.take(feasible)

    def _memo_weighted(
        self,
        cycle: CycleContext,
        plugin: ScorePlugin,
        signature: Hashable,
        feasible: NodeArray,
        in_feasible: npt.NDArray[np.bool_],
        out: npt.NDArray[np.int64],
        dense: bool,
    ) -> npt.NDArray[np.int64] | None:
        """The weighted scores of ``feasible`` for a plugin that normalises node by node,
        memoised as weighted scores: only nodes changed since are scored, normalised and
        checked. None if one of them is out of range (nothing is recorded then). Written into
        ``out`` (and returned); ``dense``: ``feasible`` is ``0..len(feasible)-1``."""
        state = cycle.state
        memo: NodeMemo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
        entry = memo.score_entry((self.config_hash, self.profile, plugin.NAME, signature, "weighted"))
        todo = stale_nodes(entry.versions, state.node_version, in_feasible, state.nodes.slot_bound)
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


def _invalid_score(plugin: ScorePlugin, normalized: npt.NDArray[np.int64]) -> Status:
    """kube's error for a normalised score outside ``0..MAX_NODE_SCORE``, naming the first."""
    bad = int(normalized[(normalized < 0) | (normalized > MAX_NODE_SCORE)][0])
    return Status.error(
        f"plugin {plugin.NAME!r} returns an invalid score {bad}, it should in the "
        f"range of [0, {MAX_NODE_SCORE}] after normalizing",
        plugin=plugin.NAME,
    )
