"""The binder's node informer: the pure cache fold, the watch-stream decoding, and the LIST/WATCH
loop against a scripted fake of ``CoreV1Api.list_node`` (410 Gone → list again; 403 → stop)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from berth.services.binder.node_informer import Gone, NodeCache, NodeInformer, fold_event, watch_events

# -- NodeCache -------------------------------------------------------------------------------------


def test_an_unsynced_cache_knows_nothing():
    cache = NodeCache()
    cache.apply("ADDED", "gpu-0", "5")  # events before the first LIST do not make it synced
    assert cache.knows("gpu-0") is None


def test_listed_added_deleted_and_unknown_names():
    cache = NodeCache()
    cache.replace(["gpu-0", "gpu-1"], "10")
    assert (cache.knows("gpu-0"), cache.knows("gpu-9"), cache.synced) == (True, None, True)
    cache.apply("ADDED", "gpu-2", "11")
    cache.apply("DELETED", "gpu-0", "12")
    cache.apply("BOOKMARK", "", "13")
    assert (cache.knows("gpu-2"), cache.knows("gpu-0"), cache.resource_version, len(cache)) == (True, False, "13", 2)
    cache.apply("ADDED", "gpu-0", "14")  # re-created
    assert cache.knows("gpu-0") is True


def test_a_relist_turns_vanished_names_into_deleted_ones():
    cache = NodeCache()
    cache.replace(["a", "b"], "1")
    cache.replace(["b", "c"], "7")
    assert (cache.knows("a"), cache.knows("b"), cache.knows("c"), cache.resource_version) == (False, True, True, "7")


def test_deleted_names_are_bounded():
    cache = NodeCache(remember_deleted=2)
    cache.replace(["a", "b", "c"], "1")
    for name in ("a", "b", "c"):
        cache.apply("DELETED", name, "2")
    assert (cache.knows("a"), cache.knows("b"), cache.knows("c")) == (None, False, False)


def test_an_unknown_event_type_is_an_error():
    with pytest.raises(ValueError):
        NodeCache().apply("SYNC", "a", "1")


# -- the stream ------------------------------------------------------------------------------------


def _event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {
        "type": kind,
        "object": {"kind": "PartialObjectMetadata", "metadata": {"name": name, "resourceVersion": version}},
    }


def test_watch_lines_may_be_split_anywhere():
    stream = (json.dumps(_event("ADDED", "a", "2")) + "\n" + json.dumps(_event("DELETED", "a", "3")) + "\n").encode()
    chunks = [stream[:7], stream[7:50], stream[50:]]
    assert [e["type"] for e in watch_events(chunks)] == ["ADDED", "DELETED"]


def test_an_error_event_410_means_gone_and_others_fail():
    cache = NodeCache()
    cache.replace([], "1")
    with pytest.raises(Gone):
        fold_event(cache, {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    with pytest.raises(RuntimeError):
        fold_event(cache, {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}})
    fold_event(cache, _event("ADDED", "n", "4"))
    assert (cache.knows("n"), cache.resource_version) == (True, "4")


# -- the loop, on a scripted fake ------------------------------------------------------------------


class FakeResponse:
    def __init__(
        self, body: bytes = b"", lines: list[dict[str, Any]] | None = None, hold: threading.Event | None = None
    ) -> None:
        self.data = body
        self._lines = lines or []
        self._hold = hold

    def stream(self, _size: int):
        for line in self._lines:
            yield (json.dumps(line) + "\n").encode()
        if self._hold is not None:  # a watch that stays open until shut down
            self._hold.wait(10)

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        if self._hold is not None:
            self._hold.set()


class FakeCore:
    """``list_node``: LISTs answer the scripted name lists in turn (the last one again and again);
    WATCHes the scripted event lists in turn, then a watch that stays open. Records every call's
    arguments."""

    def __init__(self, lists: list[list[str]], watches: list[list[dict[str, Any]]], forbid: bool = False) -> None:
        self.lists = lists
        self.watches = watches
        self.forbid = forbid
        self.calls: list[dict[str, Any]] = []
        self.hold = threading.Event()

    def list_node(self, **kwargs: Any) -> FakeResponse:
        self.calls.append(kwargs)
        if self.forbid:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=403, reason="Forbidden")
        if not kwargs.get("watch"):
            version = str(100 + len(self.calls))
            names = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
            return FakeResponse(
                json.dumps(
                    {"items": [{"metadata": {"name": n}} for n in names], "metadata": {"resourceVersion": version}}
                ).encode()
            )
        if self.watches:
            return FakeResponse(lines=self.watches.pop(0))
        return FakeResponse(hold=self.hold)


def _wait(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_410_in_the_watch_lists_again_and_resumes_from_the_new_list():
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    core = FakeCore([["a", "b"], ["a", "c", "d"]], watches=[[_event("ADDED", "c", "150")], [gone]])
    tokens: list[int] = []
    informer = NodeInformer(None, take_token=lambda: tokens.append(1), core=core, retry_s=0.01).start()
    try:
        assert informer.wait_synced(5)
        _wait(lambda: informer.lists == 2 and informer.cache.knows("d") is True)
        _wait(lambda: len(core.calls) >= 5)  # list, watch, watch (410), list, watch (held open)
    finally:
        informer.stop()
    kinds = ["watch" if c.get("watch") else "list" for c in core.calls]
    assert kinds[:5] == ["list", "watch", "watch", "list", "watch"]
    # The second watch resumed where the first ended; the one after the relist from the new list.
    assert core.calls[2]["resource_version"] == "150"
    assert core.calls[4]["resource_version"] == "104"
    assert informer.cache.knows("b") is False  # gone by the second list
    assert len(tokens) == informer.requests == len(core.calls)  # one token per request
    assert not informer.running


def test_forbidden_stops_the_informer_unsynced():
    core = FakeCore([["a"]], watches=[], forbid=True)
    informer = NodeInformer(None, take_token=lambda: None, core=core).start()
    _wait(lambda: not informer.running)
    assert informer.forbidden and informer.cache.knows("a") is None and len(core.calls) == 1
