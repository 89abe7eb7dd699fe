"""Fake GPU nodes: Node API objects with no kubelet behind them, as kube-scheduler's scheduler_perf
benchmark makes them.

Each node gets what a GPU node with NVIDIA's device plugin and GPU Feature Discovery would show
(DESIGN.md §4): capacity and allocatable ``cpu``, ``memory``, ``pods`` and ``nvidia.com/gpu``; the
labels ``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` (MiB), ``nvidia.com/gpu.count``,
``topology.kubernetes.io/zone`` and ``karpenter.sh/capacity-type``; the annotation
``berth.io/gpu-topology`` (NVLink islands of 4 GPUs, one NUMA node per island half); and the
condition ``Ready=True``, so kube-scheduler and Berth consider them. The status goes through the
``status`` subresource, as a kubelet writes it. Every fake node carries the label
``berth.io/fake-node=true`` so :func:`delete_fake_nodes` finds them all.

Nothing refreshes the heartbeat: on a cluster that runs kube-controller-manager the node lifecycle
controller marks them NotReady after ~40 s. Our own control plane (:mod:`berth_dev.devstack.kube`) has
no controller-manager, so they stay Ready.

Speed: requests go out from a thread pool as plain JSON through the client's ``ApiClient``
(skipping the generated model classes, which cost more CPU than the HTTP round trip). Measured
against our own control plane on a shared 2-core machine: 1,000 nodes in 4-8 s, 2,000 in ~12 s.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

FAKE_NODE_LABEL = "berth.io/fake-node"
TOPOLOGY_ANNOTATION = "berth.io/gpu-topology"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_PRODUCT = "NVIDIA-H100-80GB-HBM3"
DEFAULT_ZONES: tuple[str, ...] = ("zone-a", "zone-b", "zone-c")
NVLINK_ISLAND_SIZE = 4

#: ``nvidia.com/gpu.memory`` as GPU Feature Discovery reports it (MiB) for common products.
GPU_MEMORY_MIB: Mapping[str, int] = {
    "NVIDIA-H100-80GB-HBM3": 81559,
    "NVIDIA-H200": 143771,
    "NVIDIA-A100-SXM4-80GB": 81920,
    "NVIDIA-A100-SXM4-40GB": 40960,
    "NVIDIA-L40S": 46068,
    "NVIDIA-L4": 23034,
    "Tesla-T4": 15360,
}


def gpu_memory_mib(product: str) -> int:
    """MiB of one GPU of ``product``: the table above, else the ``<n>GB`` in the name, else 16 GiB."""
    if product in GPU_MEMORY_MIB:
        return GPU_MEMORY_MIB[product]
    match = re.search(r"(\d+)GB", product)
    return int(match.group(1)) * 1024 if match else 16 * 1024


def gpu_topology(gpus: int, island_size: int = NVLINK_ISLAND_SIZE) -> dict[str, Any]:
    """The ``berth.io/gpu-topology`` document: NVLink islands of ``island_size`` consecutive GPUs.

    8 GPUs: islands {0-3} on NUMA node 0 and {4-7} on NUMA node 1. The islands are spread evenly
    over two NUMA nodes (one NUMA node when there is a single island).
    """
    islands = max(1, -(-gpus // island_size))
    devices = []
    for index in range(gpus):
        island = index // island_size
        members = range(island * island_size, min(gpus, (island + 1) * island_size))
        devices.append(
            {
                "index": index,
                "numa": island * 2 // islands if islands > 1 else 0,
                "nvlink": [peer for peer in members if peer != index],
            }
        )
    return {"devices": devices}


def parse_taint(taint: str | Mapping[str, str]) -> dict[str, str]:
    """``"key=value:Effect"`` or ``"key:Effect"`` (kubectl's syntax) or a mapping -> a taint dict."""
    if isinstance(taint, Mapping):
        result = {k: str(v) for k, v in taint.items() if v is not None and k in ("key", "value", "effect")}
    else:
        match = re.fullmatch(r"([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)", taint.strip())
        if not match:
            raise ValueError(f"not a taint: {taint!r} (want key=value:Effect or key:Effect)")
        result = {"key": match.group(1), "effect": match.group(3)}
        if match.group(2):
            result["value"] = match.group(2)
    if "key" not in result or result.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise ValueError(f"a taint needs a key and an effect NoSchedule|PreferNoSchedule|NoExecute: {taint!r}")
    return result


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


def parse_label(label: str) -> tuple[str, str]:
    """``"key=value"`` (kubectl's syntax; ``key`` may have a DNS-subdomain prefix, ``value`` may be
    empty) -> ``(key, value)``; ValueError, saying what is wrong, for anything Kubernetes would
    refuse as a label."""
    key, sep, value = label.partition("=")
    if not sep:
        raise ValueError(f"not a label: {label!r} (want KEY=VALUE)")
    prefix, slash, name = key.rpartition("/")
    if slash and (not re.fullmatch(_LABEL_PREFIX, prefix) or len(prefix) > 253):
        raise ValueError(f"label key {key!r}: the prefix must be a DNS subdomain (lower case, at most 253 characters)")
    if not re.fullmatch(_LABEL_NAME, name):
        raise ValueError(
            f"label key {key!r}: the name must be 1-63 characters of A-Z, a-z, 0-9, '-', '_', '.', "
            "beginning and ending with a letter or digit"
        )
    if value and not re.fullmatch(_LABEL_NAME, value):
        raise ValueError(
            f"label value {value!r}: at most 63 characters of A-Z, a-z, 0-9, '-', '_', '.', beginning "
            "and ending with a letter or digit"
        )
    return key, value


@dataclass(frozen=True)
class FakeNode:
    """One node's objects: the Node to create and the status to write afterwards."""

    name: str
    node: dict[str, Any]
    status: dict[str, Any]


def is_spot(index: int, spot_fraction: float) -> bool:
    """Spread spot nodes evenly: node ``i`` is spot when floor((i+1)f) > floor(i f)."""
    return int((index + 1) * spot_fraction + 1e-9) > int(index * spot_fraction + 1e-9)


def fake_node(
    index: int,
    *,
    gpus: int = 8,
    product: str = DEFAULT_PRODUCT,
    prefix: str = "gpu-",
    zones: Sequence[str] = DEFAULT_ZONES,
    spot_fraction: float = 0.0,
    taints: Iterable[str | Mapping[str, str]] = (),
    cpu: str = "192",
    memory: str = "2Ti",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    name_width: int = 4,
) -> FakeNode:
    """The objects for node number ``index`` (see :func:`create_fake_nodes` for the parameters)."""
    name = f"{prefix}{index:0{name_width}d}"
    zone = zones[index % len(zones)]
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "1Ti"}
    if gpus:
        capacity[GPU_RESOURCE] = str(gpus)
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": "spot" if is_spot(index, spot_fraction) else "on-demand",
        FAKE_NODE_LABEL: "true",
    }
    annotations = {}
    if gpus:
        node_labels.update(
            {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(gpu_memory_mib(product)),
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.present": "true",
            }
        )
        annotations[TOPOLOGY_ANNOTATION] = json.dumps(gpu_topology(gpus), separators=(",", ":"))
    node_labels.update(labels or {})
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": annotations},
        "spec": {"taints": [parse_taint(t) for t in taints]},
    }
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    status = {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [
            condition("Ready", "True", "KubeletReady", "fake node (berth_dev.devstack.fakenodes): no kubelet"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "fake node"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "fake node"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "fake node"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": f"10.{128 + (index >> 16) % 128}.{(index >> 8) & 255}.{index & 255}"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "v1.34.0-fake",
            "containerRuntimeVersion": "fake://0",
            "kernelVersion": "",
            "osImage": "fake",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kubeProxyVersion": "",
        },
    }
    return FakeNode(name, node, status)


# ------------------------------------------------------------------------------------------------
# Talking to the apiserver
# ------------------------------------------------------------------------------------------------


def _call(
    api: ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    query: Sequence[tuple[str, str]] = (),
    timeout: float = 30.0,
) -> Any:
    """One request through ``api`` (its auth and TLS settings) with a plain JSON body; the decoded
    answer. Non-2xx answers raise the client's usual ``ApiException`` subclasses."""
    from kubernetes.client.exceptions import ApiException

    _, url, headers, serialized, _ = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=serialized, _request_timeout=timeout)
    data = response.read()
    if not 200 <= response.status < 300:
        text = data.decode(errors="replace") if data else None
        ApiException.from_response(http_resp=response, body=text, data=None)
        raise ApiException(http_resp=response)  # from_response raises; this keeps type checkers content
    return json.loads(data) if data else None


def _apply_one(api: ApiClient, fake: FakeNode, *, timeout: float) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        created = _call(api, "POST", "/api/v1/nodes", fake.node, timeout=timeout)
    except ApiException as exc:
        if exc.status != 409:
            raise
        # Already there (a second run): bring labels, annotations and taints up to date.
        created = _call(
            api,
            "PATCH",
            f"/api/v1/nodes/{fake.name}",
            {
                "metadata": {
                    "labels": fake.node["metadata"]["labels"],
                    "annotations": fake.node["metadata"]["annotations"],
                },
                "spec": {"taints": fake.node["spec"]["taints"] or None},
            },
            content_type="application/merge-patch+json",
            timeout=timeout,
        )
    # An apiserver with the TaintNodesByCondition admission plugin (any real cluster) adds
    # node.kubernetes.io/not-ready on create; only the node lifecycle controller would lift it.
    taints = (created or {}).get("spec", {}).get("taints") or []
    if any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
        wanted = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
        _call(
            api,
            "PATCH",
            f"/api/v1/nodes/{fake.name}",
            {"spec": {"taints": wanted or None}},
            content_type="application/merge-patch+json",
            timeout=timeout,
        )
    _call(
        api,
        "PATCH",
        f"/api/v1/nodes/{fake.name}/status",
        {"status": fake.status},
        content_type="application/merge-patch+json",
        timeout=timeout,
    )


def create_fake_nodes(
    api_client: ApiClient,
    count: int,
    gpus: int = 8,
    product: str = DEFAULT_PRODUCT,
    prefix: str = "gpu-",
    zones: Sequence[str] = DEFAULT_ZONES,
    spot_fraction: float = 0.0,
    taints: Iterable[str | Mapping[str, str]] = (),
    *,
    start: int = 0,
    cpu: str = "192",
    memory: str = "2Ti",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    workers: int | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Create ``count`` fake GPU nodes named ``<prefix>0000``, ``<prefix>0001``... and return the names.

    ``zones`` are assigned round-robin; ``spot_fraction`` of the nodes (spread evenly) are
    ``karpenter.sh/capacity-type=spot``, the rest ``on-demand``; ``taints`` (``"key=value:Effect"``
    or dicts) and ``labels`` (added to, or overriding, the GPU Feature Discovery ones) go on every node; ``gpus=0``
    makes CPU-only nodes. ``start`` numbers a further batch. Existing nodes of the same names are updated, not
    duplicated. Requests run on ``workers``
    threads (default: the client's connection-pool size, at most 16). Each node costs two
    requests (create, then status), three on clusters that add the not-ready taint.
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    if not 0.0 <= spot_fraction <= 1.0:
        raise ValueError("spot_fraction must be within [0, 1]")
    taint_list = [parse_taint(t) for t in taints]
    width = max(4, len(str(start + count - 1)))
    fakes = [
        fake_node(
            i,
            gpus=gpus,
            product=product,
            prefix=prefix,
            zones=zones,
            spot_fraction=spot_fraction,
            taints=taint_list,
            cpu=cpu,
            memory=memory,
            pods=pods,
            labels=labels,
            name_width=width,
        )
        for i in range(start, start + count)
    ]
    pool_size = getattr(api_client.configuration, "connection_pool_maxsize", None) or 10
    threads = workers or max(1, min(16, pool_size))
    if count <= 1 or threads == 1:
        for fake in fakes:
            _apply_one(api_client, fake, timeout=timeout)
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fake-nodes") as pool:
            for future in [pool.submit(_apply_one, api_client, fake, timeout=timeout) for fake in fakes]:
                future.result()  # re-raise the first failure
    return [fake.name for fake in fakes]


def delete_fake_nodes(
    api_client: ApiClient, *, label_selector: str = f"{FAKE_NODE_LABEL}=true", timeout: float = 60.0
) -> int:
    """Delete every node matching ``label_selector`` (default: all fake nodes) in one request.

    Returns how many matched. Node deletion is immediate: fake nodes have no finalizers.
    """
    listed = _call(api_client, "GET", "/api/v1/nodes", query=[("labelSelector", label_selector)], timeout=timeout)
    matched = len(listed.get("items", []))
    if matched:
        _call(api_client, "DELETE", "/api/v1/nodes", query=[("labelSelector", label_selector)], timeout=timeout)
    return matched


__all__ = [
    "DEFAULT_PRODUCT",
    "FAKE_NODE_LABEL",
    "TOPOLOGY_ANNOTATION",
    "create_fake_nodes",
    "delete_fake_nodes",
    "fake_node",
    "gpu_memory_mib",
    "gpu_topology",
    "parse_label",
    "parse_taint",
]
