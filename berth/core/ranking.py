"""Selection: ranking the feasible nodes of one cycle, best first.

The best node has the highest total score; among equal totals the one with the lowest
tie-break key wins — a hash of (pod UID, node name), see :func:`berth.core.hashing.tie_break_keys`
— and among equal keys (a hash collision) the first in name order. Both are packed into one int64
*selection key* per node, ``total << HASH_BITS | inverted high bits of the hash``, so that one
descending order of keys is the ranking.

Only the best ``keepTopScores`` nodes are ever needed (the chosen one and those a decision
reports), so :func:`rank` keys and orders only the nodes whose total can reach them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.decision import NodeScore
from berth.core.hashing import tie_break_keys
from berth.core.scoring import Scores
from berth.core.state import ClusterState
from berth.schemas.cluster import PodInfo

__all__ = ["HASH_BITS", "TOTAL_LIMIT", "rank", "top_scores"]

HASH_BITS = 40
"""Low bits of the selection key taken by the tie-break hash; totals use the bits above."""
TOTAL_LIMIT = 1 << (63 - HASH_BITS - 1)
"""Totals must stay below this (2**22) for the selection key to hold them exactly; a profile
whose weights could exceed it is refused (a total is at most MAX_NODE_SCORE × the weights' sum)."""
_RANK_STEPS = 4
"""Distinct totals :func:`rank` steps down through before ranking every feasible node instead."""


def rank(pod: PodInfo, state: ClusterState, scores: Scores, wanted: int) -> npt.NDArray[np.intp]:
    """Positions into ``scores.nodes``, best first, at least ``wanted`` long (when there are
    that many; ``wanted`` ≥ 1): highest total, then lowest tie-break hash, then name order."""
    total = scores.total
    if wanted >= total.size:
        return np.argsort(-_selection_keys(pod, state, scores, None), kind="stable")
    # Only nodes whose total reaches the wanted-th largest total can be among the wanted
    # best keys (a key's high bits are its total): hash and rank those alone.
    # Found by stepping down through the few highest distinct totals: np.partition is
    # far slower on score arrays (many equal values) than these passes.
    floor = total.max()
    covered = int(np.count_nonzero(total == floor))
    above = 0  # nodes whose total is above the floor
    for _ in range(_RANK_STEPS):
        if covered >= wanted:
            break
        floor = total[total < floor].max()
        above = covered
        covered = int(np.count_nonzero(total >= floor))
    if covered >= wanted and 2 * covered <= total.size:
        candidates: npt.NDArray[np.intp] | None = np.flatnonzero(total >= floor)
    else:  # most nodes are in: gathering them would cost more than keying them all
        candidates = None
    key = _selection_keys(pod, state, scores, candidates)
    if wanted < key.size:
        top = None
        if covered >= wanted:
            top = _keys_above_cut(key, int(floor), wanted, above, covered - above)
        if top is None:
            top = _best_keys(key, wanted)
        ranked = top[np.lexsort((top, -key[top]))][:wanted]
    else:
        ranked = np.argsort(-key, kind="stable")
    return ranked if candidates is None else candidates[ranked]


def top_scores(state: ClusterState, scores: Scores, positions: npt.NDArray[np.intp]) -> tuple[NodeScore, ...]:
    """The decision's report of the nodes at ``positions`` of ``scores.nodes``: name, total and
    weighted score per plugin."""
    # One gather per plugin, then plain Python over at most keep_top_scores entries.
    names = state.nodes.names_of(scores.nodes.take(positions).tolist())
    totals = scores.total.take(positions).tolist()
    plugins = tuple(scores.per_plugin)
    if not plugins:
        return tuple(NodeScore(node=name, total=total, scores=()) for name, total in zip(names, totals, strict=True))
    if scores.matrix is not None:
        rows = scores.matrix.take(positions, axis=1).T.tolist()
    else:
        rows = zip(*[values.take(positions).tolist() for values in scores.per_plugin.values()], strict=True)
    return tuple(
        NodeScore(name, total, tuple(zip(plugins, row, strict=True)))
        for name, total, row in zip(names, totals, rows, strict=True)
    )


def _selection_keys(
    pod: PodInfo, state: ClusterState, scores: Scores, positions: npt.NDArray[np.intp] | None
) -> npt.NDArray[np.int64]:
    """``total << 40 | inverted high bits of the tie-break hash`` for ``positions`` of
    ``scores.nodes`` (None: all): larger is better, unique unless the hash collides."""
    nodes = scores.nodes if positions is None else scores.nodes.take(positions)
    total = scores.total if positions is None else scores.total.take(positions)
    tie = tie_break_keys(pod.uid, state.name_hash.take(nodes), overwrite=True)
    tie >>= np.uint64(64 - HASH_BITS)
    # tie < 2**40: the same value as int64, and ``(2**40 - 1) - tie`` is its 40-bit
    # complement. In place: these arrays are this call's own temporaries.
    key = tie.view(np.int64)
    key ^= (1 << HASH_BITS) - 1
    key |= total << HASH_BITS
    return key


def _best_keys(key: npt.NDArray[np.int64], wanted: int) -> npt.NDArray[np.intp]:
    """Positions of the ``wanted`` largest keys (unordered): every key above the wanted-th
    largest, and equal ones (a 40-bit hash collision between equal totals) by position, so the
    choice never depends on how a partition algorithm orders equal values."""
    kth = np.partition(key, key.size - wanted)[key.size - wanted]
    better = np.flatnonzero(key > kth)
    equal = np.flatnonzero(key == kth)[: wanted - better.size]
    return np.concatenate([better, equal])


def _keys_above_cut(
    key: npt.NDArray[np.int64], floor: int, wanted: int, above: int, at_floor: int
) -> npt.NDArray[np.intp] | None:
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
    cut = (floor << HASH_BITS) | ((1 << HASH_BITS) - ((spare << HASH_BITS) // at_floor))
    top = (key >= cut).nonzero()[0]
    return top if top.size >= wanted else None
