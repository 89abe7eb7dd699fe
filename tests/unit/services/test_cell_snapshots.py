"""Cell snapshots: a cell restored from a snapshot decides exactly as the cell that never stopped.

The inputs are those of the pure two-cell pipeline (inventory folds, the real engine, late and
out-of-order bindings, preemption, hand-overs, inference pools), recorded per cell. Each cell's log
is folded once straight through; then again up to a split point, snapshotted (pickled and
compressed, as the decision service stores it), restored into a new cell and folded on. Every
decision after the split must be the same, byte for byte, and so must the final snapshot hash.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from berth.schemas import InputPosition
from berth.services.decision.snapshots import decode_cell, encode_cell
from berth_dev.workloads import pool_policies

from berth.cells import Cell, CellConfig
from berth.cells.pools import parse_pools
from tests.unit.cells.test_pipeline_never_overcommits import Pipeline


class RecordingPipeline(Pipeline):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.logs: dict[int, list[tuple[Any, InputPosition]]] = {0: [], 1: []}

    def _cell(self, cell: int, event: Any) -> None:
        self.logs[cell].append((event, InputPosition(topic="inputs", partition=cell, offset=self.offsets[cell])))
        super()._cell(cell, event)


@pytest.fixture(scope="module")
def recorded() -> tuple[RecordingPipeline, CellConfig]:
    pipeline = RecordingPipeline(seed=3, max_delay=400, run_steps=200)
    pipeline.run()
    return pipeline, CellConfig(pools=parse_pools(pool_policies(pipeline.workload)))


def _decided(cell: Cell, log: list[tuple[Any, InputPosition]]) -> list[str]:
    out = []
    for event, position in log:
        for decision in cell.handle(event, position):
            out.append(
                json.dumps(
                    [decision.record.model_dump(mode="json"), [c.model_dump(mode="json") for c in decision.commands]],
                    sort_keys=True,
                )
            )
    return out


@pytest.mark.parametrize("split", [0.3, 0.7])
def test_a_restored_cell_decides_as_the_cell_that_never_stopped(recorded, split):
    pipeline, config = recorded
    for index, log in pipeline.logs.items():
        at = int(len(log) * split)
        straight = Cell(index, config)
        _decided(straight, log[:at])
        expected = _decided(straight, log[at:])
        assert expected, "the tail must decide something"

        before = Cell(index, config)
        _decided(before, log[:at])
        restored = decode_cell(encode_cell(before), index, config)
        assert restored.engine.snapshot_hash() == before.engine.snapshot_hash()
        assert _decided(restored, log[at:]) == expected
        assert restored.engine.snapshot_hash() == straight.engine.snapshot_hash()
        assert restored.decisions_made == straight.decisions_made


def test_a_snapshot_of_another_cell_or_configuration_is_refused(recorded):
    pipeline, config = recorded
    cell = Cell(0, config)
    _decided(cell, pipeline.logs[0][:200])
    data = encode_cell(cell)
    with pytest.raises(ValueError, match="cell 0"):
        decode_cell(data, 1, config)
    with pytest.raises(ValueError, match="configuration"):
        decode_cell(data, 0, CellConfig())


def test_after_a_snapshot_the_heap_s_free_memory_goes_back_to_the_system(monkeypatch):
    import ctypes

    from berth.services.decision import snapshots

    assert snapshots.return_free_memory() is True  # glibc (Debian): malloc_trim is there

    def no_libc(*_: Any, **__: Any) -> Any:
        raise OSError("no C library of that name")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert snapshots.return_free_memory() is False  # another C library: nothing to do, no error
