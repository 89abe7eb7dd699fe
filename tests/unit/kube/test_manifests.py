"""Manifest conversion: effective requests, Berth's annotations, GPU nodes, and error messages
that name the object and the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from berth.schemas.policy import PriorityClassInfo

from berth.kube.manifests import (
    ManifestError,
    load_documents,
    node_from_manifest,
    pod_from_manifest,
)

GiB = 2**30


def pod(name: str = "train-0", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": body}


def gpu_node(name: str = "gpu-a", gpus: int = 8, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "A100",
                "nvidia.com/gpu.memory": "40960",
                "topology.kubernetes.io/zone": "z1",
            },
            "annotations": dict(annotations),
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}},
    }


def test_effective_requests_take_the_larger_of_containers_and_init_plus_overhead() -> None:
    manifest = pod(
        containers=[
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
        ],
        initContainers=[{"name": "init", "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}}],
        overhead={"cpu": "100m"},
    )
    assert pod_from_manifest(manifest).pod.requests == {"cpu": 3100, "memory": GiB}


def test_sidecar_init_containers_add_to_the_main_containers() -> None:
    manifest = pod(
        containers=[{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        initContainers=[
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "migrate", "resources": {"requests": {"cpu": "2"}}},
        ],
    )
    # main phase: 1 + sidecar 1 = 2; init phase: migrate 2 + the sidecar already running 1 = 3.
    assert pod_from_manifest(manifest).pod.requests == {"cpu": 3000}


def test_limits_default_requests_so_gpus_given_as_limits_count() -> None:
    manifest = pod(containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": 8}}}])
    assert pod_from_manifest(manifest).pod.requests == {"cpu": 8000, "nvidia.com/gpu": 2}


@pytest.mark.parametrize(("text", "milli"), [("0.25", 250), ("0.5", 500), ("1", 1000), ("0.001", 1)])
def test_gpu_fraction_has_milli_precision(text: str, milli: int) -> None:
    manifest = pod()
    manifest["metadata"]["annotations"] = {"gpu-fraction": text, "gpu-memory": "8192"}
    info = pod_from_manifest(manifest).pod
    assert (info.gpu_fraction_milli, info.gpu_memory_mib) == (milli, 8192)


def test_berth_annotations_and_labels_reach_the_pod() -> None:
    manifest = pod(nodeName="gpu-a", priority=7)
    manifest["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
    manifest["metadata"]["annotations"] = {"berth.io/gpu-locality": "nvlink", "berth.io/gpu-devices": "3, 1"}
    info = pod_from_manifest(manifest).pod
    assert (info.pod_group, info.gpu_locality, info.node_name, info.gpu_devices, info.priority, info.phase) == (
        "train",
        "nvlink",
        "gpu-a",
        (1, 3),
        7,
        "Running",
    )


def test_priority_comes_from_the_class_or_the_global_default() -> None:
    classes = {
        "high": PriorityClassInfo(name="high", value=1000, preemption_policy="Never"),
        "normal": PriorityClassInfo(name="normal", value=10, global_default=True),
    }
    high = pod_from_manifest(pod(priorityClassName="high"), priority_classes=classes).pod
    default = pod_from_manifest(pod(), priority_classes=classes).pod
    assert (high.priority, high.preemption_policy) == (1000, "Never")
    assert (default.priority, default.priority_class_name) == (10, "normal")


def test_affinity_tolerations_and_spread_are_converted() -> None:
    manifest = pod(
        nodeSelector={"disk": "nvme"},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "preference": {"matchExpressions": [{"key": "spot", "operator": "Exists"}]}}
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            },
        },
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "x"}},
            }
        ],
    )
    info = pod_from_manifest(manifest).pod
    assert info.node_selector == {"disk": "nvme"}
    assert info.affinity and info.affinity.node_affinity and info.affinity.node_affinity.required
    assert info.affinity.node_affinity.required[0].match_expressions[0].values == ("a100",)
    assert info.affinity.node_affinity.preferred[0].weight == 50
    assert (
        info.affinity.pod_anti_affinity
        and info.affinity.pod_anti_affinity.required[0].topology_key == "kubernetes.io/hostname"
    )
    assert info.tolerations[0].value == "gpu"
    assert info.topology_spread_constraints[0].max_skew == 1


def test_gpu_node_with_topology_mig_price_and_spot() -> None:
    topology = (
        '{"devices": ['
        + ",".join(
            f'{{"index": {i}, "numa": {i // 4}, '
            f'"nvlink": [{",".join(str(j) for j in range(4 * (i // 4), 4 * (i // 4) + 4) if j != i)}]}}'
            for i in range(8)
        )
        + "]}"
    )
    manifest = gpu_node(
        gpus=6,
        **{
            "berth.io/gpu-topology": topology,
            "berth.io/gpu-mig": '{"7": {"1g.5gb": 7}}',
            "berth.io/price-per-hour": "32.77",
            "berth.io/carbon-intensity": "120",
        },
    )
    manifest["metadata"]["labels"]["karpenter.sh/capacity-type"] = "spot"
    topo = __import__("json").loads(topology)
    topo["devices"][6]["healthy"] = False
    manifest["metadata"]["annotations"]["berth.io/gpu-topology"] = __import__("json").dumps(topo)
    node = node_from_manifest(manifest)
    assert [d.index for d in node.gpus] == list(range(8))
    assert node.gpus[5].nvlink_peers == (4, 6, 7) and node.gpus[5].numa_node == 1
    assert node.gpus[7].mig[0].profile == "1g.5gb" and node.gpus[7].mig[0].count == 7
    assert not node.gpus[6].healthy
    assert (node.capacity_type, node.price_per_hour, node.carbon_intensity, node.zone) == ("spot", 32.77, 120.0, "z1")
    assert node.gpus[0].model == "A100" and node.gpus[0].memory_mib == 40960


def test_mig_counts_without_layout_are_packed_onto_synthetic_devices() -> None:
    manifest = gpu_node(gpus=2)
    manifest["status"]["allocatable"]["nvidia.com/mig-3g.20gb"] = "2"
    manifest["status"]["allocatable"]["nvidia.com/mig-1g.5gb"] = "1"
    warnings: list[str] = []
    node = node_from_manifest(manifest, warnings=warnings)
    assert [(d.index, [(s.profile, s.count) for s in d.mig]) for d in node.gpus] == [
        (0, []),
        (1, []),
        (2, [("1g.5gb", 1), ("3g.20gb", 2)]),
    ]
    assert warnings and "synthesised" in warnings[0]


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target: Any = obj
    parts = path.split("/")
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return obj


POD_ERRORS = [
    (
        "spec/containers/0/resources/requests/cpu",
        "2 cores",
        "Pod default/train-0: spec.containers[0].resources.requests.cpu: '2 cores' is not a Kubernetes quantity",
    ),
    (
        "metadata/annotations",
        {"gpu-fraction": "1.5"},
        "Pod default/train-0: metadata.annotations.gpu-fraction: '1.5' must be greater than 0 and at most 1",
    ),
    (
        "metadata/annotations",
        {"gpu-fraction": "0"},
        "Pod default/train-0: metadata.annotations.gpu-fraction: '0' must be greater than 0 and at most 1",
    ),
    (
        "metadata/annotations",
        {"gpu-fraction": "0.2505"},
        "Pod default/train-0: metadata.annotations.gpu-fraction: '0.2505' has more than milli precision",
    ),
    (
        "metadata/annotations",
        {"gpu-fraction": "half"},
        "Pod default/train-0: metadata.annotations.gpu-fraction: 'half' is not a number",
    ),
    (
        "metadata/annotations",
        {"berth.io/gpu-locality": "rack"},
        "Pod default/train-0: metadata.annotations.berth.io/gpu-locality: 'rack' must be one of",
    ),
    (
        "metadata/annotations",
        {"berth.io/gpu-devices": "0,x"},
        "Pod default/train-0: metadata.annotations.berth.io/gpu-devices: '0,x' must be comma-separated",
    ),
    (
        "metadata/labels",
        {"gpu": True},
        "Pod default/train-0: metadata.labels.gpu: must be a string (quote it), got True",
    ),
    (
        "spec/containers/0/resources/limits",
        {"nvidia.com/gpu": "0.5"},
        "Pod default/train-0: spec.containers[0].resources.limits.nvidia.com/gpu: '0.5' must be an integer",
    ),
    (
        "spec/priorityClassName",
        "urgent",
        "Pod default/train-0: spec.priorityClassName: no PriorityClass with name urgent was found",
    ),
    (
        "spec/tolerations",
        [{"key": "a", "operator": "Exists", "value": "b"}],
        "Pod default/train-0: spec.tolerations[0]: a toleration with operator Exists must not have a value",
    ),
    (
        "spec/affinity",
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In"}]}]
                }
            }
        },
        "Pod default/train-0: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[0]: operator In needs at least one value",
    ),
    ("spec/containers", [], "Pod default/train-0: spec.containers: must have at least one container"),
]


@pytest.mark.parametrize(
    ("path", "value", "expected"), POD_ERRORS, ids=[e[0] + str(i) for i, e in enumerate(POD_ERRORS)]
)
def test_pod_errors_name_the_object_and_field(path: str, value: Any, expected: str) -> None:
    with pytest.raises(ManifestError) as caught:
        load_documents([_set(pod(), path, value)])
    assert str(caught.value).startswith(expected)


def test_fraction_and_whole_gpu_request_are_exclusive() -> None:
    manifest = pod(containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}])
    manifest["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    with pytest.raises(ManifestError, match="mutually exclusive"):
        pod_from_manifest(manifest)


NODE_ERRORS = [
    (
        "metadata/annotations",
        {"berth.io/gpu-topology": "{nope"},
        "Node gpu-a: metadata.annotations.berth.io/gpu-topology: is not valid JSON",
    ),
    (
        "metadata/annotations",
        {"berth.io/gpu-topology": '{"devices": [{"index": 0, "numa": 0, "nvlink": [5]}]}'},
        "Node gpu-a: metadata.annotations.berth.io/gpu-topology.devices[0].nvlink: peers [5] are not devices",
    ),
    (
        "metadata/annotations",
        {"berth.io/gpu-topology": '{"devices": [{"index": 0, "nvlinks": [1]}]}'},
        "Node gpu-a: metadata.annotations.berth.io/gpu-topology.devices[0].nvlinks: unknown field",
    ),
    (
        "metadata/annotations",
        {"berth.io/gpu-mig": '{"0": {"7g.40gb": 2}}'},
        "Node gpu-a: metadata.annotations.berth.io/gpu-mig.0: uses 14 compute slices; a GPU has 7",
    ),
    (
        "metadata/annotations",
        {"berth.io/price-per-hour": "cheap"},
        "Node gpu-a: metadata.annotations.berth.io/price-per-hour: 'cheap' is not a number",
    ),
    (
        "metadata/labels/karpenter.sh~1capacity-type",
        "preemptible",
        "Node gpu-a: metadata.labels.karpenter.sh/capacity-type: 'preemptible' must be spot, on-demand or reserved",
    ),
    ("status/allocatable/memory", "lots", "Node gpu-a: status.allocatable.memory: 'lots' is not a Kubernetes quantity"),
    (
        "spec/taints",
        [{"key": "dedicated", "value": "gpu", "effect": "NoPlease"}],
        "Node gpu-a: spec.taints[0].effect: Input should be",
    ),
]


@pytest.mark.parametrize(("path", "value", "expected"), NODE_ERRORS, ids=[str(i) for i in range(len(NODE_ERRORS))])
def test_node_errors_name_the_object_and_field(path: str, value: Any, expected: str) -> None:
    manifest = gpu_node()
    if "~1" in path:
        manifest["metadata"]["labels"][path.split("/")[-1].replace("~1", "/")] = value
    else:
        manifest = _set(manifest, path, value)
    with pytest.raises(ManifestError) as caught:
        load_documents([manifest])
    assert str(caught.value).startswith(expected)


def test_document_level_errors() -> None:
    with pytest.raises(ManifestError, match=r"^document 2: kind: 'Deployment' is not supported"):
        load_documents([pod(), {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}])
    with pytest.raises(ManifestError, match=r"^Pod default/train-0: metadata.name: is defined twice"):
        load_documents([pod(), pod()])
    with pytest.raises(ManifestError, match=r"^PodGroup \(document 1\): apiVersion"):
        load_documents([{"apiVersion": "v1", "kind": "PodGroup", "metadata": {"name": "g"}}])


def test_v1_list_policy_objects_and_agent_pool_passthrough() -> None:
    bundle = load_documents(
        [
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "a"}}},
                    {
                        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                        "kind": "PodGroup",
                        "metadata": {"name": "train", "namespace": "ml"},
                        "spec": {"minMember": 4},
                    },
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": {"name": "gpu", "namespace": "ml"},
                        "spec": {
                            "hard": {"requests.nvidia.com/gpu": "8", "limits.memory": "1Ti"},
                            "scopes": ["NotTerminating"],
                            "scopeSelector": {
                                "matchExpressions": [
                                    {"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}
                                ]
                            },
                        },
                    },
                    {
                        "apiVersion": "policy/v1",
                        "kind": "PodDisruptionBudget",
                        "metadata": {"name": "db", "namespace": "ml"},
                        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "db"}}},
                    },
                    {
                        "apiVersion": "v1",
                        "kind": "LimitRange",
                        "metadata": {"name": "lr", "namespace": "ml"},
                        "spec": {"limits": [{"type": "Container", "max": {"cpu": "4"}, "min": {"memory": "1Gi"}}]},
                    },
                    {
                        "apiVersion": "berth.io/v1alpha1",
                        "kind": "AgentPool",
                        "metadata": {"name": "chat", "namespace": "ml"},
                        "spec": {"model": "llama"},
                    },
                ],
            }
        ]
    )
    assert bundle.namespaces[0].labels == {"kubernetes.io/metadata.name": "ml", "team": "a"}
    assert bundle.pod_groups[0].min_member == 4
    quota = bundle.resource_quotas[0]
    assert quota.hard == {"limits.memory": 2**40, "requests.nvidia.com/gpu": 8}
    assert quota.scope_priority_classes == ("low",)
    assert bundle.pod_disruption_budgets[0].min_available == "50%"
    item = bundle.limit_ranges[0].limits[0]
    # Kubernetes' LimitRange defaulting: default <- max, defaultRequest <- default, then min.
    assert (item.default, item.default_request) == ({"cpu": 4000}, {"cpu": 4000, "memory": GiB})
    assert bundle.agent_pools[0].spec == {"model": "llama"}
    assert any("NotTerminating" in w for w in bundle.warnings)


def test_limit_range_defaults_apply_per_container_before_summing() -> None:
    bundle = load_documents(
        [
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": "lr"},
                "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "500m"}, "max": {"cpu": "2"}}]},
            },
            pod(containers=[{"name": "a"}, {"name": "b", "resources": {"requests": {"cpu": "1"}}}]),
            pod("big", containers=[{"name": "a", "resources": {"limits": {"cpu": "3"}}}]),
        ]
    )
    ok, big = bundle.pods
    assert ok.pod.requests == {"cpu": 1500} and ok.rejection is None
    assert big.rejection == 'pods "big" is forbidden: maximum cpu usage per Container is 2, but limit is 3'


def test_conversion_is_deterministic() -> None:
    docs = [gpu_node(), pod()]
    assert load_documents(docs) == load_documents(copy.deepcopy(docs))


def test_counts_are_filled_in_from_described_devices() -> None:
    manifest = gpu_node()
    manifest["status"] = {"allocatable": {"cpu": "8", "memory": "64Gi"}}
    manifest["metadata"]["labels"].pop("nvidia.com/gpu.memory")
    manifest["metadata"]["annotations"] = {
        "berth.io/gpu-topology": '{"devices": [{"index": 0}, {"index": 1, "healthy": false}, {"index": 2}]}',
        "berth.io/gpu-mig": '{"2": {"1g.5gb": 3, "2g.10gb": 2}}',
    }
    node = node_from_manifest(manifest)
    assert node.allocatable == {
        "cpu": 8000,
        "memory": 64 * GiB,
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.5gb": 3,
        "nvidia.com/mig-2g.10gb": 2,
        "pods": 110,
    }
