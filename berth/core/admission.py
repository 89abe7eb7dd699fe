"""Admission as the Kubernetes API server would do it: LimitRange defaults and bounds, ResourceQuota.

Kubernetes admits a pod before any scheduler sees it. Berth's ``simulate`` (and anything else that
feeds the core raw manifests instead of already admitted pods) must therefore replay the two
admission plugins that change or reject pods on resource grounds:

- **LimitRanger**: fills in default requests/limits per container (before the requests are summed
  into the pod's effective request), then rejects containers or pods outside ``min``/``max``.
- **ResourceQuota**: rejects a pod whose requests would push a namespace quota past ``hard``.

Everything here is pure: inputs are values, results are values, rejections are messages (the
wording of kube-apiserver's own errors, so a user can paste them into a search engine), never
exceptions. Quantities are canonical integers (:mod:`berth.schemas.quantity`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from berth.schemas.policy import LimitRangeInfo, LimitRangeItem, ResourceQuotaInfo
from berth.schemas.quantity import format_canonical

__all__ = [
    "ContainerResources",
    "PodResources",
    "QuotaDecision",
    "QuotaLedger",
    "apply_limit_ranges",
    "forbidden",
    "limit_range_message",
    "quota_usage",
]


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _maximum(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


@dataclass(frozen=True)
class ContainerResources:
    """One container's ``resources`` after API defaulting (requests default to limits).

    ``restartable`` marks a sidecar: an init container with ``restartPolicy: Always``, which keeps
    running beside the main containers and so adds to their requests instead of preceding them.
    """

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    restartable: bool = False


@dataclass(frozen=True)
class PodResources:
    """The resource-relevant part of a pod spec: containers, init containers and overhead."""

    containers: tuple[ContainerResources, ...] = ()
    init_containers: tuple[ContainerResources, ...] = ()
    overhead: Mapping[str, int] = field(default_factory=dict)

    def _effective(self, pick: str) -> dict[str, int]:
        # Kubernetes' rule (component-helpers PodRequests): regular containers and sidecars run
        # together, so they add up; a classic init container runs alone but beside the sidecars
        # started before it. The pod needs the larger of the two phases, plus its overhead.
        total: dict[str, int] = {}
        for container in self.containers:
            _add(total, getattr(container, pick))
        sidecars: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        for container in self.init_containers:
            own = getattr(container, pick)
            if container.restartable:
                _add(total, own)
                _add(sidecars, own)
                phase = dict(sidecars)
            else:
                phase = dict(own)
                _add(phase, sidecars)
            _maximum(init_peak, phase)
        _maximum(total, init_peak)
        _add(total, self.overhead)
        return {name: total[name] for name in sorted(total)}

    def effective_requests(self) -> dict[str, int]:
        """What the scheduler reserves on a node for this pod (canonical units, sorted keys)."""
        return self._effective("requests")

    def effective_limits(self) -> dict[str, int]:
        """The pod's limits by the same rule; quota's ``limits.*`` keys are charged from these."""
        return self._effective("limits")


def forbidden(pod_name: str, message: str) -> str:
    """kube-apiserver's wrapper around an admission rejection (``admission.NewForbidden``)."""
    return f'pods "{pod_name}" is forbidden: {message}'


# --- LimitRanger ---------------------------------------------------------------------------------


def _fmt(resource: str, amount: int) -> str:
    return format_canonical(resource, amount)


def _min_violation(
    kind: str, resource: str, bound: int, requests: Mapping[str, int], limits: Mapping[str, int]
) -> str | None:
    if resource not in requests:
        return f"minimum {resource} usage per {kind} is {_fmt(resource, bound)}.  No request is specified"
    if requests[resource] < bound:
        return (
            f"minimum {resource} usage per {kind} is {_fmt(resource, bound)}, "
            f"but request is {_fmt(resource, requests[resource])}"
        )
    if resource in limits and limits[resource] < bound:
        return (
            f"minimum {resource} usage per {kind} is {_fmt(resource, bound)}, "
            f"but limit is {_fmt(resource, limits[resource])}"
        )
    return None


def _max_violation(
    kind: str, resource: str, bound: int, requests: Mapping[str, int], limits: Mapping[str, int]
) -> str | None:
    if resource not in limits:
        return f"maximum {resource} usage per {kind} is {_fmt(resource, bound)}.  No limit is specified"
    if limits[resource] > bound:
        return (
            f"maximum {resource} usage per {kind} is {_fmt(resource, bound)}, "
            f"but limit is {_fmt(resource, limits[resource])}"
        )
    if resource in requests and requests[resource] > bound:
        return (
            f"maximum {resource} usage per {kind} is {_fmt(resource, bound)}, "
            f"but request is {_fmt(resource, requests[resource])}"
        )
    return None


def _with_defaults(container: ContainerResources, item: LimitRangeItem) -> ContainerResources:
    limits = dict(container.limits)
    requests = dict(container.requests)
    for name, amount in item.default.items():
        limits.setdefault(name, amount)
    for name, amount in item.default_request.items():
        requests.setdefault(name, amount)
    return replace(container, requests=dict(sorted(requests.items())), limits=dict(sorted(limits.items())))


def apply_limit_ranges(
    resources: PodResources, limit_ranges: Sequence[LimitRangeInfo]
) -> tuple[PodResources, list[str]]:
    """Apply the namespace's LimitRanges to a pod, as the LimitRanger admission plugin does.

    Returns the defaulted resources and the violations (empty = admitted). Defaults of a
    ``Container`` item fill only what a container leaves unset, per container and before anything
    is summed, so a defaulted request counts toward the pod's effective request. ``limit_ranges``
    are applied in the given order (the caller sorts them by name for determinism); the
    LimitRange objects are expected to carry Kubernetes' own object defaulting already (``default``
    from ``max``, ``defaultRequest`` from ``default`` or ``min``), which :mod:`berth.kube.manifests`
    applies when it reads one.

    Violation strings are kube's (``maximum cpu usage per Container is 32, but limit is 64``);
    join several with :func:`limit_range_message`.
    """
    violations: list[str] = []
    for limit_range in limit_ranges:
        for item in limit_range.limits:
            if item.type == "Container":
                resources = replace(
                    resources,
                    containers=tuple(_with_defaults(c, item) for c in resources.containers),
                    init_containers=tuple(_with_defaults(c, item) for c in resources.init_containers),
                )
        for item in limit_range.limits:
            if item.type == "Container":
                for container in resources.containers + resources.init_containers:
                    for name in sorted(item.min):
                        found = _min_violation("Container", name, item.min[name], container.requests, container.limits)
                        if found:
                            violations.append(found)
                    for name in sorted(item.max):
                        found = _max_violation("Container", name, item.max[name], container.requests, container.limits)
                        if found:
                            violations.append(found)
            else:
                requests = resources.effective_requests()
                limits = resources.effective_limits()
                # Pod-level bounds look at the containers only, not at the runtime overhead.
                for name in resources.overhead:
                    requests[name] = requests.get(name, 0) - resources.overhead[name]
                    limits[name] = limits.get(name, 0) - resources.overhead[name]
                for name in sorted(item.min):
                    found = _min_violation("Pod", name, item.min[name], requests, limits)
                    if found:
                        violations.append(found)
                for name in sorted(item.max):
                    found = _max_violation("Pod", name, item.max[name], requests, limits)
                    if found:
                        violations.append(found)
    return resources, violations


def limit_range_message(violations: Sequence[str]) -> str:
    """Join violations as Kubernetes' error aggregate does: one as is, several in brackets."""
    if len(violations) == 1:
        return violations[0]
    return "[" + ", ".join(violations) + "]"


# --- ResourceQuota -------------------------------------------------------------------------------

_COMPUTE = ("cpu", "memory", "ephemeral-storage")
# Quota demands an explicit per-container value only for these (a kube backward-compat rule).
_MUST_SPECIFY = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})


def _underlying(quota_key: str) -> str:
    for prefix in ("requests.", "limits."):
        if quota_key.startswith(prefix):
            return quota_key[len(prefix) :]
    return quota_key


def _container_usage_keys(container: ContainerResources) -> set[str]:
    keys = {"pods"}
    for name in ("cpu", "memory"):
        if name in container.requests:
            keys.update({name, f"requests.{name}"})
        if name in container.limits:
            keys.add(f"limits.{name}")
    return keys


def quota_usage(resources: PodResources) -> dict[str, int]:
    """What one live pod charges against quotas, keyed as ResourceQuota ``hard`` keys are.

    ``pods`` and ``count/pods`` count the pod; ``cpu``/``memory``/``ephemeral-storage`` and their
    ``requests.`` forms are its effective requests, ``limits.`` its effective limits; every other
    (extended) resource is charged only as ``requests.<name>``, the one form Kubernetes accepts for
    resources that cannot be overcommitted.
    """
    requests = resources.effective_requests()
    limits = resources.effective_limits()
    usage = {"pods": 1, "count/pods": 1}
    for name, amount in requests.items():
        if name in _COMPUTE:
            usage[name] = amount
        usage[f"requests.{name}"] = amount
    for name in _COMPUTE:
        if name in limits:
            usage[f"limits.{name}"] = limits[name]
    return dict(sorted(usage.items()))


def _applies(quota: ResourceQuotaInfo, namespace: str, priority_class_name: str | None) -> bool:
    if quota.namespace != namespace:
        return False
    if quota.scope_priority_classes:
        return priority_class_name in quota.scope_priority_classes
    return True


def _pretty(values: Mapping[str, int]) -> str:
    return ",".join(f"{key}={format_canonical(_underlying(key), values[key])}" for key in sorted(values))


@dataclass(frozen=True)
class QuotaDecision:
    """Outcome of :meth:`QuotaLedger.admit`: ``message`` is None when the pod is admitted."""

    message: str | None
    ledger: QuotaLedger

    @property
    def admitted(self) -> bool:
        return self.message is None


@dataclass(frozen=True)
class QuotaLedger:
    """Namespace quotas with their running usage, as the quota admission plugin keeps them.

    Immutable: :meth:`admit` and :meth:`charge`/:meth:`release` return a new ledger, so a caller
    can try a pod and drop the result. Quotas are examined sorted by (namespace, name), so the
    first exceeded quota named in a message is the same on every run.
    """

    quotas: tuple[ResourceQuotaInfo, ...] = ()
    used: Mapping[tuple[str, str], Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, quotas: Iterable[ResourceQuotaInfo]) -> QuotaLedger:
        ordered = tuple(sorted(quotas, key=lambda q: (q.namespace, q.name)))
        return cls(ordered, {(q.namespace, q.name): {} for q in ordered})

    def _charged(
        self, namespace: str, priority_class_name: str | None, usage: Mapping[str, int], sign: int
    ) -> QuotaLedger:
        used = {key: dict(value) for key, value in self.used.items()}
        for quota in self.quotas:
            if not _applies(quota, namespace, priority_class_name):
                continue
            bucket = used[(quota.namespace, quota.name)]
            for key in quota.hard:
                if key in usage:
                    bucket[key] = max(0, bucket.get(key, 0) + sign * usage[key])
        return QuotaLedger(self.quotas, used)

    def charge(self, namespace: str, priority_class_name: str | None, resources: PodResources) -> QuotaLedger:
        """Count an existing pod (bound before the window, so never rejected) against quotas."""
        return self._charged(namespace, priority_class_name, quota_usage(resources), 1)

    def release(self, namespace: str, priority_class_name: str | None, resources: PodResources) -> QuotaLedger:
        """A pod is gone (deleted, evicted): give its usage back."""
        return self._charged(namespace, priority_class_name, quota_usage(resources), -1)

    def admit(
        self, pod_name: str, namespace: str, priority_class_name: str | None, resources: PodResources
    ) -> QuotaDecision:
        """Admit a new pod or reject it with kube-apiserver's quota message.

        Mirrors the quota evaluator: for each applicable quota, first the per-container
        ``must specify`` rule for cpu/memory, then whether used + requested stays within hard for
        every resource the pod charges; the first failing quota names the rejection, e.g.
        ``pods "train-0" is forbidden: exceeded quota: gpu-quota, requested:
        requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=6, limited:
        requests.nvidia.com/gpu=8``.
        """
        usage = quota_usage(resources)
        containers = resources.containers + resources.init_containers
        for quota in self.quotas:
            if not _applies(quota, namespace, priority_class_name):
                continue
            required = sorted(set(quota.hard) & _MUST_SPECIFY)
            missing: dict[str, list[str]] = {}
            for container in containers:
                have = _container_usage_keys(container)
                for key in required:
                    if key not in have:
                        missing.setdefault(key, []).append(container.name)
            if missing:
                parts = "; ".join(
                    f"{key} for: {','.join(sorted(set(names)))}" for key, names in sorted(missing.items())
                )
                return QuotaDecision(forbidden(pod_name, f"failed quota: {quota.name}: must specify {parts}"), self)
        for quota in self.quotas:
            if not _applies(quota, namespace, priority_class_name):
                continue
            used = self.used[(quota.namespace, quota.name)]
            requested = {key: usage[key] for key in quota.hard if key in usage}
            exceeded = sorted(key for key, amount in requested.items() if used.get(key, 0) + amount > quota.hard[key])
            if exceeded:
                message = (
                    f"exceeded quota: {quota.name}, "
                    f"requested: {_pretty({key: requested[key] for key in exceeded})}, "
                    f"used: {_pretty({key: used.get(key, 0) for key in exceeded})}, "
                    f"limited: {_pretty({key: quota.hard[key] for key in exceeded})}"
                )
                return QuotaDecision(forbidden(pod_name, message), self)
        return QuotaDecision(None, self._charged(namespace, priority_class_name, usage, 1))
