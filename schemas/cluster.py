"""Cluster facts: pods and nodes as the scheduler needs them.

These are the scheduling-relevant parts of Kubernetes Pods and Nodes, in canonical units (see
:mod:`berth.schemas.quantity`). Field meanings follow the Kubernetes API of the same name; where
Berth adds something (GPU devices, fractions, prices) the docstring says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ._base import DnsLabel, FrozenModel, NonNegativeInt, Quantities, StrMap, UtcDatetime

# --- label selectors -------------------------------------------------------------------------

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class LabelSelectorRequirement(FrozenModel):
    key: str = Field(min_length=1)
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(FrozenModel):
    """metav1.LabelSelector: all of ``match_labels`` and ``match_expressions`` must hold."""

    match_labels: StrMap = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


class NodeSelectorRequirement(FrozenModel):
    key: str = Field(min_length=1)
    operator: NodeSelectorOperator
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> NodeSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        if self.operator in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise ValueError(f"operator {self.operator} takes exactly one integer value")
            try:
                int(self.values[0])
            except ValueError as exc:
                raise ValueError(f"operator {self.operator} needs an integer value, got {self.values[0]!r}") from exc
        return self


class NodeSelectorTerm(FrozenModel):
    """Expressions (and fields) of one term are ANDed; terms of a selector are ORed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class PreferredSchedulingTerm(FrozenModel):
    weight: Annotated[int, Field(ge=1, le=100)]
    preference: NodeSelectorTerm


class NodeAffinity(FrozenModel):
    required: tuple[NodeSelectorTerm, ...] | None = None
    """requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms; None = no requirement."""
    preferred: tuple[PreferredSchedulingTerm, ...] = ()


class PodAffinityTerm(FrozenModel):
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    topology_key: str = Field(min_length=1)
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


class WeightedPodAffinityTerm(FrozenModel):
    weight: Annotated[int, Field(ge=1, le=100)]
    term: PodAffinityTerm


class PodAffinity(FrozenModel):
    """Used for both podAffinity and podAntiAffinity."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()


class Affinity(FrozenModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(FrozenModel):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect


class Toleration(FrozenModel):
    """An empty ``key`` with operator ``Exists`` tolerates every taint (of ``effect``, if set)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists must not have a value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key must use operator Exists")
        return self


class TopologySpreadConstraint(FrozenModel):
    max_skew: Annotated[int, Field(ge=1)]
    topology_key: str = Field(min_length=1)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: Annotated[int, Field(ge=1)] | None = None
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"
    match_label_keys: tuple[str, ...] = ()


class OwnerReference(FrozenModel):
    api_version: str = ""
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


GpuLocality = Literal["any", "same-node", "same-socket", "nvlink"]

# --- pods --------------------------------------------------------------------------------------


class PodInfo(FrozenModel):
    """A pod as the scheduler sees it.

    ``requests`` are the effective requests in canonical units (the larger of the sum of the
    containers and any init container, plus overhead, as kube-scheduler computes them).
    ``gpu_fraction_milli`` / ``gpu_memory_mib`` come from the ``gpu-fraction`` / ``gpu-memory``
    annotations (a share of ONE device); ``gpu_devices`` are the device indices the pod holds
    once bound (Berth's annotation ``berth.io/gpu-devices``).
    """

    uid: str = Field(min_length=1)
    namespace: DnsLabel
    name: DnsLabel
    labels: StrMap = Field(default_factory=dict)
    annotations: StrMap = Field(default_factory=dict)
    scheduler_name: str = "default-scheduler"
    priority: int = 0
    priority_class_name: str | None = None
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    requests: Quantities = Field(default_factory=dict)
    gpu_fraction_milli: Annotated[int, Field(ge=1, le=1000)] | None = None
    gpu_memory_mib: NonNegativeInt | None = None
    gpu_locality: GpuLocality = "any"
    node_selector: StrMap = Field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...] = ()
    pod_group: str | None = None
    """The gang this pod belongs to (label ``scheduling.x-k8s.io/pod-group``)."""
    owner: OwnerReference | None = None
    node_name: str | None = None
    """Set when the pod is bound; such a pod consumes capacity on that node."""
    gpu_devices: tuple[NonNegativeInt, ...] = ()
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] = "Pending"
    creation_time: UtcDatetime

    @field_validator("gpu_devices")
    @classmethod
    def _unique_devices(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"gpu_devices has duplicates: {list(value)}")
        return tuple(sorted(value))

    @property
    def key(self) -> str:
        """``namespace/name``: how users and kube messages name a pod."""
        return f"{self.namespace}/{self.name}"

    @property
    def whole_gpus(self) -> int:
        return self.requests.get("nvidia.com/gpu", 0)


# --- nodes -------------------------------------------------------------------------------------


class MigSlice(FrozenModel):
    """One MIG instance carved from a device, e.g. profile ``1g.5gb``."""

    profile: str = Field(pattern=r"^[0-9]+g\.[0-9]+gb$")
    count: Annotated[int, Field(ge=1)] = 1


class GpuDevice(FrozenModel):
    """One physical GPU of a node (Berth's per-device model; Kubernetes only counts GPUs)."""

    index: NonNegativeInt
    model: str = ""
    memory_mib: NonNegativeInt = 0
    numa_node: NonNegativeInt = 0
    nvlink_peers: tuple[NonNegativeInt, ...] = ()
    pcie_switch: str | None = None
    mig: tuple[MigSlice, ...] = ()
    """The MIG layout; non-empty means the device is partitioned and serves only MIG slices."""
    healthy: bool = True


class NodeInfo(FrozenModel):
    """A node as the scheduler sees it. ``allocatable`` is what pods may request in total."""

    name: DnsLabel
    uid: str = ""
    labels: StrMap = Field(default_factory=dict)
    annotations: StrMap = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    capacity: Quantities = Field(default_factory=dict)
    allocatable: Quantities = Field(default_factory=dict)
    gpus: tuple[GpuDevice, ...] = ()
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    price_per_hour: Annotated[float, Field(ge=0)] | None = None
    carbon_intensity: Annotated[float, Field(ge=0)] | None = None
    """Grid carbon intensity where the node runs, in gCO2eq/kWh."""
    zone: str | None = None
    region: str | None = None

    @field_validator("gpus")
    @classmethod
    def _device_indices_unique(cls, value: tuple[GpuDevice, ...]) -> tuple[GpuDevice, ...]:
        indices = [device.index for device in value]
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU device indices must be unique, got {indices}")
        for device in value:
            unknown = [peer for peer in device.nvlink_peers if peer not in indices]
            if unknown:
                raise ValueError(f"GPU {device.index} has NVLink peers {unknown} that are not devices")
        return tuple(sorted(value, key=lambda device: device.index))


# --- events ------------------------------------------------------------------------------------


class AboutOnePod:
    """Kafka key and CloudEvents subject of an event that carries one pod (its ``pod`` field)."""

    if TYPE_CHECKING:  # the field of the event model this is mixed into (no field of its own)
        pod: PodInfo

    @property
    def partition_key(self) -> str:
        return self.pod.uid

    @property
    def subject(self) -> str:
        return self.pod.key


class PodObserved(AboutOnePod, FrozenModel):
    """A pod was created or changed (including being bound to a node)."""

    type: Literal["io.berth.cluster.pod-observed.v1"] = "io.berth.cluster.pod-observed.v1"
    pod: PodInfo
    resource_version: str = ""
    observed_at: UtcDatetime


class PodDeleted(FrozenModel):
    """A pod is gone; whatever it held on its node is free again."""

    type: Literal["io.berth.cluster.pod-deleted.v1"] = "io.berth.cluster.pod-deleted.v1"
    uid: str = Field(min_length=1)
    namespace: DnsLabel
    name: DnsLabel
    node_name: str | None = None
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.uid

    @property
    def subject(self) -> str:
        return f"{self.namespace}/{self.name}"


class NodeObserved(FrozenModel):
    """A node was added or changed (labels, taints, cordon, capacity, GPU layout)."""

    type: Literal["io.berth.cluster.node-observed.v1"] = "io.berth.cluster.node-observed.v1"
    node: NodeInfo
    resource_version: str = ""
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.node.name

    @property
    def subject(self) -> str:
        return self.node.name


class NodeRemoved(FrozenModel):
    type: Literal["io.berth.cluster.node-removed.v1"] = "io.berth.cluster.node-removed.v1"
    name: DnsLabel
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.name

    @property
    def subject(self) -> str:
        return self.name


PodEvent = Annotated[PodObserved | PodDeleted, Field(discriminator="type")]
NodeEvent = Annotated[NodeObserved | NodeRemoved, Field(discriminator="type")]
