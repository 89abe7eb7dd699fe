"""``berth dev nodes --label/--taint``: the parsing of kubectl's label and taint syntax."""

from __future__ import annotations

import pytest
from berth_dev.devstack.fakenodes import fake_node, parse_label, parse_taint


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("team=ml", ("team", "ml")),
        ("example.com/pool=inference-a", ("example.com/pool", "inference-a")),
        ("empty=", ("empty", "")),
        ("nvidia.com/gpu.product=NVIDIA-L4", ("nvidia.com/gpu.product", "NVIDIA-L4")),
    ],
)
def test_labels_in_kubectl_syntax(text, parsed):
    assert parse_label(text) == parsed


@pytest.mark.parametrize(
    "text, words",
    [
        ("no-equals", "want KEY=VALUE"),
        ("=value", "the name must be"),
        ("Bad_Prefix.COM/x=1", "DNS subdomain"),
        ("k=" + "v" * 64, "at most 63"),
        ("k=-starts-with-dash", "beginning and ending"),
    ],
)
def test_labels_kubernetes_would_refuse_are_refused_with_the_reason(text, words):
    with pytest.raises(ValueError, match=words):
        parse_label(text)


def test_labels_and_taints_land_on_the_node_objects():
    node = fake_node(
        0,
        labels=dict([parse_label("team=ml"), parse_label("nvidia.com/gpu.product=NVIDIA-L4")]),
        taints=[parse_taint("dedicated=ml:NoSchedule")],
    )
    labels = node.node["metadata"]["labels"]
    assert (labels["team"], labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.count"]) == (
        "ml",
        "NVIDIA-L4",
        "8",
    )
    assert node.node["spec"]["taints"] == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
