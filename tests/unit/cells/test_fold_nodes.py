"""The node book (berth.cells.nodes), called directly: how a node is shown to the engine while it
is cordoned or reserved for a preemptor, and when it takes pods again."""

from __future__ import annotations

import pytest

from berth.cells.nodes import NodeBook, effective, forget_node, observe_node, release_reservations, reserve, show

from .fold_kit import engine, pending, small_node


def engine_sees_unschedulable(real, name: str) -> bool | None:
    info = real.state.nodes.get(name)
    return None if info is None else info.unschedulable


@pytest.mark.parametrize(
    ("cordoned", "reserving", "observed_unschedulable", "shown_unschedulable"),
    [
        pytest.param(False, False, False, False, id="plain"),
        pytest.param(True, False, False, True, id="cordoned-by-the-cell"),
        pytest.param(False, True, False, True, id="reserving-for-a-preemptor"),
        pytest.param(True, True, False, True, id="both"),
        pytest.param(False, False, True, True, id="cordoned-in-the-cluster"),
        pytest.param(True, False, True, True, id="cordoned-twice"),
    ],
)
def test_effective(cordoned, reserving, observed_unschedulable, shown_unschedulable):
    book = NodeBook()
    if cordoned:
        book.cordoned.add("n1")
    if reserving:
        reserve(book, "n1", "victim")
    observed = small_node("n1", unschedulable=observed_unschedulable)
    shown = effective(book, observed)
    assert shown.unschedulable is shown_unschedulable
    assert shown.model_copy(update={"unschedulable": observed_unschedulable}) == observed
    if shown_unschedulable == observed_unschedulable:
        assert shown is observed  # nothing to hide: the observation itself


def test_effective_of_another_node_is_unchanged():
    book = NodeBook(cordoned={"n2"}, reserving={"n3": {"v"}})
    observed = small_node("n1")
    assert effective(book, observed) is observed


@pytest.mark.parametrize(
    ("cordoned", "engine_unschedulable"),
    [
        pytest.param(False, False, id="plain"),
        pytest.param(True, True, id="cordoned-stays-unschedulable-over-a-stale-observation"),
    ],
)
def test_observe_node_keeps_the_observation_and_shows_the_effective_node(cordoned, engine_unschedulable):
    real, book = engine(), NodeBook()
    if cordoned:
        book.cordoned.add("n1")
    observed = small_node("n1")
    observe_node(book, real, observed)
    assert book.nodes == {"n1": observed}
    assert engine_sees_unschedulable(real, "n1") is engine_unschedulable


def test_forget_node_drops_it_everywhere():
    real, book = engine(), NodeBook()
    observe_node(book, real, small_node("n1"))
    observe_node(book, real, small_node("n2"))
    book.cordoned.update({"n1", "n2"})
    forget_node(book, real, "n1")
    assert (sorted(book.nodes), book.cordoned, list(real.state.nodes.names())) == (["n2"], {"n2"}, ["n2"])


def test_show_is_a_no_op_for_a_node_not_observed():
    real, book = engine(), NodeBook(cordoned={"ghost"})
    show(book, real, "ghost")
    assert real.state.nodes.get("ghost") is None


def test_reserve_collects_victims_per_node():
    book = NodeBook()
    reserve(book, "n1", "a")
    reserve(book, "n1", "b")
    reserve(book, "n2", "c")
    reserve(book, "n1", "a")
    assert book.reserving == {"n1": {"a", "b"}, "n2": {"c"}}


@pytest.mark.parametrize(
    ("gone", "reserving", "n1_unschedulable", "n2_unschedulable"),
    [
        pytest.param(set(), {"n1": {"a", "b"}, "n2": {"c"}}, True, True, id="nobody-left"),
        pytest.param({"a"}, {"n1": {"b"}, "n2": {"c"}}, True, True, id="one-victim-of-two-left"),
        pytest.param({"a", "b"}, {"n2": {"c"}}, False, True, id="all-victims-of-n1-left"),
        pytest.param({"a", "b", "c"}, {}, False, False, id="all-left"),
        pytest.param({"zzz"}, {"n1": {"a", "b"}, "n2": {"c"}}, True, True, id="someone-else-left"),
    ],
)
def test_release_reservations_shows_a_node_again_once_its_victims_are_gone(
    gone, reserving, n1_unschedulable, n2_unschedulable
):
    real, book = engine(), NodeBook()
    for name, victims in (("n1", ("a", "b")), ("n2", ("c",))):
        for victim in victims:
            reserve(book, name, victim)
        observe_node(book, real, small_node(name))
    assert (engine_sees_unschedulable(real, "n1"), engine_sees_unschedulable(real, "n2")) == (True, True)
    release_reservations(book, real, set(gone))
    assert book.reserving == reserving
    assert (engine_sees_unschedulable(real, "n1"), engine_sees_unschedulable(real, "n2")) == (
        n1_unschedulable,
        n2_unschedulable,
    )


def test_a_released_node_still_cordoned_stays_unschedulable():
    real, book = engine(), NodeBook()
    book.cordoned.add("n1")
    reserve(book, "n1", "a")
    observe_node(book, real, small_node("n1"))
    release_reservations(book, real, {"a"})
    assert (book.reserving, engine_sees_unschedulable(real, "n1")) == ({}, True)


def test_a_released_node_takes_pods_again():
    real, book = engine(), NodeBook()
    reserve(book, "n1", "a")
    observe_node(book, real, small_node("n1"))
    assert not real.schedule(pending("p"), preempt=False).placed
    release_reservations(book, real, {"a"})
    outcome = real.schedule(pending("p"), preempt=False)
    assert outcome.placed and outcome.placements[0].node == "n1"
