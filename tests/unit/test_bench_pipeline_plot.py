"""The pipeline bench's per-second figures behind its plot."""

from __future__ import annotations

from bench.pipeline.plot import per_second


def test_pods_are_binned_by_second_and_unplaced_pods_count_as_infinitely_late():
    published = {"a": 10.0, "b": 10.5, "c": 11.2, "d": 11.9, "e": 11.0}
    placed = {"a": 10.1, "b": 11.5, "c": 11.3, "e": 11.05}
    seconds, offered, done, p50, p99 = per_second(published, placed, list(published), start=10.0)
    assert seconds == [0, 1]
    assert offered == [2, 3] and done == [1, 3]
    assert p50[0] == 1000.0 and p99[0] == 1000.0  # of a (100 ms) and b (1000 ms): the upper
    assert round(p50[1]) == 100 and p99[1] == float("inf")  # d never placed
