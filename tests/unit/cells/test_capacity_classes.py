"""Pool replicas' capacity classes recognise every provider's spot nodes (berth.kube.capacity):
an on-demand replica never lands on a GKE, EKS or AKS spot node, a spot replica may land on any."""

from __future__ import annotations

import pytest
from berth.schemas.cluster import NodeSelectorRequirement

from berth.cells import CellConfig
from berth.cells.pool_placement import constrained
from berth.core.config import default_document
from berth.core.engine import Engine
from berth.kube.capacity import SPOT_LABELS, SpotLabel, with_spot_labels
from tests.unit.core.builders import node, pod

PROVIDER_SPOT = {
    "karpenter": {"karpenter.sh/capacity-type": "spot"},
    "eks": {"eks.amazonaws.com/capacityType": "SPOT"},
    "gke": {"cloud.google.com/gke-spot": "true"},
    "gke-preemptible": {"cloud.google.com/gke-preemptible": "true"},
    "aks": {"kubernetes.azure.com/scalesetpriority": "spot"},
}


def _engine(*nodes) -> Engine:
    engine = Engine(default_document())
    for info in nodes:
        engine.upsert_node(info)
    return engine


@pytest.mark.parametrize("provider", sorted(PROVIDER_SPOT))
def test_on_demand_replicas_avoid_and_spot_replicas_take_each_providers_spot_nodes(provider):
    spot = node("a-spot", labels=PROVIDER_SPOT[provider])
    plain = node("b-plain")
    replica = pod("replica", cpu=1000)
    outcome = _engine(spot, plain).schedule(constrained(replica, "on-demand"))
    assert [p.node for p in outcome.placements] == ["b-plain"]
    outcome = _engine(spot, plain).schedule(constrained(replica, "spot"))
    assert [p.node for p in outcome.placements] == ["a-spot"]
    outcome = _engine(plain).schedule(constrained(replica, "spot"))
    assert not outcome.placed


def test_the_spot_class_keeps_the_pods_own_required_terms():
    base = pod("replica", cpu=1000, node_selector={})
    with_zone = constrained(base, "on-demand").affinity.node_affinity.required  # type: ignore[union-attr]  # not None in this test's setup
    assert len(with_zone) == 1 and len(with_zone[0].match_expressions) == len(SPOT_LABELS)
    spot_terms = constrained(base, "spot").affinity.node_affinity.required  # type: ignore[union-attr]  # not None in this test's setup
    assert [t.match_expressions for t in spot_terms] == [
        (NodeSelectorRequirement(key=label.key, operator="In", values=label.spot_values),) for label in SPOT_LABELS
    ]


def test_a_configured_label_defines_spot_for_pool_replicas_and_travels_in_the_cell_config():
    labels = with_spot_labels((SpotLabel("example.com/lifecycle", ("spot",)),))
    spot, plain = node("a-spot", labels={"example.com/lifecycle": "spot"}), node("b-plain")
    outcome = _engine(spot, plain).schedule(constrained(pod("replica", cpu=1000), "on-demand", spot_labels=labels))
    assert [p.node for p in outcome.placements] == ["b-plain"]
    config = CellConfig(spot_labels=labels)
    assert CellConfig.from_document(config.document).spot_labels == labels
    assert config.hash != CellConfig().hash
    # Without configured labels the document is what it was before spot labels were configurable.
    assert "spotLabels" not in CellConfig().document
    assert CellConfig.from_document(CellConfig().document).spot_labels == SPOT_LABELS
