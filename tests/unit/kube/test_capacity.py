"""Spot capacity from every major provider's node labels (berth.kube.capacity), in the node
translation, the settings, and the capacity classes of pool replicas."""

from __future__ import annotations

from datetime import UTC

import pytest

from berth.kube.capacity import SPOT_LABELS, SpotLabel, is_spot, parse_spot_labels, with_spot_labels
from berth.kube.manifests import ManifestError, node_from_manifest


def _node(labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
    }


@pytest.mark.parametrize(
    ("labels", "capacity_type"),
    [
        ({}, "on-demand"),
        ({"karpenter.sh/capacity-type": "spot"}, "spot"),
        ({"karpenter.sh/capacity-type": "on-demand"}, "on-demand"),
        ({"karpenter.sh/capacity-type": "reserved"}, "on-demand"),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, "spot"),
        ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, "on-demand"),
        ({"eks.amazonaws.com/capacityType": "spot"}, "on-demand"),  # label values compare exactly
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"cloud.google.com/gke-spot": "false"}, "on-demand"),
        ({"cloud.google.com/gke-preemptible": "true"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "spot"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "regular"}, "on-demand"),
        ({"example.com/lifecycle": "spot"}, "on-demand"),  # not a known provider's label
    ],
)
def test_each_providers_spot_label_makes_a_spot_node(labels, capacity_type):
    assert node_from_manifest(_node(labels)).capacity_type == capacity_type


def test_a_configured_label_makes_a_spot_node_too():
    labels = with_spot_labels(parse_spot_labels("example.com/lifecycle=spot|preemptible"))
    assert (
        node_from_manifest(_node({"example.com/lifecycle": "preemptible"}), spot_labels=labels).capacity_type == "spot"
    )
    assert node_from_manifest(_node({"cloud.google.com/gke-spot": "true"}), spot_labels=labels).capacity_type == "spot"


def test_karpenters_label_keeps_its_own_values():
    with pytest.raises(ManifestError, match="must be spot, on-demand or reserved"):
        node_from_manifest(_node({"karpenter.sh/capacity-type": "cheap"}))


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", ()),
        ("example.com/lifecycle=spot", (SpotLabel("example.com/lifecycle", ("spot",)),)),
        (" a/b=x|y , c/d=1 ", (SpotLabel("a/b", ("x", "y")), SpotLabel("c/d", ("1",)))),
        ("a/b=x,a/b=y|x", (SpotLabel("a/b", ("x", "y")),)),
    ],
)
def test_parse_spot_labels(text, parsed):
    assert parse_spot_labels(text) == parsed


@pytest.mark.parametrize("text", ["a/b", "=spot", "a/b=", "a/b=|"])
def test_parse_spot_labels_refuses_what_is_not_key_value(text):
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_spot_labels(text)


def test_with_spot_labels_extends_the_providers_labels():
    merged = with_spot_labels((SpotLabel("karpenter.sh/capacity-type", ("interruptible",)), SpotLabel("x/y", ("1",))))
    assert merged[0] == SpotLabel("karpenter.sh/capacity-type", ("spot", "interruptible"))
    assert merged[-1] == SpotLabel("x/y", ("1",))
    assert [label.key for label in merged[: len(SPOT_LABELS)]] == [label.key for label in SPOT_LABELS]
    assert is_spot({"x/y": "1"}, merged) and not is_spot({"x/y": "1"})


def test_settings_read_and_check_berth_spot_labels(monkeypatch):
    from pydantic import ValidationError

    from berth.settings import BerthSettings

    monkeypatch.setenv("BERTH_SPOT_LABELS", "example.com/lifecycle=spot")
    assert BerthSettings().spot_label_table[-1] == SpotLabel("example.com/lifecycle", ("spot",))
    monkeypatch.setenv("BERTH_SPOT_LABELS", "example.com/lifecycle")
    with pytest.raises(ValidationError, match="spot_labels"):
        BerthSettings()


def test_ingest_publishes_nodes_spot_by_its_configured_labels():
    from datetime import datetime

    from berth.services.ingest.translate import observe, relist_steps

    at = datetime(2026, 1, 1, tzinfo=UTC)
    labels = with_spot_labels(parse_spot_labels("example.com/lifecycle=spot"))
    obj = _node({"example.com/lifecycle": "spot"})
    assert observe("nodes", obj, observed_at=at).node.capacity_type == "on-demand"
    assert observe("nodes", obj, observed_at=at, spot_labels=labels).node.capacity_type == "spot"
    [step] = relist_steps({}, "nodes", [obj], observed_at=at, spot_labels=labels).steps
    assert step.event.node.capacity_type == "spot"
