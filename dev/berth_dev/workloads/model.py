"""What a workload is: a cluster to start from and what happens to it over simulated time.

Times are seconds of simulated time from the start of the run (``at_s``). A workload says nothing
about wall-clock time; the player maps simulated seconds to wall time (speed factor, fixed rate or
as fast as possible). Everything here is immutable and deterministic, so the same file or the same
generator seed always yields equal workloads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from berth.schemas.cluster import NodeInfo, PodInfo
from berth.schemas.policy import (
    LimitRangeInfo,
    NamespaceInfo,
    PodDisruptionBudgetInfo,
    PodGroupInfo,
    PolicyObserved,
    PriorityClassInfo,
    ResourceQuotaInfo,
)

from berth.kube.replicas import AgentPool

ANNOTATION_ARRIVAL = "sim.berth.io/arrival-seconds"
"""Pod annotation: when the pod is created, in simulated seconds from the start (default 0)."""
ANNOTATION_RUN = "sim.berth.io/run-seconds"
"""Pod annotation: how long the pod runs once bound before it is deleted (default: forever)."""


PolicyObject = (
    NamespaceInfo | PodGroupInfo | PriorityClassInfo | ResourceQuotaInfo | LimitRangeInfo | PodDisruptionBudgetInfo
)
_POLICY_KINDS: dict[type, tuple[str, str]] = {
    NamespaceInfo: ("Namespace", "namespace_info"),
    PodGroupInfo: ("PodGroup", "pod_group"),
    PriorityClassInfo: ("PriorityClass", "priority_class"),
    ResourceQuotaInfo: ("ResourceQuota", "resource_quota"),
    LimitRangeInfo: ("LimitRange", "limit_range"),
    PodDisruptionBudgetInfo: ("PodDisruptionBudget", "pod_disruption_budget"),
}


def policy_observed(obj: PolicyObject, at: datetime) -> PolicyObserved:
    """The event announcing a policy object, observed at ``at``."""
    kind, field_name = _POLICY_KINDS[type(obj)]
    return PolicyObserved(kind=kind, observed_at=at, **{field_name: obj})  # type: ignore[arg-type]  # the field named for the object's kind


def policy_kind(obj: PolicyObject) -> str:
    return _POLICY_KINDS[type(obj)][0]


class WorkloadError(ValueError):
    """A workload Berth cannot play; the message names the file, line or object, and the field."""


@dataclass(frozen=True)
class TimedPod:
    """A pod created at ``at_s``. ``run_s``: deleted that long after it is bound (None: never).

    A pod whose manifest already names a node (``spec.nodeName``) is created bound: it holds
    capacity from the start and is never scheduled.
    """

    pod: PodInfo
    at_s: float = 0.0
    run_s: float | None = None


@dataclass(frozen=True)
class SpotNotice:
    """At ``at_s`` the cloud announces it reclaims spot node ``node`` ``notice_s`` later; at the
    deadline the node is removed and its pods are deleted."""

    node: str
    at_s: float
    notice_s: float = 120.0
    provider: str = "aws"


@dataclass(frozen=True)
class QueueLagSample:
    """One token-queue report of an inference pool (what a gateway publishes)."""

    pool: str
    namespace: str
    at_s: float
    tokens_in_queue: int
    token_rate: float
    active_sessions: int = 0
    mean_context_tokens: int | None = None


@dataclass(frozen=True)
class NodeRemoval:
    """Node ``node`` leaves the cluster at ``at_s`` (decommissioned); its pods are deleted."""

    node: str
    at_s: float


@dataclass(frozen=True)
class Workload:
    """A cluster and its future.

    ``nodes`` and ``policies`` exist from the start (published first, in this order); ``pods``
    arrive at their ``at_s`` (sorted by time, then input order); the timeline events happen at
    theirs. ``warnings`` are notes from loading that did not stop it.
    """

    name: str
    nodes: tuple[NodeInfo, ...] = ()
    policies: tuple[PolicyObject, ...] = ()
    pods: tuple[TimedPod, ...] = ()
    pools: tuple[AgentPool, ...] = ()
    spot_notices: tuple[SpotNotice, ...] = ()
    queue_lag: tuple[QueueLagSample, ...] = ()
    node_removals: tuple[NodeRemoval, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        """The time of the last scheduled happening (arrivals and timeline; not run durations)."""
        times = [p.at_s for p in self.pods]
        times += [n.at_s + n.notice_s for n in self.spot_notices]
        times += [q.at_s for q in self.queue_lag] + [r.at_s for r in self.node_removals]
        return max(times, default=0.0)

    def summary(self) -> dict[str, Any]:
        """Counts for people and logs: nodes, GPUs, pods by kind, timeline events."""
        whole = sum(1 for t in self.pods if t.pod.whole_gpus)
        fractional = sum(1 for t in self.pods if t.pod.gpu_fraction_milli is not None)
        mig = sum(1 for t in self.pods if any(r.startswith("nvidia.com/mig-") for r in t.pod.requests))
        return {
            "name": self.name,
            "nodes": len(self.nodes),
            "gpu_nodes": sum(1 for n in self.nodes if n.gpus),
            "gpus": sum(len(n.gpus) for n in self.nodes),
            "pods": len(self.pods),
            "whole_gpu_pods": whole,
            "fractional_gpu_pods": fractional,
            "mig_pods": mig,
            "cpu_only_pods": len(self.pods) - whole - fractional - mig,
            "gang_pods": sum(1 for t in self.pods if t.pod.pod_group),
            "pod_groups": sum(1 for p in self.policies if isinstance(p, PodGroupInfo)),
            "agent_pools": len(self.pools),
            "spot_notices": len(self.spot_notices),
            "queue_lag_samples": len(self.queue_lag),
            "node_removals": len(self.node_removals),
            "duration_s": round(self.duration_s, 3),
        }

    def with_rate(self, pods_per_second: float) -> Workload:
        """The same workload with pods arriving evenly at ``pods_per_second`` in their order
        (timeline events keep their times). For throughput benchmarks."""
        if pods_per_second <= 0:
            raise WorkloadError(f"rate must be positive, got {pods_per_second}")
        pods = tuple(TimedPod(t.pod, i / pods_per_second, t.run_s) for i, t in enumerate(self.pods))
        return replace(self, pods=pods)

    def limited(self, max_pods: int) -> Workload:
        """The workload's first ``max_pods`` pods (in arrival order), everything else unchanged."""
        return replace(self, pods=self.pods[:max_pods])


def sort_pods(pods: list[TimedPod]) -> tuple[TimedPod, ...]:
    """Arrival order: by time, then input order (``sorted`` is stable)."""
    return tuple(sorted(pods, key=lambda t: t.at_s))
