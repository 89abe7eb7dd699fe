"""Scheduler configuration: a KubeSchedulerConfiguration-shaped YAML document, validated.

Accepted document (``apiVersion: berth.io/v1alpha1``, ``kind: BerthSchedulerConfiguration``; also
``kubescheduler.config.k8s.io/v1`` with either kind)::

    profiles:
      - schedulerName: berth
        keepTopScores: 10            # Berth: feasible nodes whose scores a decision keeps
        percentageOfNodesToScore: 30 # kube's; overrides the top-level one (see below)
        plugins:
          multiPoint: {enabled: [{name: ..., weight: ...}], disabled: [{name: ...}]}
          preFilter | filter | postFilter | preScore | score | reserve | permit: {enabled, disabled}
        pluginConfig:
          - name: NodeResourcesFit
            args: {...}              # validated by the plugin's Args model

Each profile starts from Berth's built-in profile (:mod:`berth.core.default_profile`) and is merged the way
kube-scheduler merges a profile onto its defaults: per extension point, default plugins keep their
order unless disabled (``*`` disables them all), a default re-enabled by the user is replaced in
place (new weight), other enabled plugins are appended; then ``multiPoint`` plugins are expanded
into every extension point their class implements, unless disabled there, with plugins configured
explicitly at a point first. Validation errors name the path, e.g.
``profiles[0].plugins.score.enabled[2].name: unknown plugin 'Foo'; known: ...``.

``percentageOfNodesToScore`` (top level, and per profile where it wins, as in kube) bounds how many
feasible nodes a cycle looks for before it scores them, with kube-scheduler v1.34's arithmetic
(:func:`nodes_to_find`). One difference on purpose: **unset means every node** (kube's default,
unset or 0, is its adaptive percentage); only an explicit value turns sampling on, and ``0`` then
asks for kube's adaptive percentage. Which nodes are sampled is deterministic, see
:mod:`berth.core.filtering`.

Plugin names kube-scheduler has removed (``NodeResourcesMostAllocated``, ``RequestedToCapacityRatio``,
...) are refused with the v1.34 configuration that replaced them (:data:`LEGACY_PLUGINS`).

The resolved configuration has a content hash (sha256 of its canonical JSON), used as its
version: two documents that resolve to the same plugins, weights and args have the same hash.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.core.default_profile import DEFAULT_DOCUMENT
from berth.core.framework import EXTENSION_POINTS, Plugin, PluginArgs, ScorePlugin
from berth.core.hashing import canonical_json, sha256_hex
from berth.core.registry import REGISTRY

__all__ = [
    "API_VERSIONS",
    "DEFAULT_PROFILE",
    "LEGACY_PLUGINS",
    "ConfigError",
    "ResolvedProfile",
    "SchedulerConfig",
    "default_config",
    "nodes_to_find",
    "parse_config",
]

API_VERSIONS = ("berth.io/v1alpha1", "kubescheduler.config.k8s.io/v1")
KINDS = ("BerthSchedulerConfiguration", "KubeSchedulerConfiguration")
DEFAULT_PROFILE = "berth"
MAX_WEIGHT = 1000
"""Largest score weight. Bounded so that a node's total fits the tie-break key (see
:mod:`berth.core.ranking`); kube's own defaults use 1..3."""
MAX_KEEP_TOP_SCORES = 1000

_UNSUPPORTED_POINTS = MappingProxyType(
    {
        "queueSort": "the decision cell orders its queue itself",
        "preEnqueue": "the decision cell decides what to attempt",
        "preBind": "binding is the binder service's job",
        "bind": "binding is the binder service's job",
        "postBind": "binding is the binder service's job",
    }
)
# KubeSchedulerConfiguration keys that mean nothing to a pure core; accepted so that a kube
# configuration file can be reused, and ignored.
_IGNORED_TOP_LEVEL = frozenset(
    {
        "parallelism",
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "delayCacheUntilActive",
    }
)
MIN_FEASIBLE_NODES_TO_FIND = 100
"""kube-scheduler's ``minFeasibleNodesToFind``: below this many nodes every node is evaluated,
and a percentage never asks for fewer."""
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
"""kube-scheduler's ``minFeasibleNodesPercentageToFind``: the floor of the adaptive percentage."""

_NODE_RESOURCES_FIT_STRATEGY = (
    "NodeResourcesFit with pluginConfig args "
    "scoringStrategy: {{type: {kind}, resources: [{{name: cpu, weight: 1}}, "
    "{{name: memory, weight: 1}}]{extra}}}"
)
LEGACY_PLUGINS: Mapping[str, str] = MappingProxyType(
    {
        # Removed in kube-scheduler v1.23 (config v1beta2): the strategies became NodeResourcesFit's.
        "NodeResourcesMostAllocated": _NODE_RESOURCES_FIT_STRATEGY.format(kind="MostAllocated", extra=""),
        "NodeResourcesLeastAllocated": _NODE_RESOURCES_FIT_STRATEGY.format(kind="LeastAllocated", extra=""),
        "RequestedToCapacityRatio": _NODE_RESOURCES_FIT_STRATEGY.format(
            kind="RequestedToCapacityRatio",
            extra=", requestedToCapacityRatio: {shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]}",
        ),
        "NodeResourceLimits": "nothing: it was removed in v1.19; NodeResourcesFit filters and scores requests",
        # Removed in v1.23 / v1.24 / v1.27.
        "NodeLabel": "NodeAffinity with pluginConfig args addedAffinity (a node affinity every pod "
        "of the profile gets)",
        "ServiceAffinity": "InterPodAffinity (pod affinity on the service's pod labels)",
        "NodePreferAvoidPods": "nothing: it was removed in v1.24; use taints (TaintToleration)",
        "SelectorSpread": "PodTopologySpread with pluginConfig args defaultingType: System",
        "DefaultPodTopologySpread": "PodTopologySpread with pluginConfig args defaultingType: System",
        # Per-cloud volume limits, merged into NodeVolumeLimits (v1.21, removed v1.27/v1.31).
        "EBSLimits": "NodeVolumeLimits",
        "GCEPDLimits": "NodeVolumeLimits",
        "AzureDiskLimits": "NodeVolumeLimits",
        "CinderLimits": "NodeVolumeLimits",
    }
)
"""Plugins kube-scheduler removed → what a v1.34 configuration writes instead."""


class ConfigError(ValueError):
    """An invalid configuration; ``errors`` lists one ``"<path>: <problem>"`` per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("invalid scheduler configuration:\n  " + "\n  ".join(self.errors))


# --- the document as written ------------------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginEntry(_Doc):
    name: str = Field(min_length=1)
    weight: int | None = None


class PluginSetDoc(_Doc):
    enabled: tuple[PluginEntry, ...] = ()
    disabled: tuple[PluginEntry, ...] = ()


class PluginsDoc(_Doc):
    multiPoint: PluginSetDoc = PluginSetDoc()
    preFilter: PluginSetDoc = PluginSetDoc()
    filter: PluginSetDoc = PluginSetDoc()
    postFilter: PluginSetDoc = PluginSetDoc()
    preScore: PluginSetDoc = PluginSetDoc()
    score: PluginSetDoc = PluginSetDoc()
    reserve: PluginSetDoc = PluginSetDoc()
    permit: PluginSetDoc = PluginSetDoc()


class PluginConfigDoc(_Doc):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class ProfileDoc(_Doc):
    schedulerName: str = Field(default=DEFAULT_PROFILE, min_length=1)
    plugins: PluginsDoc | None = None
    pluginConfig: tuple[PluginConfigDoc, ...] = ()
    keepTopScores: int = Field(default=10, ge=0, le=MAX_KEEP_TOP_SCORES)
    percentageOfNodesToScore: int | None = Field(default=None, ge=0, le=100)


class ConfigDoc(_Doc):
    model_config = ConfigDict(extra="allow", frozen=True)
    apiVersion: Literal["berth.io/v1alpha1", "kubescheduler.config.k8s.io/v1"]
    kind: Literal["BerthSchedulerConfiguration", "KubeSchedulerConfiguration"]
    profiles: tuple[ProfileDoc, ...] = (ProfileDoc(),)
    percentageOfNodesToScore: int | None = Field(default=None, ge=0, le=100)


# --- the resolved configuration ---------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedProfile:
    """One profile, ready to build a :class:`~berth.core.scheduler.Framework` from.

    ``points[point]`` is the ordered plugin names of that extension point; ``weights`` the
    score weight per Score plugin; ``args`` the validated args per plugin in use."""

    scheduler_name: str
    points: Mapping[str, tuple[str, ...]]
    weights: Mapping[str, int]
    args: Mapping[str, PluginArgs]
    keep_top_scores: int
    percentage_of_nodes_to_score: int | None = None
    """The profile's, else the top-level one; None: every node (Berth's default)."""

    def plugin_names(self) -> tuple[str, ...]:
        """Every plugin the profile uses, in first-use order."""
        seen: dict[str, None] = {}
        for point in EXTENSION_POINTS:
            for name in self.points.get(point, ()):
                seen.setdefault(name)
        return tuple(seen)

    def to_dict(self) -> dict[str, Any]:
        sampling = (
            {}
            if self.percentage_of_nodes_to_score is None
            else {"percentageOfNodesToScore": self.percentage_of_nodes_to_score}
        )
        return {
            "schedulerName": self.scheduler_name,
            "keepTopScores": self.keep_top_scores,
            **sampling,  # absent when unset: hashes of existing configurations do not change
            "plugins": {
                point: [
                    {"name": name, **({"weight": self.weights[name]} if point == "score" else {})}
                    for name in self.points.get(point, ())
                ]
                for point in EXTENSION_POINTS
            },
            "pluginConfig": {
                name: self.args[name].model_dump(mode="json", by_alias=True) for name in sorted(self.args)
            },
        }


@dataclass(frozen=True)
class SchedulerConfig:
    """A validated, resolved configuration. ``hash`` (64 hex) is its version."""

    profiles: tuple[ResolvedProfile, ...]
    hash: str

    @property
    def version(self) -> str:
        return self.hash

    def profile(self, scheduler_name: str = DEFAULT_PROFILE) -> ResolvedProfile:
        for profile in self.profiles:
            if profile.scheduler_name == scheduler_name:
                return profile
        known = ", ".join(p.scheduler_name for p in self.profiles)
        raise KeyError(f"no profile {scheduler_name!r}; profiles: {known}")

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSIONS[0], "kind": KINDS[0], "profiles": [p.to_dict() for p in self.profiles]}

    def canonical_json(self) -> bytes:
        """The resolved configuration as canonical JSON (what ``hash`` covers)."""
        return canonical_json(self.to_dict())


# --- loading ----------------------------------------------------------------------------------


def _path(loc: Sequence[str | int]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _pydantic_errors(error: ValidationError, prefix: str = "") -> list[str]:
    out = []
    for item in error.errors():
        path = _path(item["loc"])
        full = f"{prefix}.{path}" if prefix and path else (prefix or path or "(document)")
        out.append(f"{full}: {item['msg']}")
    return out


def default_document() -> dict[str, Any]:
    """The built-in configuration document (:data:`berth.core.default_profile.DEFAULT_DOCUMENT`),
    a copy the caller may change."""
    return copy.deepcopy(DEFAULT_DOCUMENT)


def default_config(registry: Mapping[str, type[Plugin]] | None = None) -> SchedulerConfig:
    """The built-in ``berth`` profile alone."""
    return parse_config(default_document(), registry)


def parse_config(data: Any, registry: Mapping[str, type[Plugin]] | None = None) -> SchedulerConfig:
    """Validate plain data (parsed YAML) into a :class:`SchedulerConfig`."""
    if registry is None:
        registry = REGISTRY
    if not isinstance(data, Mapping):
        raise ConfigError(["(document): expected a mapping with apiVersion, kind and profiles"])
    errors: list[str] = []
    for key in sorted(set(data) - {"apiVersion", "kind", "profiles", "percentageOfNodesToScore"}):
        if key == "extenders":
            errors.append("extenders: scheduler extenders are not supported; write a plugin")
        elif key not in _IGNORED_TOP_LEVEL:
            errors.append(f"{key}: unknown field")
    raw_profiles = data.get("profiles")
    if isinstance(raw_profiles, Sequence) and not isinstance(raw_profiles, str):
        for index, raw_profile in enumerate(raw_profiles):
            raw_plugins = raw_profile.get("plugins") if isinstance(raw_profile, Mapping) else None
            if not isinstance(raw_plugins, Mapping):
                continue
            for point in sorted(set(raw_plugins) & set(_UNSUPPORTED_POINTS)):
                errors.append(
                    f"profiles[{index}].plugins.{point}: extension point not supported "
                    f"by Berth's core ({_UNSUPPORTED_POINTS[point]})"
                )
    if errors:
        raise ConfigError(errors)
    try:
        document = ConfigDoc.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(errors + _pydantic_errors(exc)) from None
    if errors:
        raise ConfigError(errors)
    base = _base_profile(registry)
    profiles: list[ResolvedProfile] = []
    seen_names: set[str] = set()
    for index, profile in enumerate(document.profiles):
        where = f"profiles[{index}]"
        if profile.schedulerName in seen_names:
            errors.append(f"{where}.schedulerName: duplicate profile {profile.schedulerName!r}")
        seen_names.add(profile.schedulerName)
        resolved = _resolve_profile(profile, base, registry, where, errors, document.percentageOfNodesToScore)
        if resolved is not None:
            profiles.append(resolved)
    if errors:
        raise ConfigError(errors)
    resolved_profiles = tuple(profiles)
    digest = sha256_hex(
        canonical_json(
            {"apiVersion": API_VERSIONS[0], "kind": KINDS[0], "profiles": [p.to_dict() for p in resolved_profiles]}
        )
    )
    return SchedulerConfig(profiles=resolved_profiles, hash=digest)


@dataclass(frozen=True)
class _Base:
    plugins: PluginsDoc
    plugin_config: Mapping[str, Mapping[str, Any]]


def _base_profile(registry: Mapping[str, type[Plugin]]) -> _Base:
    raw = default_document()
    document = ConfigDoc.model_validate(raw)
    profile = document.profiles[0]
    return _Base(
        plugins=profile.plugins or PluginsDoc(),
        plugin_config={entry.name: entry.args for entry in profile.pluginConfig if entry.name in registry},
    )


def _merge_set(default: PluginSetDoc, custom: PluginSetDoc) -> PluginSetDoc:
    """kube's ``mergePluginSet``: defaults in order minus disabled, re-enabled defaults replaced
    in place, the other custom plugins appended."""
    disabled = {entry.name for entry in custom.disabled} | {e.name for e in default.disabled}
    custom_by_name = {entry.name: index for index, entry in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginEntry] = []
    if "*" not in disabled:
        for entry in default.enabled:
            if entry.name in disabled:
                continue
            index = custom_by_name.get(entry.name)
            if index is not None:
                entry = custom.enabled[index]
                replaced.add(index)
            enabled.append(entry)
    enabled += [entry for index, entry in enumerate(custom.enabled) if index not in replaced]
    return PluginSetDoc(enabled=tuple(enabled), disabled=tuple(custom.disabled) + tuple(default.disabled))


def _resolve_profile(
    profile: ProfileDoc,
    base: _Base,
    registry: Mapping[str, type[Plugin]],
    where: str,
    errors: list[str],
    percentage: int | None = None,
) -> ResolvedProfile | None:
    """One profile merged onto the built-in one and validated; None (with ``errors`` extended)
    when it is invalid."""
    start = len(errors)
    custom = profile.plugins or PluginsDoc()
    # Names first, with the user's own paths, before merging hides where they came from.
    _check_plugin_entries(custom, registry, where, errors)
    if len(errors) > start:
        return None
    merged = {
        point: _merge_set(getattr(base.plugins, point), getattr(custom, point))
        for point in ("multiPoint", *EXTENSION_POINTS)
    }
    points: dict[str, tuple[str, ...]] = {}
    for point, base_class in EXTENSION_POINTS.items():
        order = _point_order(point, base_class, merged, registry, where, errors)
        if order is not None:
            points[point] = order
    weights = _score_weights(points.get("score", ()), merged)
    # Score plugins must also be registered where their class says they score.
    for name in points.get("score", ()):
        if not issubclass(registry[name], ScorePlugin):  # pragma: no cover - checked above
            errors.append(f"{where}.plugins.score: plugin {name!r} does not extend score")
    used = dict.fromkeys(name for point in EXTENSION_POINTS for name in points.get(point, ()))
    args = _plugin_args(profile, used, base, registry, where, errors)
    if len(errors) > start:
        return None
    return ResolvedProfile(
        scheduler_name=profile.schedulerName,
        points=points,
        weights=weights,
        args={name: args[name] for name in used if name in args},
        keep_top_scores=profile.keepTopScores,
        percentage_of_nodes_to_score=(
            profile.percentageOfNodesToScore if profile.percentageOfNodesToScore is not None else percentage
        ),
    )


def nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """How many feasible nodes a cycle looks for among ``num_all_nodes`` candidates: kube-scheduler
    v1.34's ``numFeasibleNodesToFind`` (pkg/scheduler/schedule_one.go) — every node below
    :data:`MIN_FEASIBLE_NODES_TO_FIND`; a percentage of 0 means the adaptive
    ``50 - numAllNodes/125`` (at least :data:`MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND`); never fewer
    than :data:`MIN_FEASIBLE_NODES_TO_FIND`. Berth's one difference: ``None`` (unset) means every
    node, where kube would use its adaptive percentage."""
    if percentage is None or num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def _check_plugin_entries(
    custom: PluginsDoc, registry: Mapping[str, type[Plugin]], where: str, errors: list[str]
) -> None:
    """Every plugin the profile names exists, extends the point it is enabled at, and has a
    weight in range."""
    known = ", ".join(sorted(registry))
    for point in ("multiPoint", *EXTENSION_POINTS):
        plugin_set: PluginSetDoc = getattr(custom, point)
        for kind in ("enabled", "disabled"):
            for index, entry in enumerate(getattr(plugin_set, kind)):
                path = f"{where}.plugins.{point}.{kind}[{index}]"
                if entry.name == "*" and kind == "disabled":
                    continue
                if entry.name not in registry:
                    errors.append(f"{path}.name: {_unknown_plugin(entry.name, known)}")
                    continue
                if kind == "enabled" and point != "multiPoint":
                    base_class = EXTENSION_POINTS[point]
                    if not issubclass(registry[entry.name], base_class):
                        errors.append(f"{path}.name: plugin {entry.name!r} does not extend {point}")
                if entry.weight is not None and not 0 <= entry.weight <= MAX_WEIGHT:
                    errors.append(f"{path}.weight: must be between 0 and {MAX_WEIGHT}, got {entry.weight}")


def _unknown_plugin(name: str, known: str) -> str:
    """The error for a plugin name the registry does not have, naming the v1.34 replacement of a
    plugin kube-scheduler removed."""
    replacement = LEGACY_PLUGINS.get(name)
    if replacement is not None:
        return (
            f"plugin {name!r} was removed from kube-scheduler; its v1.34 equivalent is "
            f"{replacement} (Berth's plugins: {known})"
        )
    return f"unknown plugin {name!r}; known: {known}"


def _point_order(
    point: str,
    base_class: type[Plugin],
    merged: Mapping[str, PluginSetDoc],
    registry: Mapping[str, type[Plugin]],
    where: str,
    errors: list[str],
) -> tuple[str, ...] | None:
    """kube's expansion of ``multiPoint`` into one extension point: the multiPoint plugins whose
    class implements it and that are not disabled there, after the point's explicit plugins that
    also appear in multiPoint and before its other explicit ones. None (with an error) when the
    point enables a plugin twice."""
    specific = merged[point]
    explicit = [entry.name for entry in specific.enabled]
    if len(set(explicit)) != len(explicit):
        duplicate = sorted({n for n in explicit if explicit.count(n) > 1})
        errors.append(f"{where}.plugins.{point}: plugin(s) enabled more than once: {', '.join(duplicate)}")
        return None
    disabled = {entry.name for entry in specific.disabled}
    if "*" in disabled:
        return tuple(explicit)
    overrides: list[str] = []
    from_multi: list[str] = []
    for entry in merged["multiPoint"].enabled:
        cls = registry.get(entry.name)
        if cls is None or not issubclass(cls, base_class) or entry.name in disabled:
            continue
        if entry.name in explicit:
            overrides.append(entry.name)
        elif entry.name in from_multi:
            errors.append(f"{where}.plugins.multiPoint: plugin {entry.name!r} enabled more than once")
        else:
            from_multi.append(entry.name)
    return tuple([n for n in explicit if n in overrides] + from_multi + [n for n in explicit if n not in overrides])


def _score_weights(scored: Sequence[str], merged: Mapping[str, PluginSetDoc]) -> dict[str, int]:
    """Weight per Score plugin: the one given at the score point, else at multiPoint; kube
    takes an unset or zero weight as 1."""
    explicit_weights = {entry.name: entry.weight for entry in merged["score"].enabled}
    multi_weights = {entry.name: entry.weight for entry in merged["multiPoint"].enabled}
    weights: dict[str, int] = {}
    for name in scored:
        weight = explicit_weights.get(name)
        if weight is None:
            weight = multi_weights.get(name)
        weights[name] = weight or 1
    return weights


def _plugin_args(
    profile: ProfileDoc,
    used: Mapping[str, None],
    base: _Base,
    registry: Mapping[str, type[Plugin]],
    where: str,
    errors: list[str],
) -> dict[str, PluginArgs]:
    """Validated args of every plugin the profile uses or configures: its ``pluginConfig``
    entry, else the built-in one, else the Args model's defaults."""
    known = ", ".join(sorted(registry))
    config_by_name: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for index, entry in enumerate(profile.pluginConfig):
        path = f"{where}.pluginConfig[{index}]"
        if entry.name not in registry:
            errors.append(f"{path}.name: {_unknown_plugin(entry.name, known)}")
        elif entry.name in config_by_name:
            errors.append(f"{path}.name: duplicate pluginConfig for {entry.name!r}")
        else:
            config_by_name[entry.name] = (index, entry.args)
    args: dict[str, PluginArgs] = {}
    for name in sorted(set(used) | set(config_by_name)):
        cls = registry.get(name)
        if cls is None:
            continue
        if name in config_by_name:
            index, raw = config_by_name[name]
            path = f"{where}.pluginConfig[{index}].args"
        else:
            raw, path = base.plugin_config.get(name, {}), f"(built-in pluginConfig {name}).args"
        try:
            args[name] = cls.Args.model_validate(dict(raw))
        except ValidationError as exc:
            errors.extend(_pydantic_errors(exc, path))
    return args
