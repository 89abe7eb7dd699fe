"""The node memo's stale-slot search: looking only at slots touched since an entry last looked
(and those stale then) finds exactly the slots a full comparison finds."""

from __future__ import annotations

import random

import numpy as np
import pytest

import berth.core.state as state_module
from berth.core.memo import NodeMemo, membership, stale_entry_nodes, stale_nodes
from berth.core.state import ClusterState
from tests.unit.core.builders import node, pod


@pytest.mark.parametrize("log_kept", [8, 1 << 14])
def test_stale_slots_from_the_touch_log_equal_a_full_comparison(monkeypatch: pytest.MonkeyPatch,
                                                                 log_kept: int) -> None:
    # A short log forces the fall back to a full comparison now and then.
    monkeypatch.setattr(state_module, "_TOUCH_LOG_KEPT", log_kept)
    rng = random.Random(3)
    state = ClusterState()
    memo: NodeMemo = state.ensure_extension(NodeMemo)  # type: ignore[assignment]
    names = [f"n{i:02d}" for i in range(40)]
    for name in names[:30]:
        state.upsert_node(node(name))
    placed: list[tuple[str, str]] = []
    checked = 0
    for step in range(400):
        action = rng.random()
        if action < 0.5:
            uid = f"p{step}"
            target = rng.choice(state.node_names())
            state.assume(pod(uid), target)
            placed.append((uid, target))
        elif action < 0.7 and placed:
            uid, _ = placed.pop(rng.randrange(len(placed)))
            state.remove_pod(uid)
        elif action < 0.8:
            state.upsert_node(node(rng.choice(names), cpu=rng.choice((2000, 4000))))
        elif action < 0.85 and len(state.node_names()) > 5:
            state.remove_node(rng.choice(state.node_names()))
        # Several entries, each asked about a random subset now and then.
        for key in range(3):
            if rng.random() < 0.5:
                continue
            entry = memo.score_entry(("test", key))
            order = state.order()
            asked = order[[rng.random() < 0.6 for _ in range(order.size)]]
            mask = membership(asked, state.capacity)
            expected = stale_nodes(entry.versions, state.node_version, mask)
            got = stale_entry_nodes(entry, state, mask)
            assert got.tolist() == expected.tolist(), step
            checked += int(got.size > 0)
            if rng.random() < 0.9:  # else: as if the plugin failed before writing them
                entry.versions[got] = state.node_version[got]
    assert checked > 100
