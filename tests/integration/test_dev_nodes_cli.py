"""``berth dev nodes`` with ``--label`` and ``--taint`` against a real kube-apiserver 1.34."""

from __future__ import annotations

import uuid

import pytest
from berth_dev.devstack.kube import KubeConnection
from kubernetes.client import CoreV1Api
from typer.testing import CliRunner

from berth.cli import app

pytestmark = pytest.mark.integration


def test_dev_nodes_makes_labelled_and_tainted_gpu_nodes(kube_apiserver: KubeConnection) -> None:
    prefix = f"lbl-{uuid.uuid4().hex[:6]}-"
    result = CliRunner().invoke(
        app,
        [
            "dev",
            "nodes",
            "2",
            "--prefix",
            prefix,
            "--gpus",
            "4",
            "--kubeconfig",
            str(kube_apiserver.kubeconfig_path),
            "--label",
            "node-pool=inference",
            "--label",
            "example.com/tier=gold",
            "--taint",
            "dedicated=inference:NoSchedule",
            "--taint",
            "spot:PreferNoSchedule",
        ],
    )
    assert result.exit_code == 0, result.output
    with kube_apiserver.api_client() as api:
        nodes = [n for n in CoreV1Api(api).list_node().items if n.metadata.name.startswith(prefix)]
    assert sorted(n.metadata.name for n in nodes) == [f"{prefix}0000", f"{prefix}0001"]
    for node in nodes:
        labels = node.metadata.labels
        assert (labels["node-pool"], labels["example.com/tier"], labels["nvidia.com/gpu.count"]) == (
            "inference",
            "gold",
            "4",
        )
        assert sorted((t.key, t.value, t.effect) for t in node.spec.taints) == [
            ("dedicated", "inference", "NoSchedule"),
            ("spot", None, "PreferNoSchedule"),
        ]
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert "berth.io/gpu-topology" in node.metadata.annotations


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--label", "no-equals-sign", "want KEY=VALUE"),
        ("--taint", "dedicated=x:Sometimes", "not a taint"),
    ],
)
def test_dev_nodes_refuses_a_bad_label_or_taint_before_touching_the_cluster(
    kube_apiserver: KubeConnection, option: str, value: str, words: str
) -> None:
    prefix = f"bad-{uuid.uuid4().hex[:6]}-"
    result = CliRunner().invoke(
        app,
        ["dev", "nodes", "1", "--prefix", prefix, "--kubeconfig", str(kube_apiserver.kubeconfig_path), option, value],
    )
    assert result.exit_code == 2
    assert words in result.output and option in result.output
    with kube_apiserver.api_client() as api:
        assert not [n for n in CoreV1Api(api).list_node().items if n.metadata.name.startswith(prefix)]
