"""Cluster policy objects the scheduler obeys: gangs, priorities, quotas, limits, disruption budgets.

Each mirrors the Kubernetes object of the same name (scheduling-relevant fields only, canonical
units). They travel on ``berth.cluster.policies.v1`` keyed by ``kind/namespace/name``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from ._base import DnsLabel, FrozenModel, NonNegativeInt, Quantities, StrMap, UtcDatetime
from .cluster import LabelSelector


class NamespaceInfo(FrozenModel):
    """A Namespace's labels, which inter-pod affinity terms select namespaces by
    (``namespaceSelector``). As on the apiserver, ``kubernetes.io/metadata.name`` is always among
    them (the converters add it)."""

    name: DnsLabel
    labels: StrMap = Field(default_factory=dict)


class PodGroupInfo(FrozenModel):
    """scheduler-plugins ``PodGroup`` (scheduling.x-k8s.io/v1alpha1): schedule all or nothing."""

    namespace: DnsLabel
    name: DnsLabel
    min_member: Annotated[int, Field(ge=1)]
    schedule_timeout_seconds: NonNegativeInt | None = None


class PriorityClassInfo(FrozenModel):
    name: DnsLabel
    value: int
    global_default: bool = False
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"


class ResourceQuotaInfo(FrozenModel):
    """``hard`` limits over the sum of requests in the namespace. Keys as in Kubernetes:
    ``requests.cpu``, ``cpu``, ``requests.nvidia.com/gpu``, ``pods``, ``count/pods``..., values in
    canonical units of the underlying resource."""

    namespace: DnsLabel
    name: DnsLabel
    hard: Quantities
    scope_priority_classes: tuple[str, ...] = ()
    """scopeSelector on PriorityClass (operator In); empty = applies to every pod."""


class LimitRangeItem(FrozenModel):
    type: Literal["Container", "Pod"] = "Container"
    default: Quantities = Field(default_factory=dict)
    default_request: Quantities = Field(default_factory=dict)
    min: Quantities = Field(default_factory=dict)
    max: Quantities = Field(default_factory=dict)


class LimitRangeInfo(FrozenModel):
    namespace: DnsLabel
    name: DnsLabel
    limits: tuple[LimitRangeItem, ...]


class PodDisruptionBudgetInfo(FrozenModel):
    """At most one of ``min_available`` / ``max_unavailable``; ints or percentages ("50%")."""

    namespace: DnsLabel
    name: DnsLabel
    selector: LabelSelector
    min_available: int | str | None = None
    max_unavailable: int | str | None = None


def _sorted_json(value: Any) -> Any:
    # Same reason as StrMap: JSON objects are unordered (Postgres JSONB reorders keys), so keep
    # every nested object's keys sorted and a replayed event equal to the live one.
    if isinstance(value, dict):
        return {key: _sorted_json(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_json(item) for item in value]
    return value


class AgentPoolInfo(FrozenModel):
    """Berth's ``AgentPool`` (berth.io/v1alpha1): an inference pool — model, replica bounds, TTFT
    SLO, tokens per second per replica, GPU requirements, replica template.

    ``spec`` is the object's spec as written, camelCase keys as the CustomResourceDefinition
    (``deploy/helm/berth/crds/agentpools.berth.io.yaml``) defines them, nested keys sorted. Pools
    have no typed model yet; consumers read the keys they know (``tokensPerSecondPerReplica``,
    ``ttftSloMs``, ``minReplicas``, ``maxReplicas``, ``gpuRequirements`` ...)."""

    namespace: DnsLabel
    name: DnsLabel
    spec: Annotated[dict[str, Any], AfterValidator(_sorted_json)] = Field(default_factory=dict)


PolicyKind = Literal[
    "PodGroup", "PriorityClass", "ResourceQuota", "LimitRange", "PodDisruptionBudget", "AgentPool", "Namespace"
]
"""The kinds on the policies topic. ``AgentPool`` and ``Namespace`` were added later: consumers
that do not know a kind must ignore its events."""

_FIELD_OF_KIND = {
    "PodGroup": "pod_group",
    "PriorityClass": "priority_class",
    "ResourceQuota": "resource_quota",
    "LimitRange": "limit_range",
    "PodDisruptionBudget": "pod_disruption_budget",
    "AgentPool": "agent_pool",
    "Namespace": "namespace_info",
}


class PolicyObserved(FrozenModel):
    type: Literal["io.berth.cluster.policy-observed.v1"] = "io.berth.cluster.policy-observed.v1"
    kind: PolicyKind
    pod_group: PodGroupInfo | None = None
    priority_class: PriorityClassInfo | None = None
    resource_quota: ResourceQuotaInfo | None = None
    limit_range: LimitRangeInfo | None = None
    pod_disruption_budget: PodDisruptionBudgetInfo | None = None
    agent_pool: AgentPoolInfo | None = None
    namespace_info: NamespaceInfo | None = None
    observed_at: UtcDatetime

    @model_validator(mode="after")
    def _carries_its_kind(self) -> PolicyObserved:
        # Without it the event is unusable (no name, no key): refuse it here, at the consumer's
        # door, rather than let ``obj`` fail in the middle of a service's fold.
        field = _FIELD_OF_KIND[self.kind]
        if getattr(self, field) is None:
            raise ValueError(f"a {self.kind} event must carry {field}")
        return self

    @property
    def obj(self) -> FrozenModel:
        field = _FIELD_OF_KIND[self.kind]
        value: FrozenModel | None = getattr(self, field)
        if value is None:
            raise ValueError(f"{self.kind} event without its {field}")
        return value

    @property
    def partition_key(self) -> str:
        obj = self.obj
        return f"{self.kind}/{getattr(obj, 'namespace', '')}/{obj.name}"  # type: ignore[attr-defined]  # every policy object has a name

    @property
    def subject(self) -> str:
        return self.partition_key


class PolicyRemoved(FrozenModel):
    type: Literal["io.berth.cluster.policy-removed.v1"] = "io.berth.cluster.policy-removed.v1"
    kind: PolicyKind
    namespace: str = ""
    name: DnsLabel
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def subject(self) -> str:
        return self.partition_key


PolicyEvent = Annotated[PolicyObserved | PolicyRemoved, Field(discriminator="type")]
