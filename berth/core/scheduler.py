"""Running a profile's plugins over a ClusterState: one scheduling cycle per pod.

:class:`Framework` is one profile's plugins, instantiated from a :class:`SchedulerConfig`;
:class:`Scheduler` holds one Framework per profile and picks it by the pod's ``schedulerName``.
A cycle's parts are in their own modules: :mod:`~berth.core.filtering` (PreFilter, Filter),
:mod:`~berth.core.scoring` (PreScore, Score, NormalizeScore, weights) and
:mod:`~berth.core.ranking` (selection); Reserve, Permit and PostFilter run here.

Selection differs from kube-scheduler on purpose, so that a decision is a pure function of the
pod, the snapshot and the configuration (replayable, auditable): by default every node is
evaluated (kube's default is an adaptive ``percentageOfNodesToScore``; Berth's is all nodes, for
decision quality), and among the nodes with the highest total score the one with the lowest
tie-break key wins — a hash of (pod UID, node name), see
:func:`berth.core.hashing.tie_break_keys` — instead of a random pick. An explicit
``percentageOfNodesToScore`` (or a per-cycle ``max_nodes_to_score``, a pool's
``fastScheduling.maxNodesToScore``) turns sampling on, with kube's arithmetic but a start derived
from the pod UID instead of kube's rotating start index, so it stays replayable
(:mod:`berth.core.filtering`).

The cycle never mutates the state. The caller commits a placed (or held) decision with
``state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from berth.core import messages
from berth.core.config import DEFAULT_PROFILE, SchedulerConfig
from berth.core.decision import Decision, NodeScore, RejectionGroup, pack_node_groups
from berth.core.filtering import Feasibility, ProfileFilters, Sampling
from berth.core.framework import (
    MAX_NODE_SCORE,
    Code,
    CycleContext,
    Diagnosis,
    FilterPlugin,
    NodeArray,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from berth.core.hashing import canonical_json, sha256_hex
from berth.core.observe import NOT_TIMED, CycleObserver, CycleTimer
from berth.core.ranking import TOTAL_LIMIT, rank, top_scores
from berth.core.registry import REGISTRY
from berth.core.scoring import ProfileScorer, Scores
from berth.core.state import ClusterState
from berth.schemas.cluster import PodInfo

__all__ = ["Feasibility", "Framework", "Scheduler", "Scores"]

_CODE_NAMES = MappingProxyType(
    {
        Code.UNSCHEDULABLE: "Unschedulable",
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
        Code.ERROR: "Error",
    }
)


class Framework:
    """One profile: its plugins per extension point, in configured order, with weights.

    Build once per configuration; :meth:`schedule` may be called any number of times, on any
    number of states. Instances hold no per-cycle state.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        profile: str = DEFAULT_PROFILE,
        registry: Mapping[str, type[Plugin]] | None = None,
    ) -> None:
        if registry is None:
            registry = REGISTRY
        resolved = config.profile(profile)
        self.profile = resolved
        self.name = resolved.scheduler_name
        self.config_hash = config.hash
        self.keep_top_scores = resolved.keep_top_scores
        instances = {name: registry[name](resolved.args.get(name)) for name in resolved.plugin_names()}
        self.plugins: Mapping[str, Plugin] = instances
        for plugin in instances.values():
            plugin.bind_framework(self)

        def at(point: str) -> list[Any]:
            return [instances[name] for name in resolved.points.get(point, ())]

        self.pre_filter_plugins: list[PreFilterPlugin] = at("preFilter")
        self.filter_plugins: list[FilterPlugin] = at("filter")
        self.post_filter_plugins: list[PostFilterPlugin] = at("postFilter")
        self.pre_score_plugins: list[PreScorePlugin] = at("preScore")
        self.score_plugins: list[ScorePlugin] = at("score")
        self.weights: Mapping[str, int] = dict(resolved.weights)
        self.reserve_plugins: list[ReservePlugin] = at("reserve")
        self.permit_plugins: list[PermitPlugin] = at("permit")
        # Selection packs (total, tie-break hash) into one int64: totals must stay below 2**22.
        top_total = MAX_NODE_SCORE * sum(self.weights.values())
        if top_total >= TOTAL_LIMIT:
            raise ValueError(
                f"profile {self.name!r}: score weights sum to {sum(self.weights.values())}, too large to rank exactly"
            )
        self._extension_factories = tuple(
            {ext.KEY: ext for plugin in instances.values() for ext in plugin.STATE_EXTENSIONS}.values()
        )
        self.filters = ProfileFilters(self.pre_filter_plugins, self.filter_plugins, self.config_hash, self.name)
        self.scorer = ProfileScorer(
            self.pre_score_plugins, self.score_plugins, self.weights, self.config_hash, self.name
        )
        self.sampling = Sampling(resolved.percentage_of_nodes_to_score, None, bool(self.score_plugins))
        """How many feasible nodes a cycle looks for (every node unless configured)."""
        self.observer: CycleObserver | None = None
        """Times the cycles of :meth:`schedule` (:mod:`berth.core.observe`); None: not timed."""

    # ------------------------------------------------------------------ public entry points

    def prepare(self, state: ClusterState) -> None:
        """Attach the state extensions this profile's plugins need (once per state)."""
        for factory in self._extension_factories:
            state.ensure_extension(factory)

    def schedule(self, pod: PodInfo, state: ClusterState, *, max_nodes_to_score: int | None = None) -> Decision:
        """One scheduling cycle for ``pod`` on ``state`` → a sealed :class:`Decision`.
        The state is not modified (extensions may be attached on first use).
        ``max_nodes_to_score``: stop filtering after that many feasible nodes (a pool's
        ``fastScheduling.maxNodesToScore``), on top of the profile's percentage."""
        self.prepare(state)
        timer = NOT_TIMED if self.observer is None else CycleTimer(self.observer, self.name)
        cycle = CycleContext(pod, state, self.name, self, timer)
        base: dict[str, Any] = {
            "pod_uid": pod.uid,
            "pod": pod.key,
            "profile": self.name,
            "pod_hash": sha256_hex(state.pod_json(pod)),
            "snapshot_hash": state.snapshot_hash(),
            "config_hash": self.config_hash,
        }
        if len(state.nodes) == 0:
            # kube-scheduler's ErrNoNodesAvailable: no FitError, no preemption attempt.
            return Decision(
                status="unschedulable", message=messages.NO_NODES_TO_SCHEDULE, nodes_total=0, feasible_nodes=0, **base
            ).sealed()
        sampling = self.sampling
        if max_nodes_to_score is not None:
            sampling = Sampling(sampling.percentage, max_nodes_to_score, sampling.scoring)
        feasibility = self.filters.find_feasible(cycle, None, sampling)
        diagnosis = feasibility.diagnosis
        rejections, node_groups, width = _summarise(diagnosis)
        summary: dict[str, Any] = {
            "nodes_total": int(diagnosis.nodes.size),
            "feasible_nodes": int(feasibility.feasible.size),
            "rejections": rejections,
            "node_groups": node_groups,
            "node_group_width": width,
        }
        error = next((s for s in diagnosis.statuses if s.code is Code.ERROR), None)
        if error is not None:
            return Decision(status="error", message=f"{error.plugin}: {error.message}", **base, **summary).sealed()
        if feasibility.feasible.size == 0:
            return self._unschedulable(cycle, diagnosis, base, summary)

        scores = self.scorer.score(cycle, feasibility.feasible)
        if scores.error is not None:
            return Decision(
                status="error", message=f"{scores.error.plugin}: {scores.error.message}", **base, **summary
            ).sealed()
        ranked = rank(pod, state, scores, max(1, self.keep_top_scores))
        top = top_scores(state, scores, ranked[: self.keep_top_scores])
        return self._reserve_and_permit(cycle, int(scores.nodes[ranked[0]]), base, summary, top)

    def find_feasible(self, pod: PodInfo, state: ClusterState, nodes: Sequence[str] | None = None) -> Feasibility:
        """PreFilter + Filter from scratch for ``pod`` on ``state``, optionally only on the
        named nodes (others are ignored, not reported). For preemption's what-ifs: remove the
        victims from the state, call this, add them back."""
        self.prepare(state)
        return self.filters.find_feasible(CycleContext(pod, state, self.name, self), nodes)

    def score(self, cycle: CycleContext, feasible: NodeArray) -> Scores:
        """PreScore + Score + NormalizeScore + weights over ``feasible`` (name order)."""
        return self.scorer.score(cycle, feasible)

    # ------------------------------------------------------------------ cycle parts

    def _reserve_and_permit(
        self,
        cycle: CycleContext,
        chosen: int,
        base: dict[str, Any],
        summary: dict[str, Any],
        top: tuple[NodeScore, ...],
    ) -> Decision:
        """Reserve and Permit on the chosen node slot: the ``placed`` (or ``held``) decision,
        or, when a plugin fails, the reserved plugins undone and the pod rejected there."""
        timer = cycle.timer
        reserved: list[ReservePlugin] = []
        gpu_devices: tuple[int, ...] = ()
        gpu_milli: int | None = None
        started = timer.start()
        for plugin in self.reserve_plugins:
            plugin_started = timer.plugin_start()
            result = plugin.reserve(cycle, chosen)
            timer.plugin(plugin.NAME, "Reserve", result.status, plugin_started)
            reserved.append(plugin)
            if not result.status.is_success:
                timer.point("Reserve", result.status, started)
                self._unreserve(cycle, reserved, chosen)
                return self._rejected_on_node(result.status.with_plugin(plugin.NAME), base, summary, top)
            if result.gpu_devices:
                gpu_devices = tuple(result.gpu_devices)
            if result.gpu_milli is not None:
                gpu_milli = result.gpu_milli
        timer.point("Reserve", None, started)
        held = False
        started = timer.start()
        for permit in self.permit_plugins:
            plugin_started = timer.plugin_start()
            status = permit.permit(cycle, chosen).status.with_plugin(permit.NAME)
            timer.plugin(permit.NAME, "Permit", status, plugin_started)
            if status.code is Code.WAIT:
                held = True
            elif not status.is_success:
                timer.point("Permit", status, started)
                self._unreserve(cycle, reserved, chosen)
                return self._rejected_on_node(status, base, summary, top)
        timer.point("Permit", Status(Code.WAIT) if held else None, started)
        return Decision(
            status="held" if held else "placed",
            node=cycle.state.nodes.name_of(chosen),
            gpu_devices=gpu_devices,
            gpu_milli=gpu_milli,
            top_scores=top,
            **base,
            **summary,
        ).sealed()

    def _unreserve(self, cycle: CycleContext, reserved: list[ReservePlugin], node: int) -> None:
        started = cycle.timer.start()
        for plugin in reversed(reserved):
            plugin_started = cycle.timer.plugin_start()
            plugin.unreserve(cycle, node)
            cycle.timer.plugin(plugin.NAME, "Unreserve", None, plugin_started)
        cycle.timer.point("Unreserve", None, started)

    def _unschedulable(
        self, cycle: CycleContext, diagnosis: Diagnosis, base: dict[str, Any], summary: dict[str, Any]
    ) -> Decision:
        post, postfilter_message = self._post_filter(cycle, diagnosis)
        prefilter = diagnosis.prefilter_status
        message = messages.fit_error(
            int(diagnosis.nodes.size),
            _reason_counts(diagnosis),
            prefilter_message=prefilter.message if prefilter else "",
            postfilter_message=postfilter_message,
        )
        if post is not None and post.nominated_node:
            return Decision(
                status="preempting",
                message=message,
                nominated_node=post.nominated_node,
                victims=tuple(post.victims),
                **base,
                **summary,
            ).sealed()
        return Decision(status="unschedulable", message=message, **base, **summary).sealed()

    def _post_filter(self, cycle: CycleContext, diagnosis: Diagnosis) -> tuple[PostFilterResult | None, str]:
        """The PostFilter plugins in order, as kube runs them: the first that nominates a node
        ends the run, and the FitError then carries no PostFilter part (kube's status of a
        successful PostFilter has no message); otherwise every rejecting plugin's message counts,
        joined by ``", "`` (kube: ``no new claims to deallocate, preemption: ...``)."""
        said: list[str] = []
        timer = cycle.timer
        started = timer.start()
        for plugin in self.post_filter_plugins:
            plugin_started = timer.plugin_start()
            result = plugin.post_filter(cycle, diagnosis)
            timer.plugin(plugin.NAME, "PostFilter", result.status, plugin_started)
            if result.status.is_success or result.nominated_node:
                timer.point("PostFilter", None, started)
                return result, ""
            if result.message:
                said.append(result.message)
        timer.point("PostFilter", Status(Code.UNSCHEDULABLE), started)
        return None, ", ".join(said)

    def _rejected_on_node(
        self, status: Status, base: dict[str, Any], summary: dict[str, Any], top: tuple[NodeScore, ...]
    ) -> Decision:
        if status.code is Code.ERROR:
            return Decision(
                status="error", message=f"{status.plugin}: {status.message}", top_scores=top, **base, **summary
            ).sealed()
        # kube reports a Reserve/Permit rejection as a FitError over the one chosen node.
        message = messages.fit_error(1, {reason: 1 for reason in status.reasons})
        return Decision(status="unschedulable", message=message, top_scores=top, **base, **summary).sealed()


def _reason_counts(diagnosis: Diagnosis) -> dict[str, int]:
    counts: dict[str, int] = {}
    rejected = diagnosis.node_codes[diagnosis.node_codes >= 0]
    per_status = np.bincount(rejected, minlength=len(diagnosis.statuses))
    for status, count in zip(diagnosis.statuses, per_status.tolist(), strict=True):
        if count:
            for reason in status.reasons:
                counts[reason] = counts.get(reason, 0) + count
    return counts


def _summarise(diagnosis: Diagnosis) -> tuple[tuple[RejectionGroup, ...], str, int]:
    """Rejection groups (one per status, with its node count) and the packed per-node index."""
    codes = diagnosis.node_codes
    if not diagnosis.statuses:  # nothing rejected (the common case)
        return (), "", 1
    per_status = np.bincount(codes[codes >= 0], minlength=len(diagnosis.statuses)).tolist()
    groups = tuple(
        RejectionGroup(plugin=s.plugin, code=_CODE_NAMES.get(s.code, s.code.name), reasons=s.reasons, count=count)
        for s, count in zip(diagnosis.statuses, per_status, strict=True)
    )
    packed, width = pack_node_groups(codes, len(groups))
    return groups, packed, width


class Scheduler:
    """Every profile of a configuration; routes a pod to the profile named by its
    ``schedulerName`` (or ``default_profile``)."""

    def __init__(self, config: SchedulerConfig, registry: Mapping[str, type[Plugin]] | None = None) -> None:
        self.config = config
        self.frameworks = {p.scheduler_name: Framework(config, p.scheduler_name, registry) for p in config.profiles}

    @property
    def config_hash(self) -> str:
        return self.config.hash

    def schedule(
        self, pod: PodInfo, state: ClusterState, profile: str | None = None, *, max_nodes_to_score: int | None = None
    ) -> Decision:
        framework = self.frameworks.get(profile or pod.scheduler_name)
        if framework is None:
            known = ", ".join(sorted(self.frameworks))
            return Decision(
                pod_uid=pod.uid,
                pod=pod.key,
                profile=profile or pod.scheduler_name,
                status="error",
                message=f"no profile {profile or pod.scheduler_name!r} (profiles: {known})",
                pod_hash=sha256_hex(canonical_json(pod)),
                snapshot_hash=state.snapshot_hash(),
                config_hash=self.config.hash,
            ).sealed()
        return framework.schedule(pod, state, max_nodes_to_score=max_nodes_to_score)
