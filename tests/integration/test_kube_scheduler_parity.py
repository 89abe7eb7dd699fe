"""Berth's verdicts and messages against kube-scheduler v1.34's, on the same objects.

Generated clusters (seeded): nodes with zones, disks, taints, cordons, small pod limits; running
pods with labels and anti-affinity; then pending pods with node selectors, node affinity,
tolerations, pod affinity and anti-affinity, topology spread, CPU requests and a
preemptionPolicy=Never priority class. Each pending pod is decided alone on the cluster as it is
(kube-scheduler: the pod is created, its verdict read from the pod, the pod force-deleted; Berth:
``berth simulate`` on the same manifests), so kube's random choice among equal nodes cannot make
the two states differ. For every pod the test asserts the same verdict (placed or not) and, when
it is not placed, the same message word for word.

kube-scheduler and kube-apiserver are the v1.34 binaries the project builds; the test starts a
control plane of its own, since kube-scheduler's messages count every node of the apiserver.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import pytest
from kubernetes.client import CoreV1Api, SchedulingV1Api
from kubernetes.client.exceptions import ApiException

from berth.simulate import run as simulate

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cached_kube_binaries")]

CLUSTERS = 24
PROBES_PER_CLUSTER = 6
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
NEVER = "parity-never-preempt"
SETTLE_S = 1.0
"""How long the test lets kube-scheduler's informers catch up after changing the cluster."""


def _node(name: str, rng: random.Random) -> dict[str, Any]:
    labels = {HOST: name, "disk": rng.choice(["ssd", "hdd"])}
    if rng.random() > 0.15:
        labels[ZONE] = rng.choice(["a", "b", "c"])
    taints = (
        [{"key": "dedicated", "value": rng.choice(["team1", "team2"]), "effect": "NoSchedule"}]
        if rng.random() < 0.3
        else []
    )
    allocatable = {"cpu": rng.choice(["1", "2", "4"]), "memory": "8Gi", "pods": rng.choice(["110", "110", "2"])}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": rng.random() < 0.1},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(
    name: str, namespace: str, *, labels: dict[str, str], cpu: str, node: str | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
            ],
            **spec,
        },
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def _term(app: str, topology_key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": topology_key}


def _probe(name: str, namespace: str, rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"disk": "ssd"}
    if rng.random() < 0.3:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}]
                }
            }
        }
    if rng.random() < 0.4:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "team1", "effect": "NoSchedule"}]
    roll = rng.random()
    affinity = spec.setdefault("affinity", {})
    if roll < 0.2:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term("db", ZONE)]}
    elif roll < 0.4:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term("web", HOST)]}
    if not affinity:
        del spec["affinity"]
    if rng.random() < 0.25:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
    if rng.random() < 0.25:
        spec["priorityClassName"] = NEVER
    app = rng.choice(["web", "probe"])
    return _pod(name, namespace, labels={"app": app}, cpu=rng.choice(["100m", "500m", "1500m", "3", "6"]), **spec)


def generate(seed: int, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, running pods, pending probes) of cluster ``seed``."""
    rng = random.Random(seed)
    nodes = [_node(f"p{seed:02d}-n{i}", rng) for i in range(rng.randint(3, 6))]
    running = []
    for i in range(rng.randint(0, 6)):
        app = rng.choice(["web", "db", "cache"])
        extra: dict[str, Any] = {}
        if rng.random() < 0.3:
            extra["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("probe", HOST)]}
            }
        running.append(
            _pod(
                f"run-{i}",
                namespace,
                labels={"app": app},
                cpu=rng.choice(["250m", "500m", "1"]),
                node=rng.choice(nodes)["metadata"]["name"],
                **extra,
            )
        )
    probes = [_probe(f"probe-{i}", namespace, rng) for i in range(PROBES_PER_CLUSTER)]
    return nodes, running, probes


def _kube_verdict(core: CoreV1Api, namespace: str, body: dict[str, Any], timeout: float = 30.0) -> tuple[bool, str]:
    """Create the pod, wait for kube-scheduler's verdict, force-delete the pod."""
    name = body["metadata"]["name"]
    core.create_namespaced_pod(namespace, body)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            pod = core.read_namespaced_pod(name, namespace)
            if pod.spec.node_name:
                return True, ""
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
                    return False, condition.message
            time.sleep(0.05)
        raise AssertionError(f"kube-scheduler gave pod {namespace}/{name} no verdict in {timeout:.0f}s")
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        while True:
            try:
                core.read_namespaced_pod(name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise
            time.sleep(0.05)


def _berth_verdict(documents: list[dict[str, Any]], probe: dict[str, Any]) -> tuple[bool, str]:
    report = simulate([*documents, probe])
    [outcome] = [o for o in report.outcomes if o.pod.endswith("/" + probe["metadata"]["name"])]
    return outcome.node is not None, outcome.message


def test_berth_decides_and_words_every_pod_as_kube_scheduler_does() -> None:
    from berth_dev.devstack.kube import KubeControlPlane, KubeSchedulerProcess

    never = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": NEVER},
        "value": 0,
        "preemptionPolicy": "Never",
    }
    compared, placed, differences = 0, 0, []
    with KubeControlPlane() as plane, plane.connection().api_client() as api:
        core = CoreV1Api(api)
        SchedulingV1Api(api).create_priority_class(never)
        with KubeSchedulerProcess(plane) as scheduler:
            for seed in range(CLUSTERS):
                namespace = f"parity-{seed}-{uuid.uuid4().hex[:6]}"
                core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
                nodes, running, probes = generate(seed, namespace)
                for body in nodes:
                    core.create_node(body)
                    core.patch_node_status(body["metadata"]["name"], {"status": body["status"]})
                for body in running:
                    core.create_namespaced_pod(namespace, body)
                time.sleep(SETTLE_S)  # kube-scheduler's informers see the cluster as it is now
                documents = [never, *nodes, *running]
                for probe in probes:
                    kube = _kube_verdict(core, namespace, probe)
                    berth = _berth_verdict(documents, probe)
                    compared += 1
                    placed += kube[0]
                    if kube != berth:
                        differences.append(
                            f"cluster {seed} {probe['metadata']['name']}:\n  kube:  {kube}\n  berth: {berth}"
                        )
                for body in running:
                    core.delete_namespaced_pod(body["metadata"]["name"], namespace, grace_period_seconds=0)
                for body in nodes:
                    core.delete_node(body["metadata"]["name"])
                while core.list_node().items:
                    time.sleep(0.05)
            assert scheduler.is_alive(), f"kube-scheduler exited; its log: {scheduler.log_path}"
    print(
        f"\n{compared} pods compared on {CLUSTERS} clusters ({placed} placed by both, "
        f"{compared - placed - len(differences)} unschedulable with the same message)"
    )
    assert 0 < placed < compared, "the clusters must exercise both verdicts"
    assert not differences, f"{len(differences)} of {compared} pods differ:\n" + "\n".join(differences)
