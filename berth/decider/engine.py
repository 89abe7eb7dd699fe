"""The placement engine behind the decision cell's port: berth.core's Scheduler over a ClusterState.

One :class:`CoreEngine` per cell. Its configuration document is the scheduler configuration (as
the operator wrote it) plus the pools' scaling policies, canonically encoded: the cell announces
it, the audit stores it, and replay rebuilds exactly this engine from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from hashlib import sha256
from pathlib import Path
from typing import Any

import yaml

from berth.core.config import SchedulerConfig, parse_config
from berth.core.gangs import StateGangHost, place_gang
from berth.core.placement import place_pod
from berth.core.scheduler import Scheduler
from berth.core.state import ClusterState
from berth.schemas import NodeInfo, NodeVerdict, PodInfo, PolicyObserved, RejectedNodes

from .pools import PoolPolicy, parse_pools
from .ports import EngineOutcome, Placement

NODE_LEVEL_VERDICTS = 100
"""Up to this many nodes, every filtered-out node gets its own verdict; beyond, verdicts are
grouped by reason with a count (a 5,000-node decision stays small)."""


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def default_scheduler_document() -> dict[str, Any]:
    """What the decision service runs without ``--config``: the core's built-in profile (the
    same configuration ``berth simulate`` runs)."""
    from berth.core.config import default_document

    return default_document()


class CoreEngine:
    """Implements :class:`berth.decider.PlacementEngine` with the pure core."""

    def __init__(self, scheduler_document: dict[str, Any], pools: dict[str, PoolPolicy] | None = None) -> None:
        self.pools = dict(sorted((pools or {}).items()))
        self.config: SchedulerConfig = parse_config(scheduler_document)
        self.config_document = _canonical({
            "scheduler": scheduler_document,
            "pools": {key: policy.model_dump(mode="json") for key, policy in self.pools.items()},
        })
        self.config_hash = sha256(self.config_document.encode()).hexdigest()
        self.config_version = self.config_hash[:12]
        self.scheduler = Scheduler(self.config)
        self.state = ClusterState()
        self.profile = next(iter(self.scheduler.frameworks))
        for framework in self.scheduler.frameworks.values():
            framework.prepare(self.state)
            for plugin in framework.post_filter_plugins:
                bind = getattr(plugin, "bind_framework", None)
                if callable(bind):
                    bind(framework)

    # -- snapshot -------------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        self.state.upsert_node(node)

    def remove_node(self, name: str) -> None:
        self.state.remove_node(name)

    def upsert_bound_pod(self, pod: PodInfo) -> None:
        if self.state.node(pod.node_name or "") is None:
            return  # a pod on a node of another cell (or one not observed yet) holds nothing here
        self.state.upsert_bound_pod(pod)

    def remove_pod(self, uid: str) -> None:
        self.state.remove_pod(uid)

    def upsert_policy(self, event: PolicyObserved) -> None:
        if event.kind == "AgentPool":
            return  # pools scale through the pools file; placement does not read them (yet)
        if event.kind == "Namespace" and event.namespace_info is not None:
            # Namespace labels are what namespaceSelector terms match, not a policy object.
            self.state.upsert_namespace(event.namespace_info.name, event.namespace_info.labels)
            return
        obj = event.obj
        self.state.upsert_policy(event.kind, getattr(obj, "namespace", ""), obj.name, obj)  # type: ignore[attr-defined]

    def remove_policy(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Namespace":
            self.state.remove_namespace(name)
            return
        self.state.remove_policy(kind, namespace, name)

    def snapshot_hash(self) -> str:
        return self.state.snapshot_hash()

    # -- decisions ------------------------------------------------------------------------------

    def place(self, pods: Sequence[PodInfo], *, min_member: int | None = None,
              preempt: bool = True) -> EngineOutcome:
        if min_member is not None:
            return self._place_gang(pods, min_member)
        [pod] = pods
        # The same steps as `berth simulate` (berth.core.placement), assumed on the state.
        result = place_pod(self.scheduler, self.state, pod, self.profile, preempt=preempt)
        decision = result.decision
        # Where each victim holds its room, also when it is only assumed (its own binding
        # still in flight, so its PodInfo names no node yet): the cell keeps that node for the
        # preemptor until the victim is really gone.
        victims = [placed.pod.model_copy(update={"node_name": placed.node_name,
                                                 "gpu_devices": placed.gpu_devices})
                   for placed in result.victims]
        if not result.placed:
            return EngineOutcome(message=decision.message, verdicts=self._verdicts(decision),
                                 rejected=_rejected_nodes(decision))
        return EngineOutcome(
            placements=(Placement(pod, decision.node, tuple(decision.gpu_devices), decision.gpu_milli),),
            verdicts=self._verdicts(decision), victims=tuple(sorted(victims, key=lambda p: p.key)),
            nominated_node=decision.node if victims else None,
        )

    def _place_gang(self, pods: Sequence[PodInfo], min_member: int) -> EngineOutcome:
        group = f"{pods[0].namespace}/{pods[0].pod_group}"
        host = StateGangHost(self.scheduler, self.state, self.profile)
        result = place_gang(host, pods, min_member, group)
        if not result.placed:
            # Every member has a message; the first member's (queue order) speaks for the gang.
            return EngineOutcome(message=result.messages.get(pods[0].uid, "")
                                 or next(iter(result.messages.values()), ""))
        placements = tuple(Placement(pod, decision.node, tuple(decision.gpu_devices), decision.gpu_milli)
                           for pod, decision in result.placements)
        return EngineOutcome(placements=placements)

    # -- inference pools (berth.decider.cell): probes and per-pool score terms -----------------

    def probe_placements(self, pods: Sequence[PodInfo]) -> tuple[str, ...]:
        """Where ``pods`` would go, placed one after the other on the snapshot as it is, without
        preemption and without committing anything: each is assumed only for the next one's
        sake (under a probe UID, so copies of one pod may be given) and released before
        returning — the snapshot hash is unchanged. Stops at the first pod that does not fit."""
        nodes: list[str] = []
        probes: list[str] = []
        try:
            for index, pod in enumerate(pods):
                copy = pod.model_copy(update={"uid": f"{pod.uid}~probe-{index}"})
                decision = self.scheduler.schedule(copy, self.state, self.profile)
                if decision.status != "placed":
                    break
                self.state.assume(copy, decision.node, decision.gpu_devices, decision.gpu_milli)
                probes.append(copy.uid)
                nodes.append(decision.node)
        finally:
            for uid in probes:
                self.state.remove_pod(uid)
        return tuple(nodes)

    def place_scored(self, pod: PodInfo, extra_scores: Sequence[tuple[str, int]]) -> EngineOutcome:
        """Place one pod like :meth:`place`, scored by the profile plus ``extra_scores`` (Score
        plugins and weights, e.g. a pool's ``(("NodeCost", 2),)``), without preemption: an
        unplaced outcome assumes nothing and the caller may fall back to :meth:`place`."""
        framework = self._scored_framework(tuple(extra_scores))
        decision = framework.schedule(pod, self.state)
        if decision.status not in ("placed", "held"):
            return EngineOutcome(message=decision.message, verdicts=self._verdicts(decision))
        self.state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)
        return EngineOutcome(
            placements=(Placement(pod, decision.node, tuple(decision.gpu_devices), decision.gpu_milli),),
            verdicts=self._verdicts(decision))

    def _scored_framework(self, extra: tuple[tuple[str, int], ...]) -> Any:
        cache: dict[tuple[tuple[str, int], ...], Any] = self.__dict__.setdefault("_scored_frameworks", {})
        framework = cache.get(extra)
        if framework is None:
            from berth.core.scheduler import Framework

            document = json.loads(self.config_document)["scheduler"]
            present = set(self.config.profile(self.profile).plugin_names())
            for profile in document.get("profiles") or [{"schedulerName": self.profile}]:
                if profile.get("schedulerName", self.profile) == self.profile:
                    enabled = (profile.setdefault("plugins", {}).setdefault("multiPoint", {})
                               .setdefault("enabled", []))
                    enabled += [{"name": name, "weight": weight} for name, weight in extra if name not in present]
            framework = Framework(parse_config(document), self.profile)
            framework.prepare(self.state)
            for plugin in framework.post_filter_plugins:
                bind = getattr(plugin, "bind_framework", None)
                if callable(bind):
                    bind(framework)
            cache[extra] = framework
        return framework

    def _verdicts(self, decision: Any) -> tuple[NodeVerdict, ...]:
        verdicts = [NodeVerdict(node=score.node, scores=dict(score.scores), total=score.total)
                    for score in decision.top_scores]
        if not decision.rejections:
            return tuple(verdicts)
        if decision.nodes_total <= NODE_LEVEL_VERDICTS:
            for node, group in decision.node_reasons(self.state.node_names()):
                if group is not None:
                    verdicts.append(NodeVerdict(node=node, reason=", ".join(group.reasons)))
        else:
            for group in decision.rejections:
                verdicts.append(NodeVerdict(node=f"{group.count} node(s)", reason=", ".join(group.reasons)))
        return tuple(verdicts)


def _rejected_nodes(decision: Any) -> RejectedNodes:
    """The FitError histogram of an unplaced decision: each rejection group's nodes count once
    for each of its reasons (as ``berth.core.messages.fit_error`` counts them)."""
    reasons: dict[str, int] = {}
    for group in decision.rejections:
        for reason in group.reasons:
            reasons[reason] = reasons.get(reason, 0) + group.count
    return RejectedNodes(nodes=decision.nodes_total, reasons=reasons)


def config_document(path: Path | None, pools: dict[str, PoolPolicy] | None = None) -> str:
    """The canonical document of the engine a decision cell would build from these files."""
    return CoreEngine(_scheduler_document(path), pools).config_document


def _scheduler_document(path: Path | None) -> dict[str, Any]:
    if path is None:
        return default_scheduler_document()
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a configuration document (a YAML mapping)")
    return data


def engine_factory(path: Path | None, pools: dict[str, PoolPolicy] | None = None) -> Callable[[], CoreEngine]:
    """A factory of fresh engines (one per cell), validated once now so errors show at start-up."""
    document = _scheduler_document(path)
    CoreEngine(document, pools)
    return lambda: CoreEngine(document, pools)


def engine_from_document(document: str) -> CoreEngine:
    """Rebuild the engine a cell announced (for replay): the inverse of ``config_document``."""
    data = json.loads(document)
    return CoreEngine(data["scheduler"], parse_pools({"pools": data.get("pools", {})}))


def load_pools(path: Path) -> dict[str, PoolPolicy]:
    return parse_pools(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})
