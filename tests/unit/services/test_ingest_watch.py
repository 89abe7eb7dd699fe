"""The watch loop's handling of a batch of watch lines (no apiserver: lines are given)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from berth.schemas.cluster import PodDeleted, PodObserved
from berth.services.ingest.watch import Gone, ResourceWatcher, WatchError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def line(kind: str, obj: dict) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def pod(name: str, rv: str, node: str | None = None) -> dict:
    spec = {"schedulerName": "berth", "containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": rv}, "spec": spec}


@pytest.fixture
def watcher():
    published: list = []

    async def publish(events):
        published.extend(events)

    w = ResourceWatcher(api=None, resource="pods", publish=publish, namespace="ml", clock=lambda: T0)  # type: ignore[arg-type]  # no API: the test feeds events itself
    w.published = published
    return w


async def test_a_batch_publishes_in_order_and_advances_the_resource_version(watcher):
    ended = await watcher._handle(
        [
            line("ADDED", pod("a", "11")),
            line("MODIFIED", pod("a", "12", node="n1")),
            line("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
        ]
    )
    assert not ended
    assert [type(e) for e in watcher.published] == [PodObserved, PodObserved]
    assert watcher.published[1].pod.node_name == "n1"
    assert watcher.resource_version == "15"
    await watcher._handle([line("DELETED", pod("a", "16", node="n1"))])
    assert isinstance(watcher.published[-1], PodDeleted) and watcher.known == {}


async def test_error_410_means_gone_after_publishing_what_came_before(watcher):
    with pytest.raises(Gone):
        await watcher._handle(
            [line("ADDED", pod("a", "11")), line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})]
        )
    assert len(watcher.published) == 1 and watcher.resource_version == "11"
    with pytest.raises(WatchError, match="500"):
        await watcher._handle([line("ERROR", {"kind": "Status", "code": 500, "message": "boom"})])


async def test_the_end_of_the_stream_ends_the_watch(watcher):
    from berth.services.ingest.watch import _END

    assert await watcher._handle([line("ADDED", pod("a", "11")), _END]) is True
    assert watcher.resource_version == "11"


async def test_gated_pods_are_counted_as_kubes_gated_queue_and_published_once_ungated(watcher):
    from prometheus_client import REGISTRY

    def gated_gauge() -> float | None:
        return REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": "gated"})

    gated = pod("g", "20")
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    other = pod("h", "21")
    other["spec"]["schedulingGates"] = [{"name": "x"}]
    await watcher._handle([line("ADDED", gated), line("ADDED", other)])
    assert watcher.published == [] and gated_gauge() == 2
    ungated = pod("g", "22")
    await watcher._handle([line("MODIFIED", ungated), line("DELETED", pod("h", "23"))])
    assert [e.pod.name for e in watcher.published] == ["g"] and gated_gauge() == 0
