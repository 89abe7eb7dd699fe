"""Small builders for core tests: nodes, pods, states and schedulers in one line each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from berth.schemas.cluster import (
    Affinity,
    GpuDevice,
    LabelSelector,
    LabelSelectorRequirement,
    NodeAffinity,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PodInfo,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)

from berth.core.config import parse_config
from berth.core.registry import REGISTRY
from berth.core.scheduler import Framework, Scheduler
from berth.core.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GI = 2**30
MI = 2**20
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(
    name: str,
    *,
    cpu: int = 4000,
    memory: int = 32 * GI,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    unschedulable: bool = False,
    hostname: bool = True,
    devices: bool = True,
    **extra: int,
) -> NodeInfo:
    """A node; ``extra`` are more allocatable resources, ``__`` standing for ``/``, e.g.
    ``node("n", vendor__fpga=1)``; ``gpu=8`` gives ``nvidia.com/gpu: 8`` and (``devices``)
    eight GPU devices for Berth's device-level plugins."""
    allocatable: dict[str, int] = {"cpu": cpu, "memory": memory, "pods": pods}
    for key, amount in extra.items():
        allocatable["nvidia.com/gpu" if key == "gpu" else key.replace("__", "/")] = amount
    all_labels = {HOST: name} if hostname else {}
    all_labels.update(labels or {})
    gpus = tuple(GpuDevice(index=i) for i in range(allocatable.get("nvidia.com/gpu", 0)) if devices)
    return NodeInfo(
        name=name,
        labels=all_labels,
        taints=tuple(taints),
        gpus=gpus,
        unschedulable=unschedulable,
        allocatable=allocatable,
        capacity=allocatable,
    )


def pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: int = 100,
    memory: int = 0,
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, int] | None = None,
    uid: str | None = None,
    **fields: Any,
) -> PodInfo:
    reqs: dict[str, int] = {}
    if cpu:
        reqs["cpu"] = cpu
    if memory:
        reqs["memory"] = memory
    reqs.update(requests or {})
    return PodInfo(
        uid=uid or f"uid-{namespace}-{name}",
        namespace=namespace,
        name=name,
        labels=dict(labels or {}),
        requests=reqs,
        scheduler_name="berth",
        creation_time=T0,
        **fields,
    )


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=effect)  # type: ignore[arg-type]  # a str for a Literal field, validated by pydantic


def toleration(key: str = "", operator: str = "Equal", value: str = "", effect: str | None = None) -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)  # type: ignore[arg-type]  # a str for a Literal field, validated by pydantic


def expr(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)  # type: ignore[arg-type]  # a str for a Literal field, validated by pydantic


def term(*expressions: NodeSelectorRequirement, fields: Iterable[NodeSelectorRequirement] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=expressions, match_fields=tuple(fields))


def node_affinity(
    required: Iterable[NodeSelectorTerm] | None = None, preferred: Iterable[tuple[int, NodeSelectorTerm]] = ()
) -> Affinity:
    return Affinity(
        node_affinity=NodeAffinity(
            required=None if required is None else tuple(required),
            preferred=tuple(PreferredSchedulingTerm(weight=w, preference=t) for w, t in preferred),
        )
    )


def selector(
    match_labels: Mapping[str, str] | None = None, *expressions: tuple[str, str, tuple[str, ...]]
) -> LabelSelector:
    return LabelSelector(
        match_labels=dict(match_labels or {}),
        match_expressions=tuple(
            LabelSelectorRequirement(key=k, operator=op, values=v)  # type: ignore[arg-type]  # a str for a Literal field, validated by pydantic
            for k, op, v in expressions
        ),
    )


def pod_term(
    labels: Mapping[str, str] | None,
    key: str = HOST,
    *,
    namespaces: Iterable[str] = (),
    namespace_selector: LabelSelector | None = None,
    match_label_keys: Iterable[str] = (),
) -> PodAffinityTerm:
    return PodAffinityTerm(
        label_selector=None if labels is None else selector(labels),
        topology_key=key,
        namespaces=tuple(namespaces),
        namespace_selector=namespace_selector,
        match_label_keys=tuple(match_label_keys),
    )


def pod_affinity(
    required: Iterable[PodAffinityTerm] = (),
    preferred: Iterable[tuple[int, PodAffinityTerm]] = (),
    *,
    anti_required: Iterable[PodAffinityTerm] = (),
    anti_preferred: Iterable[tuple[int, PodAffinityTerm]] = (),
) -> Affinity:
    def group(req: Iterable[PodAffinityTerm], pref: Iterable[tuple[int, PodAffinityTerm]]) -> PodAffinity | None:
        req, pref = tuple(req), tuple(pref)
        if not req and not pref:
            return None
        return PodAffinity(required=req, preferred=tuple(WeightedPodAffinityTerm(weight=w, term=t) for w, t in pref))

    return Affinity(pod_affinity=group(required, preferred), pod_anti_affinity=group(anti_required, anti_preferred))


def spread(
    max_skew: int, key: str, labels: Mapping[str, str] | None, *, hard: bool = True, **fields: Any
) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable="DoNotSchedule" if hard else "ScheduleAnyway",
        label_selector=None if labels is None else selector(labels),
        **fields,
    )


def state_of(*nodes: NodeInfo, placed: Iterable[tuple[PodInfo, str]] = ()) -> ClusterState:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for p, where in placed:
        state.assume(p, where)
    return state


def profile(
    plugins: Mapping[str, Iterable[str | tuple[str, int]]] | None = None,
    plugin_config: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    only: bool = True,
    registry: Mapping[str, type] = REGISTRY,
    keep_top_scores: int = 10,
) -> Framework:
    """A Framework whose profile enables exactly ``plugins`` per extension point (``only``:
    every default disabled first)."""
    plugin_doc: dict[str, Any] = {}
    if only:
        # The built-in profile enables everything through multiPoint; disabling "*" there
        # removes it all (disabling "*" at a specific point would also stop multiPoint
        # expansion into that point, as in kube).
        plugin_doc["multiPoint"] = {"disabled": [{"name": "*"}]}
    for point, names in (plugins or {}).items():
        entries = []
        for item in names:
            if isinstance(item, tuple):
                entries.append({"name": item[0], "weight": item[1]})
            else:
                entries.append({"name": item})
        plugin_doc.setdefault(point, {})["enabled"] = entries
    document = {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "BerthSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "berth",
                "plugins": plugin_doc,
                "keepTopScores": keep_top_scores,
                "pluginConfig": [{"name": k, "args": dict(v)} for k, v in (plugin_config or {}).items()],
            }
        ],
    }
    return Framework(parse_config(document, registry), "berth", registry)


def filters(*names: str, **config: Mapping[str, Any]) -> Framework:
    """A profile that runs these plugins as PreFilter/Filter where they implement them."""
    return profile({"multiPoint": list(names)}, config, only=True)


def default_scheduler() -> Scheduler:
    from berth.core.config import default_config

    return Scheduler(default_config())


def feasible_names(framework: Framework, p: PodInfo, state: ClusterState) -> list[str]:
    return state.nodes.names_of(framework.find_feasible(p, state).feasible)


def rejections(framework: Framework, p: PodInfo, state: ClusterState) -> dict[str, tuple[str, ...]]:
    """node name → reasons, for rejected nodes."""
    diagnosis = framework.find_feasible(p, state).diagnosis
    out = {}
    for slot, code in zip(diagnosis.nodes.tolist(), diagnosis.node_codes.tolist(), strict=True):
        if code >= 0:
            out[state.nodes.name_of(slot)] = diagnosis.statuses[code].reasons
    return out


def scores(framework: Framework, p: PodInfo, state: ClusterState, plugin: str) -> dict[str, int]:
    """node name → the plugin's weighted score over the feasible nodes (empty if skipped)."""
    from berth.core.framework import CycleContext

    cycle = CycleContext(p, state, framework.name)
    feasibility = framework.filters.find_feasible(cycle, None)
    result = framework.score(cycle, feasibility.feasible)
    values = result.per_plugin.get(plugin)
    if values is None:
        return {}
    return dict(zip(state.nodes.names_of(result.nodes), values.tolist(), strict=True))
