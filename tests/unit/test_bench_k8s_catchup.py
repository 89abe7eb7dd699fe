"""bench/k8s/catchup.py's pure part: a consumer group's lag from committed and end offsets."""

from __future__ import annotations

from bench.k8s.catchup import GroupLag, caught_up, describe, lag_of

NODES = ("berth.cluster.nodes.v1", 0)
PODS = ("berth.cluster.pods.v1", 0)
PODS_1 = ("berth.cluster.pods.v1", 1)


def test_a_group_that_committed_up_to_the_end_has_no_lag():
    lag = lag_of("inv", {NODES: 1000, PODS: 4}, {NODES: 1000, PODS: 4})
    assert lag.behind == {} and lag.total == 0


def test_the_lag_is_the_end_less_the_committed_offset_per_partition():
    lag = lag_of("inv", {NODES: 400, PODS: 4}, {NODES: 1000, PODS: 6})
    assert lag.behind == {NODES: 600, PODS: 2}
    assert lag.total == 602


def test_a_partition_without_a_committed_offset_counts_from_the_start():
    # Kafka answers -1 for a partition the group never committed; absent and None mean the same.
    assert lag_of("inv", {NODES: -1}, {NODES: 7, PODS: 3, PODS_1: 0}).behind == {NODES: 7, PODS: 3}
    assert lag_of("inv", {NODES: None}, {NODES: 7}).behind == {NODES: 7}


def test_an_empty_partition_never_committed_is_no_lag():
    assert lag_of("dec", {}, {PODS: 0, PODS_1: 0}).total == 0


def test_a_committed_offset_past_the_end_read_later_is_no_lag():
    # Committed offsets are read first and end offsets after; neither can go backwards, so this
    # only happens with a stale metadata answer: it still means "nothing left to read".
    assert lag_of("inv", {NODES: 12}, {NODES: 10}).total == 0


def test_caught_up_only_when_every_group_has_read_everything():
    done = GroupLag("berth-inventory", {})
    behind = GroupLag("berth-decision", {("berth.scheduler.inputs.v1", 3): 5})
    assert caught_up([done])
    assert not caught_up([done, behind])
    assert caught_up([])


def test_describe_names_each_group_and_its_records_behind():
    lags = [GroupLag("berth-inventory", {NODES: 1204, PODS: 1}), GroupLag("berth-decision", {})]
    assert describe(lags) == "berth-inventory 1,205 behind, berth-decision 0 behind"
