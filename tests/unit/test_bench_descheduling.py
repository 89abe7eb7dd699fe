"""bench.descheduling: the trace replay with departures, with and without GPU defragmentation,
on a four-pod story where fragmentation alone keeps a whole-GPU pod waiting."""

from __future__ import annotations

import importlib

import numpy as np

from bench.gpu_trace.trace import NodeTable, PodTable

bench = importlib.import_module("bench.descheduling.__main__")

HOUR = 3600


def _story() -> tuple[NodeTable, PodTable, dict[str, tuple[int, int]]]:
    # Two nodes of one GPU each. Four half-GPU pods fill both GPUs in pairs; one pod of each
    # pair (half-2, half-4) leaves, so each GPU holds one half: a whole-GPU pod arriving then fits nowhere until
    # a half leaves (day 2), or until one half is moved next to the other.
    nodes = NodeTable(
        names=("n0", "n1"),
        cpu_milli=np.array([8000, 8000]),
        memory_mib=np.array([8192, 8192]),
        gpu_count=np.array([1, 1]),
        model=("A100", "A100"),
    )
    names = ("half-1", "half-2", "half-3", "half-4", "whole")
    pods = PodTable(
        names=names,
        cpu_milli=np.array([1000] * 5),
        memory_mib=np.array([1024] * 5),
        num_gpu=np.array([1] * 5),
        gpu_milli=np.array([500, 500, 500, 500, 1000]),
        gpu_spec=(frozenset(),) * 5,
    )
    life = {
        "half-1": (0, 48 * HOUR),
        "half-2": (1, 10),
        "half-3": (2, 48 * HOUR),
        "half-4": (3, 11),
        "whole": (20, 96 * HOUR),
    }
    return nodes, pods, life


def _run(defragment: bool):
    nodes, pods, life = _story()
    return bench.simulate(
        nodes,
        pods,
        life,
        every=1,
        stretch=1,
        defragment=defragment,
        interval=HOUR,
        retries=4,
        pending_per_round=8,
        progress=False,
    )


def test_defragmentation_starts_the_whole_gpu_pod_at_the_first_round() -> None:
    plain, defrag = _run(False), _run(True)
    assert plain.evictions == 0 and defrag.evictions == 1
    assert defrag.started_by_defrag == 1
    # Without: it waits from t=20 s until a half leaves at 48 h; with: until the first round (1 h).
    assert round(plain.waited_pod_hours, 2) == round((48 * HOUR - 20) / HOUR, 2)
    assert round(defrag.waited_pod_hours, 2) == round((HOUR - 20) / HOUR, 2)
    # While it waits, two GPUs each strand half a GPU; after the move nothing is stranded.
    assert max(plain.series.stranded) == 1000
    after_round = defrag.series.times.index(HOUR)
    assert defrag.series.stranded[after_round] == 0 and defrag.series.used[after_round] == 2000
    assert plain.series.stranded[plain.series.times.index(HOUR)] == 1000


def test_time_weighted_means() -> None:
    series = bench.Series()
    series.add(0, 10, 0, 0)
    series.add(10, 30, 0, 0)
    assert series.mean(series.used, 0, 20) == 20.0
    assert series.mean(series.used, 10, 20) == 30.0
