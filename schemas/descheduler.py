"""Descheduling policies: the descheduler's ``DeschedulerPolicy`` file, read in both of its forms,
and the one internal form Berth's descheduling core runs.

Two wire forms are accepted, with the descheduler's field names:

- ``descheduler/v1alpha1``: a ``strategies`` map (``{name: {enabled, params}}``) and the evictor
  switches at the top (``evictLocalStoragePods``, ``evictSystemCriticalPods`` ...). A ``spec``
  holding those keys is read as if they were at the top (the form some guides write).
- ``descheduler/v1alpha2``: ``profiles``, each with ``pluginConfig`` (``DefaultEvictor`` and the
  strategies' args) and ``plugins.deschedule`` / ``plugins.balance`` naming the enabled ones.

Both normalise (:func:`parse_policy`) into a :class:`DeschedulingPolicy`: a list of
:class:`StrategyConfig`, each carrying the evictor rules of its profile, as the descheduler's
own v1alpha1→v1alpha2 conversion does (one profile per v1alpha1 strategy, the top-level evictor
switches copied into each profile's DefaultEvictor, ``thresholdPriority`` /
``thresholdPriorityClassName`` becoming ``priorityThreshold``, ``nodeFit`` the strategy's).

Unknown fields are errors, as everywhere in the contract; a descheduler strategy Berth does not
implement is an error naming the ones it does. ``GpuDefragmentation`` is Berth's own.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from ._base import FrozenModel, NonNegativeInt
from .cluster import LabelSelector, LabelSelectorRequirement

__all__ = [
    "BALANCE_STRATEGIES",
    "DESCHEDULE_STRATEGIES",
    "STRATEGIES",
    "DeschedulingPolicy",
    "EvictorRules",
    "GpuDefragmentationArgs",
    "NamespaceFilter",
    "PolicyError",
    "PriorityThreshold",
    "StrategyConfig",
    "parse_policy",
]

ANTI_AFFINITY = "RemovePodsViolatingInterPodAntiAffinity"
NODE_AFFINITY = "RemovePodsViolatingNodeAffinity"
NODE_TAINTS = "RemovePodsViolatingNodeTaints"
LOW_NODE_UTILIZATION = "LowNodeUtilization"
GPU_DEFRAGMENTATION = "GpuDefragmentation"

DESCHEDULE_STRATEGIES = (ANTI_AFFINITY, NODE_AFFINITY, NODE_TAINTS)
"""Strategies of the ``deschedule`` extension point: each looks at one pod at a time."""
BALANCE_STRATEGIES = (LOW_NODE_UTILIZATION, GPU_DEFRAGMENTATION)
"""Strategies of the ``balance`` extension point: each looks at the cluster as a whole."""
STRATEGIES = (*DESCHEDULE_STRATEGIES, *BALANCE_STRATEGIES)

NODE_AFFINITY_TYPE = "requiredDuringSchedulingIgnoredDuringExecution"
"""The one ``nodeAffinityType`` the descheduler (and Berth) acts on."""

API_V1ALPHA1 = "descheduler/v1alpha1"
API_V1ALPHA2 = "descheduler/v1alpha2"


class PolicyError(ValueError):
    """The policy document cannot be accepted; the message names the field."""


class _Wire(FrozenModel):
    """A descheduler document's object: camelCase keys, unknown keys refused."""

    model_config = ConfigDict(**{**FrozenModel.model_config, "alias_generator": to_camel, "populate_by_name": True})


# --- the internal form ---------------------------------------------------------------------------


class PriorityThreshold(FrozenModel):
    """Pods with priority >= the threshold are not evicted: a value, or a PriorityClass's name."""

    value: int | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> PriorityThreshold:
        if (self.value is None) == (self.name is None):
            raise ValueError("priorityThreshold: give exactly one of value and name")
        return self


class NamespaceFilter(FrozenModel):
    """``namespaces: {include, exclude}``: at most one of the two lists may be non-empty."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_list(self) -> NamespaceFilter:
        if self.include and self.exclude:
            raise ValueError("namespaces: only one of include and exclude can be set")
        return self

    def admits(self, namespace: str) -> bool:
        if self.include:
            return namespace in self.include
        return namespace not in self.exclude


class EvictorRules(FrozenModel):
    """The DefaultEvictor's args: which pods may be evicted at all."""

    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    evict_daemon_set_pods: bool = False
    evict_failed_bare_pods: bool = False
    ignore_pvc_pods: bool = False
    node_fit: bool = False
    """Recorded for fidelity; Berth always requires a target node (the no-loop rule)."""
    priority_threshold: PriorityThreshold | None = None
    label_selector: LabelSelector | None = None


class GpuDefragmentationArgs(FrozenModel):
    """Berth's GPU defragmentation: move small GPU pods so that whole GPUs (or whole nodes) free up.

    ``max_pod_gpus``: the largest pod (in whole GPUs) that may be moved; pods with a GPU share
    always may. ``max_moves_per_pod``: the most pods moved to make room for one pending pod.
    ``nodes_to_free``: how many GPU nodes to empty entirely (for a scale-down) when no pending
    pod needs the room; 0 (the default) frees only for pending pods."""

    max_pod_gpus: Annotated[int, Field(ge=0)] = 1
    max_moves_per_pod: Annotated[int, Field(ge=1)] = 4
    nodes_to_free: NonNegativeInt = 0


class StrategyConfig(FrozenModel):
    """One enabled strategy with everything it needs, its profile's evictor rules included."""

    name: Literal[
        "RemovePodsViolatingInterPodAntiAffinity",
        "RemovePodsViolatingNodeAffinity",
        "RemovePodsViolatingNodeTaints",
        "LowNodeUtilization",
        "GpuDefragmentation",
    ]
    profile: str
    evictor: EvictorRules = EvictorRules()
    namespaces: NamespaceFilter | None = None
    label_selector: LabelSelector | None = None
    node_affinity_type: tuple[str, ...] = (NODE_AFFINITY_TYPE,)
    include_prefer_no_schedule: bool = False
    excluded_taints: tuple[str, ...] = ()
    included_taints: tuple[str, ...] = ()
    thresholds: dict[str, float] = Field(default_factory=dict)
    """LowNodeUtilization: percent of allocatable; a node below all of them is underutilized."""
    target_thresholds: dict[str, float] = Field(default_factory=dict)
    """LowNodeUtilization: percent of allocatable; a node above any of them is overutilized."""
    number_of_nodes: NonNegativeInt = 0
    """LowNodeUtilization acts only when more than this many nodes are underutilized."""
    gpu: GpuDefragmentationArgs = GpuDefragmentationArgs()


class DeschedulingPolicy(FrozenModel):
    """What :func:`parse_policy` returns: strategies in the order they run (per profile: the
    deschedule strategies, then the balance ones, as the descheduler runs them), and the
    policy-wide limits."""

    api_version: str
    strategies: tuple[StrategyConfig, ...]
    node_selector: str | None = None
    max_pods_to_evict_per_node: NonNegativeInt | None = None
    max_pods_to_evict_per_namespace: NonNegativeInt | None = None
    max_pods_to_evict_total: NonNegativeInt | None = None
    grace_period_seconds: NonNegativeInt | None = None
    """The evictions' ``deleteOptions.gracePeriodSeconds`` (None: each pod's own)."""


# --- the wire forms ------------------------------------------------------------------------------


class _WireRequirement(_Wire):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class _WireSelector(_Wire):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[_WireRequirement, ...] = ()

    def internal(self) -> LabelSelector:
        return LabelSelector(
            match_labels=self.match_labels,
            match_expressions=tuple(
                LabelSelectorRequirement(key=r.key, operator=r.operator, values=r.values)
                for r in self.match_expressions
            ),
        )


class _WireNamespaces(_Wire):
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None

    def internal(self) -> NamespaceFilter:
        return NamespaceFilter(include=self.include or (), exclude=self.exclude or ())


Percent = Annotated[float, Field(ge=0, le=100)]


class _WireThresholds(_Wire):
    use_deviation_thresholds: bool = False
    thresholds: dict[str, Percent] = Field(default_factory=dict)
    target_thresholds: dict[str, Percent] = Field(default_factory=dict)
    number_of_nodes: NonNegativeInt = 0

    @field_validator("use_deviation_thresholds")
    @classmethod
    def _no_deviation(cls, value: bool) -> bool:
        if value:
            raise ValueError("useDeviationThresholds is not supported by Berth: give absolute percentages")
        return value


class _WireGpuDefragmentation(_Wire):
    max_pod_gpus: Annotated[int, Field(ge=0)] = 1
    max_moves_per_pod: Annotated[int, Field(ge=1)] = 4
    nodes_to_free: NonNegativeInt = 0


class _V1Alpha1Params(_Wire):
    node_resource_utilization_thresholds: _WireThresholds | None = None
    node_affinity_type: tuple[str, ...] | None = None
    namespaces: _WireNamespaces | None = None
    threshold_priority: int | None = None
    threshold_priority_class_name: str | None = None
    label_selector: _WireSelector | None = None
    node_fit: bool = False
    include_prefer_no_schedule: bool = False
    excluded_taints: tuple[str, ...] = ()
    included_taints: tuple[str, ...] = ()
    gpu_defragmentation: _WireGpuDefragmentation | None = None
    """Berth's own (``GpuDefragmentation``)."""


class _V1Alpha1Strategy(_Wire):
    enabled: bool = False
    weight: int = 0
    params: _V1Alpha1Params | None = None


class _V1Alpha1Policy(_Wire):
    api_version: str
    kind: Literal["DeschedulerPolicy"]
    metadata: dict[str, Any] | None = None
    strategies: dict[str, _V1Alpha1Strategy] = Field(default_factory=dict)
    node_selector: str | None = None
    evict_failed_bare_pods: bool = False
    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    evict_daemon_set_pods: bool = False
    ignore_pvc_pods: bool = False
    max_no_of_pods_to_evict_per_node: NonNegativeInt | None = None
    max_no_of_pods_to_evict_per_namespace: NonNegativeInt | None = None
    max_no_of_pods_to_evict_total: NonNegativeInt | None = None


class _WirePriorityThreshold(_Wire):
    value: int | None = None
    name: str | None = None


class _DefaultEvictorArgs(_Wire):
    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    evict_daemon_set_pods: bool = False
    evict_failed_bare_pods: bool = False
    ignore_pvc_pods: bool = False
    node_fit: bool = False
    priority_threshold: _WirePriorityThreshold | None = None
    label_selector: _WireSelector | None = None


class _LowNodeUtilizationArgs(_Wire):
    use_deviation_thresholds: bool = False
    thresholds: dict[str, Percent] = Field(default_factory=dict)
    target_thresholds: dict[str, Percent] = Field(default_factory=dict)
    number_of_nodes: NonNegativeInt = 0
    evictable_namespaces: _WireNamespaces | None = None

    @field_validator("use_deviation_thresholds")
    @classmethod
    def _no_deviation(cls, value: bool) -> bool:
        return _WireThresholds._no_deviation(value)


class _NodeAffinityArgs(_Wire):
    namespaces: _WireNamespaces | None = None
    label_selector: _WireSelector | None = None
    node_affinity_type: tuple[str, ...] | None = None


class _NodeTaintsArgs(_Wire):
    namespaces: _WireNamespaces | None = None
    label_selector: _WireSelector | None = None
    include_prefer_no_schedule: bool = False
    excluded_taints: tuple[str, ...] = ()
    included_taints: tuple[str, ...] = ()


class _AntiAffinityArgs(_Wire):
    namespaces: _WireNamespaces | None = None
    label_selector: _WireSelector | None = None


class _GpuDefragmentationPluginArgs(_WireGpuDefragmentation):
    namespaces: _WireNamespaces | None = None
    label_selector: _WireSelector | None = None


_PLUGIN_ARGS: dict[str, type[_Wire]] = {
    "DefaultEvictor": _DefaultEvictorArgs,
    LOW_NODE_UTILIZATION: _LowNodeUtilizationArgs,
    NODE_AFFINITY: _NodeAffinityArgs,
    NODE_TAINTS: _NodeTaintsArgs,
    ANTI_AFFINITY: _AntiAffinityArgs,
    GPU_DEFRAGMENTATION: _GpuDefragmentationPluginArgs,
}


class _PluginConfig(_Wire):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class _PluginSet(_Wire):
    enabled: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()


class _Plugins(_Wire):
    presort: _PluginSet | None = None
    sort: _PluginSet | None = None
    deschedule: _PluginSet | None = None
    balance: _PluginSet | None = None
    evict: _PluginSet | None = None
    filter: _PluginSet | None = None
    pre_eviction_filter: _PluginSet | None = None


class _Profile(_Wire):
    name: str = Field(min_length=1)
    plugin_config: tuple[_PluginConfig, ...] = ()
    plugins: _Plugins = _Plugins()


class _V1Alpha2Policy(_Wire):
    api_version: str
    kind: Literal["DeschedulerPolicy"]
    metadata: dict[str, Any] | None = None
    profiles: tuple[_Profile, ...] = ()
    node_selector: str | None = None
    max_no_of_pods_to_evict_per_node: NonNegativeInt | None = None
    max_no_of_pods_to_evict_per_namespace: NonNegativeInt | None = None
    max_no_of_pods_to_evict_total: NonNegativeInt | None = None
    grace_period_seconds: NonNegativeInt | None = None


# --- normalisation -------------------------------------------------------------------------------


def _unknown_strategy(name: str) -> PolicyError:
    return PolicyError(f"{name!r}: not a strategy Berth implements (it implements: {', '.join(STRATEGIES)})")


def _check_thresholds(where: str, thresholds: dict[str, float], targets: dict[str, float]) -> None:
    if not thresholds or not targets:
        raise PolicyError(f"{where}: LowNodeUtilization needs both thresholds and targetThresholds")
    if set(thresholds) != set(targets):
        raise PolicyError(
            f"{where}: thresholds and targetThresholds must name the same resources "
            f"({', '.join(sorted(thresholds))} vs {', '.join(sorted(targets))})"
        )
    for resource, value in sorted(thresholds.items()):
        if value > targets[resource]:
            raise PolicyError(
                f"{where}: thresholds.{resource} ({value:g}) must not exceed targetThresholds.{resource} "
                f"({targets[resource]:g})"
            )


def _node_affinity_type(where: str, types: tuple[str, ...] | None) -> tuple[str, ...]:
    types = types or (NODE_AFFINITY_TYPE,)
    for value in types:
        if value != NODE_AFFINITY_TYPE:
            raise PolicyError(f"{where}.nodeAffinityType: {value!r} is not supported (only {NODE_AFFINITY_TYPE})")
    return tuple(types)


def _from_v1alpha1(doc: _V1Alpha1Policy) -> DeschedulingPolicy:
    strategies: list[StrategyConfig] = []
    # The descheduler ran v1alpha1 strategies in its own fixed order, not the map's; the
    # deschedule ones before the balance ones is that order for the strategies Berth has.
    for name in doc.strategies:
        if name not in STRATEGIES:
            raise _unknown_strategy(f"strategies.{name}")
    for name in STRATEGIES:
        strategy = doc.strategies.get(name)
        if strategy is None or not strategy.enabled:
            continue
        where = f"strategies.{name}.params"
        params = strategy.params or _V1Alpha1Params()
        if params.threshold_priority is not None and params.threshold_priority_class_name:
            raise PolicyError(f"{where}: give only one of thresholdPriority and thresholdPriorityClassName")
        threshold = None
        if params.threshold_priority is not None:
            threshold = PriorityThreshold(value=params.threshold_priority)
        elif params.threshold_priority_class_name:
            threshold = PriorityThreshold(name=params.threshold_priority_class_name)
        evictor = EvictorRules(
            evict_local_storage_pods=doc.evict_local_storage_pods,
            evict_system_critical_pods=doc.evict_system_critical_pods,
            evict_daemon_set_pods=doc.evict_daemon_set_pods,
            evict_failed_bare_pods=doc.evict_failed_bare_pods,
            ignore_pvc_pods=doc.ignore_pvc_pods,
            node_fit=params.node_fit,
            priority_threshold=threshold,
        )
        fields: dict[str, Any] = {
            "name": name,
            "profile": f"strategy-{name}-profile",
            "evictor": evictor,
            "namespaces": params.namespaces.internal() if params.namespaces else None,
            "label_selector": params.label_selector.internal() if params.label_selector else None,
        }
        if name == LOW_NODE_UTILIZATION:
            limits = params.node_resource_utilization_thresholds
            if limits is None:
                raise PolicyError(f"{where}.nodeResourceUtilizationThresholds: required for LowNodeUtilization")
            _check_thresholds(f"{where}.nodeResourceUtilizationThresholds", limits.thresholds, limits.target_thresholds)
            fields.update(
                thresholds=limits.thresholds,
                target_thresholds=limits.target_thresholds,
                number_of_nodes=limits.number_of_nodes,
            )
        elif name == NODE_AFFINITY:
            fields["node_affinity_type"] = _node_affinity_type(where, params.node_affinity_type)
        elif name == NODE_TAINTS:
            fields.update(
                include_prefer_no_schedule=params.include_prefer_no_schedule,
                excluded_taints=params.excluded_taints,
                included_taints=params.included_taints,
            )
        elif name == GPU_DEFRAGMENTATION and params.gpu_defragmentation is not None:
            fields["gpu"] = GpuDefragmentationArgs(**params.gpu_defragmentation.model_dump())
        strategies.append(StrategyConfig(**fields))
    return DeschedulingPolicy(
        api_version=doc.api_version,
        strategies=tuple(strategies),
        node_selector=doc.node_selector,
        max_pods_to_evict_per_node=doc.max_no_of_pods_to_evict_per_node,
        max_pods_to_evict_per_namespace=doc.max_no_of_pods_to_evict_per_namespace,
        max_pods_to_evict_total=doc.max_no_of_pods_to_evict_total,
    )


def _plugin_args(where: str, config: _PluginConfig) -> _Wire:
    model = _PLUGIN_ARGS.get(config.name)
    if model is None:
        raise _unknown_strategy(f"{where}.name: {config.name}")
    try:
        return model.model_validate(config.args)
    except ValidationError as exc:
        raise PolicyError(_first_error(exc, f"{where}.args")) from None


def _from_profile(index: int, profile: _Profile) -> list[StrategyConfig]:
    where = f"profiles[{index}]"
    configs: dict[str, _Wire] = {}
    for number, config in enumerate(profile.plugin_config):
        if config.name in configs:
            raise PolicyError(f"{where}.pluginConfig[{number}]: {config.name} is configured twice")
        configs[config.name] = _plugin_args(f"{where}.pluginConfig[{number}]", config)
    wire_evictor = configs.get("DefaultEvictor", _DefaultEvictorArgs())
    assert isinstance(wire_evictor, _DefaultEvictorArgs)
    threshold = None
    if wire_evictor.priority_threshold is not None:
        try:
            threshold = PriorityThreshold(**wire_evictor.priority_threshold.model_dump())
        except ValidationError:
            raise PolicyError(
                f"{where}.pluginConfig DefaultEvictor: priorityThreshold: give exactly one of value and name"
            ) from None
    evictor = EvictorRules(
        **wire_evictor.model_dump(exclude={"priority_threshold", "label_selector"}),
        priority_threshold=threshold,
        label_selector=wire_evictor.label_selector.internal() if wire_evictor.label_selector else None,
    )
    plugins = profile.plugins
    points = {
        "deschedule": (plugins.deschedule.enabled if plugins.deschedule else (), DESCHEDULE_STRATEGIES),
        "balance": (plugins.balance.enabled if plugins.balance else (), BALANCE_STRATEGIES),
    }
    for point in ("filter", "preEvictionFilter"):
        chosen = getattr(plugins, "pre_eviction_filter" if point == "preEvictionFilter" else point)
        for name in chosen.enabled if chosen else ():
            if name != "DefaultEvictor":
                raise PolicyError(f"{where}.plugins.{point}.enabled: {name!r}: Berth has only DefaultEvictor here")
    strategies: list[StrategyConfig] = []
    for point, (enabled, allowed) in points.items():
        for name in enabled:
            if name not in STRATEGIES:
                raise _unknown_strategy(f"{where}.plugins.{point}.enabled: {name}")
            if name not in allowed:
                raise PolicyError(f"{where}.plugins.{point}.enabled: {name} is not a {point} plugin")
            args = configs.get(name)
            fields: dict[str, Any] = {"name": name, "profile": profile.name, "evictor": evictor}
            namespaces = getattr(args, "namespaces", None)
            if isinstance(namespaces, _WireNamespaces):
                fields["namespaces"] = namespaces.internal()
            selector = getattr(args, "label_selector", None)
            if isinstance(selector, _WireSelector):
                fields["label_selector"] = selector.internal()
            if name == LOW_NODE_UTILIZATION:
                if not isinstance(args, _LowNodeUtilizationArgs):
                    raise PolicyError(f"{where}.pluginConfig: LowNodeUtilization needs args (thresholds, ...)")
                _check_thresholds(f"{where}.pluginConfig LowNodeUtilization", args.thresholds, args.target_thresholds)
                fields.update(
                    thresholds=args.thresholds,
                    target_thresholds=args.target_thresholds,
                    number_of_nodes=args.number_of_nodes,
                    namespaces=args.evictable_namespaces.internal() if args.evictable_namespaces else None,
                )
            elif name == NODE_AFFINITY:
                types = args.node_affinity_type if isinstance(args, _NodeAffinityArgs) else None
                fields["node_affinity_type"] = _node_affinity_type(f"{where}.pluginConfig {name}", types)
            elif name == NODE_TAINTS and isinstance(args, _NodeTaintsArgs):
                fields.update(
                    include_prefer_no_schedule=args.include_prefer_no_schedule,
                    excluded_taints=args.excluded_taints,
                    included_taints=args.included_taints,
                )
            elif name == GPU_DEFRAGMENTATION and isinstance(args, _GpuDefragmentationPluginArgs):
                fields["gpu"] = GpuDefragmentationArgs(
                    **args.model_dump(include={"max_pod_gpus", "max_moves_per_pod", "nodes_to_free"})
                )
            strategies.append(StrategyConfig(**fields))
    return strategies


def _from_v1alpha2(doc: _V1Alpha2Policy) -> DeschedulingPolicy:
    names = [profile.name for profile in doc.profiles]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise PolicyError(f"profiles: the name {duplicate!r} is used twice")
    strategies = [strategy for index, profile in enumerate(doc.profiles) for strategy in _from_profile(index, profile)]
    return DeschedulingPolicy(
        api_version=doc.api_version,
        strategies=tuple(strategies),
        node_selector=doc.node_selector,
        max_pods_to_evict_per_node=doc.max_no_of_pods_to_evict_per_node,
        max_pods_to_evict_per_namespace=doc.max_no_of_pods_to_evict_per_namespace,
        max_pods_to_evict_total=doc.max_no_of_pods_to_evict_total,
        grace_period_seconds=doc.grace_period_seconds,
    )


def _location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_error(exc: ValidationError, prefix: str = "") -> str:
    error = exc.errors()[0]
    where = _location(tuple(part for part in error["loc"] if part not in ("function-after",)))
    where = f"{prefix}.{where}" if prefix and where else prefix or where
    message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
    message = message.removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    return f"{where}: {message}" + (f" (and {more} more error(s))" if more else "")


def parse_policy(document: Any) -> DeschedulingPolicy:
    """A DeschedulerPolicy document (a mapping read from YAML or JSON) in its internal form.

    Raises :class:`PolicyError` naming the field for anything that is not a valid
    ``descheduler/v1alpha1`` or ``descheduler/v1alpha2`` DeschedulerPolicy Berth can run."""
    if not isinstance(document, dict):
        raise PolicyError("a DeschedulerPolicy must be a mapping (apiVersion, kind, ...)")
    api_version = document.get("apiVersion")
    if document.get("kind") != "DeschedulerPolicy":
        raise PolicyError(f"kind: expected DeschedulerPolicy, got {document.get('kind')!r}")
    body = dict(document)
    spec = body.pop("spec", None)
    if spec is not None:
        if not isinstance(spec, dict):
            raise PolicyError("spec: must be a mapping")
        both = sorted(set(spec) & set(body))
        if both:
            raise PolicyError(f"spec.{both[0]}: given both in spec and at the top level")
        body.update(spec)
    if api_version == API_V1ALPHA1:
        model: type[_Wire] = _V1Alpha1Policy
    elif api_version == API_V1ALPHA2:
        model = _V1Alpha2Policy
    else:
        raise PolicyError(f"apiVersion: expected {API_V1ALPHA1} or {API_V1ALPHA2}, got {api_version!r}")
    try:
        wire = model.model_validate(body)
    except ValidationError as exc:
        raise PolicyError(_first_error(exc)) from None
    if isinstance(wire, _V1Alpha1Policy):
        return _from_v1alpha1(wire)
    assert isinstance(wire, _V1Alpha2Policy)
    return _from_v1alpha2(wire)
