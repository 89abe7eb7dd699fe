"""The node memo's bounds: its size follows the entries in recent use, never past its budget,
and dropping an entry only costs time (results stay those of recomputing)."""

from __future__ import annotations

from berth.core.memo import NodeMemo, ScoreMemoEntry


def _memo(capacity: int = 1_000) -> NodeMemo:
    memo = NodeMemo()
    memo.grow(capacity)
    return memo


def test_an_entry_in_use_is_kept_and_returned_again() -> None:
    memo = _memo()
    entry = memo.score_entry("shape-a")
    entry.values[3] = 42
    for index in range(NodeMemo.IDLE_USES * 2):
        assert memo.score_entry("shape-a") is entry
        if index % 1_000 == 0:
            memo.score_entry(("other", index))
    assert memo.score_entry("shape-a").values[3] == 42


def test_entries_idle_for_the_window_are_dropped_when_new_ones_come() -> None:
    memo = _memo()
    for shape in range(50):
        memo.score_entry(("old", shape))
    for _ in range(NodeMemo.IDLE_USES):
        memo.score_entry("busy")
    memo.score_entry("new")
    assert len(memo) == 2  # "busy" and "new": every "old" entry went idle
    fresh = memo.score_entry(("old", 0))
    assert isinstance(fresh, ScoreMemoEntry)
    assert not fresh.versions.any()  # a dropped entry comes back empty: every node recomputed


def test_a_varied_workload_levels_off_instead_of_filling_the_budget() -> None:
    """Shapes drawn from an ever larger pool, a few lookups per shape: the memo's size stays
    near the number of shapes used within the idle window, far below the budget."""
    memo = _memo(capacity=100)
    sizes = []
    for cycle in range(40_000):
        shape = cycle % 4_000 if cycle < 20_000 else cycle  # a new shape every cycle after 20,000
        for plugin in range(4):
            memo.score_entry((plugin, shape))
        if cycle % 5_000 == 4_999:
            sizes.append(len(memo))
    assert memo.max_entries > 30_000  # the budget alone would keep every entry below
    window = NodeMemo.IDLE_USES + 4
    assert max(sizes) <= window
    assert sizes[-1] == sizes[-2]  # level: as many entries go idle as come in


def test_the_budget_bounds_the_entries_of_a_large_cluster() -> None:
    memo = _memo(capacity=200_000)
    for shape in range(memo.max_entries + 50):
        memo.filter_entry(shape)
    assert len(memo) == memo.max_entries == NodeMemo.MIN_ENTRIES
