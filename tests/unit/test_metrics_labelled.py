"""berth.metrics.labelled: labelled children looked up once, counting in their registry."""

from __future__ import annotations


def test_a_labelled_child_is_looked_up_once_and_counts_in_the_registry():
    from prometheus_client import CollectorRegistry, Counter

    from berth.metrics import labelled

    registry = CollectorRegistry()
    consumed = Counter("records_consumed_total", "Records.", ["topic"], registry=registry)
    child = labelled(consumed, "berth.cluster.pods.v1")
    assert labelled(consumed, "berth.cluster.pods.v1") is child
    assert labelled(consumed, "berth.cluster.nodes.v1") is not child
    child.inc()
    labelled(consumed, "berth.cluster.pods.v1").inc()
    assert registry.get_sample_value("records_consumed_total", {"topic": "berth.cluster.pods.v1"}) == 2
