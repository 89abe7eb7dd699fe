"""Kubernetes manifests (camelCase dicts as parsed from YAML/JSON) → Berth's contract models.

One function per kind turns an object into the model the decision core consumes
(:class:`~berth.schemas.cluster.PodInfo`, :class:`~berth.schemas.cluster.NodeInfo`, the policy
models), and :func:`load_documents` converts a whole file's worth of objects in dependency order
(PriorityClasses and LimitRanges before the pods that need them).

Contract:

- Every rejection is a :class:`ManifestError` whose text names the object and the field path, e.g.
  ``Pod default/train-0: spec.containers[0].resources.requests.cpu: '2 cores' is not a Kubernetes
  quantity``. Nothing is silently dropped: a field Berth does not model either is irrelevant to
  scheduling (ignored by design, such as images or probes) or produces a warning in
  :attr:`ManifestBundle.warnings`.
- A pod's ``requests`` are computed as kube-scheduler does after API defaulting (a request
  defaults to its limit) and LimitRanger admission (per-container defaults, before summing).
- Conversion is deterministic: no clock (a missing ``creationTimestamp`` becomes the Unix epoch)
  and no randomness (a missing ``uid`` is derived from the object's namespace and name).

Berth's own annotations (the manifest face of fields Kubernetes has no place for):

======================================  ============================================================
``gpu-fraction`` (pod)                  share of ONE GPU, ``"0.25"``; milli precision, 0 < f <= 1
``gpu-memory`` (pod)                    GPU memory the share needs, MiB
``berth.io/gpu-locality`` (pod)         ``any`` | ``same-node`` | ``same-socket`` | ``nvlink``
``berth.io/gpu-devices`` (pod)          device indices a bound pod holds, ``"0,1"``
``berth.io/gpu-topology`` (node)        JSON ``{"devices": [{"index": 0, "numa": 0, "nvlink": [1]}]}``
``berth.io/gpu-mig`` (node)             JSON ``{"7": {"1g.5gb": 7}}``: device index → profile → count
``berth.io/price-per-hour`` (node)      price of the node per hour (any currency, used to compare)
``berth.io/carbon-intensity`` (node)    grid carbon intensity, gCO2eq/kWh
======================================  ============================================================

The package is split by kind: :mod:`.common` (errors, annotation and label names, the field
reader), :mod:`.selectors` (affinity, tolerations, spread), :mod:`.pods`, :mod:`.nodes` with
:mod:`.gpus`, :mod:`.policies`, and :mod:`.bundle` (whole files).
"""

from berth.schemas.policy import NamespaceInfo

from .bundle import ManifestBundle, load_documents
from .common import (
    ANNOTATION_CARBON,
    ANNOTATION_GPU_DEVICES,
    ANNOTATION_GPU_FRACTION,
    ANNOTATION_GPU_LOCALITY,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPU_MIG,
    ANNOTATION_GPU_TOPOLOGY,
    ANNOTATION_PRICE,
    DEFAULT_MAX_PODS,
    EPOCH,
    GPU,
    LABEL_CAPACITY_TYPE,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_POD_GROUP,
    LABEL_REGION,
    LABEL_ZONE,
    MIG_PREFIX,
    ManifestError,
)
from .nodes import node_from_manifest
from .pods import PodManifest, pod_from_manifest
from .policies import (
    AgentPoolManifest,
    ToolBindingManifest,
    agent_pool_from_manifest,
    limit_range_from_manifest,
    namespace_from_manifest,
    pdb_from_manifest,
    pod_group_from_manifest,
    priority_class_from_manifest,
    resource_quota_from_manifest,
    tool_binding_from_manifest,
)

__all__ = [
    "ANNOTATION_CARBON",
    "ANNOTATION_GPU_DEVICES",
    "ANNOTATION_GPU_FRACTION",
    "ANNOTATION_GPU_LOCALITY",
    "ANNOTATION_GPU_MEMORY",
    "ANNOTATION_GPU_MIG",
    "ANNOTATION_GPU_TOPOLOGY",
    "ANNOTATION_PRICE",
    "DEFAULT_MAX_PODS",
    "EPOCH",
    "GPU",
    "LABEL_CAPACITY_TYPE",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_PRODUCT",
    "LABEL_POD_GROUP",
    "LABEL_REGION",
    "LABEL_ZONE",
    "MIG_PREFIX",
    "AgentPoolManifest",
    "ManifestBundle",
    "ManifestError",
    "NamespaceInfo",
    "PodManifest",
    "ToolBindingManifest",
    "agent_pool_from_manifest",
    "limit_range_from_manifest",
    "load_documents",
    "namespace_from_manifest",
    "node_from_manifest",
    "pdb_from_manifest",
    "pod_from_manifest",
    "pod_group_from_manifest",
    "priority_class_from_manifest",
    "resource_quota_from_manifest",
    "tool_binding_from_manifest",
]
