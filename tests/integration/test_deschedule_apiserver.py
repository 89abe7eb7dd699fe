"""`berth deschedule --kubeconfig ... --evict` on a real kube-apiserver: a pod on a node tainted
after it started is evicted through the Eviction API (policy/v1); PodDisruptionBudgets block
evictions, by Berth's own count and by the apiserver's check; a workload put back on the bad node
within the cooldown is left alone (no eviction loop).

The apiserver is the session's (``kube_apiserver``: etcd + kube-apiserver, no controller-manager,
no kubelet). The test works in a namespace and on fake nodes of its own (a node pool label the
policy's ``nodeSelector`` selects, so other tests' nodes are neither sources nor targets); pods
are created bound (``spec.nodeName``) and marked Running through the status subresource, as a
kubelet would. Every assertion reads the API objects or the command's output.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_dev.devstack.fakenodes import create_fake_nodes
from kubernetes.client import CoreV1Api, PolicyV1Api
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.integration

BERTH = str(Path(__file__).resolve().parents[2] / ".venv/bin/berth")
POOL_LABEL = "berth.io/node-pool"


def _pod(name: str, node: str, app: str, owner_kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": app},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": owner_kind, "name": app, "uid": str(uuid.uuid4()), "controller": True}
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


def _running(core: CoreV1Api, namespace: str, body: dict[str, Any]) -> str:
    created = core.create_namespaced_pod(namespace, body)
    core.patch_namespaced_pod_status(body["metadata"]["name"], namespace, {"status": {"phase": "Running"}})
    return created.metadata.uid


def _exists(core: CoreV1Api, namespace: str, name: str) -> bool:
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return pod.metadata.deletion_timestamp is None


def _deschedule(kubeconfig: Path, policy: Path, history: Path, *extra: str) -> tuple[list[dict], dict]:
    done = subprocess.run(
        [
            BERTH,
            "deschedule",
            "--policy",
            str(policy),
            "--kubeconfig",
            str(kubeconfig),
            "--history",
            str(history),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return lines[:-1], lines[-1]["summary"]


def test_taint_violation_evicted_through_the_eviction_api_pdbs_and_cooldown_respected(
    kube_apiserver: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    pool, namespace = f"dsch-{suffix}", f"dsch-{suffix}"
    with kube_apiserver.api_client() as api:
        core = CoreV1Api(api)
        core.create_namespace({"metadata": {"name": namespace}})
        labels = {POOL_LABEL: pool}
        (tainted,) = create_fake_nodes(
            api, 1, gpus=0, prefix=f"{pool}-t-", cpu="8", labels=labels, taints=["maintenance=true:NoSchedule"]
        )
        (healthy,) = create_fake_nodes(api, 1, gpus=0, prefix=f"{pool}-ok-", cpu="8", labels=labels)
        web_uid = _running(core, namespace, _pod("web-0", tainted, "web", "ReplicaSet"))
        for name in ("db-0", "db-1"):
            _running(core, namespace, _pod(name, tainted, "db", "StatefulSet"))
        _running(core, namespace, _pod("cache-0", tainted, "cache", "ReplicaSet"))
        policy_api = PolicyV1Api(api)
        # db: both must stay (Berth's own count refuses); cache: Berth counts one disruption
        # allowed, but no disruption controller runs here, so the apiserver refuses (429).
        for name, spec in (("db", {"minAvailable": 2}), ("cache", {"maxUnavailable": 1})):
            policy_api.create_namespaced_pod_disruption_budget(
                namespace,
                {"metadata": {"name": name}, "spec": {**spec, "selector": {"matchLabels": {"app": name}}}},
            )

        policy = tmp_path / "policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "descheduler/v1alpha2",
                    "kind": "DeschedulerPolicy",
                    "nodeSelector": f"{POOL_LABEL}={pool}",
                    "gracePeriodSeconds": 0,
                    "profiles": [
                        {"name": "taints", "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}
                    ],
                }
            )
        )
        history = tmp_path / "history.jsonl"

        # Without --evict nothing changes.
        planned, _ = _deschedule(kube_apiserver.kubeconfig_path, policy, history)
        assert {line["pod"] for line in planned} == {f"{namespace}/web-0", f"{namespace}/cache-0"}
        assert _exists(core, namespace, "web-0")

        evictions, summary = _deschedule(kube_apiserver.kubeconfig_path, policy, history, "--evict")
        results = {line["pod"]: (line["target_node"], line["result"]) for line in evictions}
        assert results[f"{namespace}/web-0"] == (healthy, "evicted")
        assert results[f"{namespace}/cache-0"][1].startswith("refused: a disruption budget forbids it")
        assert summary["refused"]["RemovePodsViolatingNodeTaints"]["pdb"] == 2
        assert summary["evicted"] == 1
        assert not _exists(core, namespace, "web-0")
        assert all(_exists(core, namespace, name) for name in ("db-0", "db-1", "cache-0"))
        assert json.loads(history.read_text().splitlines()[0])["workload"] == f"{namespace}/ReplicaSet/web"

        # The workload comes back on the tainted node (a controller's new pod, placed badly):
        # within the cooldown it is left alone.
        replacement = _pod("web-1", tainted, "web", "ReplicaSet")
        replacement_uid = _running(core, namespace, replacement)
        assert replacement_uid != web_uid
        again, summary = _deschedule(kube_apiserver.kubeconfig_path, policy, history, "--evict")
        assert f"{namespace}/web-1" not in {line["pod"] for line in again}
        assert summary["refused"]["RemovePodsViolatingNodeTaints"]["cooldown"] == 1
        assert summary["loops_prevented"]["RemovePodsViolatingNodeTaints"] >= 1
        assert _exists(core, namespace, "web-1")
