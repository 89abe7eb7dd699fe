"""Pods with spec.schedulingGates: read from manifests, invisible to ingest until the last gate
is removed, and reported by berth simulate as kube leaves them (SchedulingGated), unscheduled."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from berth.services.ingest.translate import observe, watch_steps

from berth.core import messages
from berth.kube.manifests import ManifestError, pod_from_manifest
from berth.simulate import run as simulate

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _pod(name: str, gates: list[dict] | None = None, **spec) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "berth",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            **spec,
        },
    }
    if gates is not None:
        body["spec"]["schedulingGates"] = gates
    return body


def test_the_gates_are_read_by_name():
    assert pod_from_manifest(_pod("p", [{"name": "a/b"}, {"name": "c"}])).scheduling_gates == ("a/b", "c")
    assert pod_from_manifest(_pod("p")).scheduling_gates == ()
    with pytest.raises(ManifestError, match=r"spec.schedulingGates\[0\].name"):
        pod_from_manifest(_pod("p", [{}]))


def test_ingest_publishes_a_gated_pod_only_once_its_last_gate_is_gone():
    gated = _pod("p", [{"name": "kueue.x-k8s.io/admission"}])
    assert observe("pods", gated, observed_at=AT) is None
    assert watch_steps({}, "pods", "ADDED", gated, observed_at=AT).steps == ()
    open_ = _pod("p", [])
    [step] = watch_steps({}, "pods", "MODIFIED", open_, observed_at=AT).steps
    assert step.event.pod.uid == "uid-p" and step.event.pod.node_name is None
    # A bound pod holds capacity whatever its spec says.
    assert observe("pods", _pod("q", [{"name": "x"}], nodeName="n1"), observed_at=AT) is not None


def test_simulate_leaves_a_gated_pod_unscheduled_with_kubes_condition_message():
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
    }
    report = simulate([node, _pod("gated", [{"name": "x"}]), _pod("free")])
    out = {o.pod: o for o in report.outcomes}
    assert out["default/gated"].node is None and out["default/gated"].message == messages.SCHEDULING_GATED
    assert out["default/free"].node == "n1"
    summary = report.summary()
    assert (summary["placed"], summary["scheduling_gated"], summary["unschedulable"]) == (1, 1, 0)
    json.dumps(summary)
