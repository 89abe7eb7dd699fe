"""Workloads written as Kubernetes manifests, plus one document for what happens over time.

A workload file is multi-document YAML (or JSON; a ``v1 List`` works too) holding the objects
:func:`berth.kube.manifests.load_documents` understands — Nodes, Pods, PodGroups, PriorityClasses,
ResourceQuotas, LimitRanges, PodDisruptionBudgets, AgentPools — and optionally one Timeline::

    apiVersion: sim.berth.io/v1alpha1
    kind: Timeline
    metadata: {name: demo}
    spec:
      spotNotices:    [{node: h100-a-003, atSeconds: 200, noticeSeconds: 120, provider: aws}]
      nodeRemovals:   [{node: l4-007, atSeconds: 700}]
      queueLag:       [{pool: llama-70b, namespace: serving, atSeconds: 30,
                        tokensInQueue: 50000, tokenRate: 2500}]
      queueLagBursts: [{pool: llama-70b, namespace: serving, atSeconds: 120, durationSeconds: 120,
                        intervalSeconds: 5, peakTokens: 200000, tokenRate: 3000}]

Pods say when they arrive and how long they run with the annotations
``sim.berth.io/arrival-seconds`` (default 0) and ``sim.berth.io/run-seconds`` (default: forever).
A burst becomes samples every ``intervalSeconds`` whose queue rises linearly from
``baseTokens`` to ``peakTokens`` at mid-burst and falls back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from berth.kube.manifests import ManifestError, load_documents
from berth.kube.replicas import AgentPool

from .model import (
    ANNOTATION_ARRIVAL,
    ANNOTATION_RUN,
    NodeRemoval,
    QueueLagSample,
    SpotNotice,
    TimedPod,
    Workload,
    WorkloadError,
    sort_pods,
)

TIMELINE_API_VERSION = "sim.berth.io/v1alpha1"
TIMELINE_KIND = "Timeline"


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class _SpotNotice(_Spec):
    node: str
    at_seconds: float = Field(ge=0)
    notice_seconds: float = Field(default=120.0, gt=0)
    provider: str = "aws"


class _NodeRemoval(_Spec):
    node: str
    at_seconds: float = Field(ge=0)


class _QueueLag(_Spec):
    pool: str
    namespace: str = "default"
    at_seconds: float = Field(ge=0)
    tokens_in_queue: int = Field(ge=0)
    token_rate: float = Field(ge=0)
    active_sessions: int = Field(default=0, ge=0)
    mean_context_tokens: int | None = Field(default=None, ge=0)


class _QueueLagBurst(_Spec):
    pool: str
    namespace: str = "default"
    at_seconds: float = Field(ge=0)
    duration_seconds: float = Field(gt=0)
    interval_seconds: float = Field(default=5.0, gt=0)
    base_tokens: int = Field(default=0, ge=0)
    peak_tokens: int = Field(ge=0)
    token_rate: float = Field(ge=0)
    active_sessions: int = Field(default=0, ge=0)
    mean_context_tokens: int | None = Field(default=None, ge=0)

    def samples(self) -> list[QueueLagSample]:
        steps = max(1, math.floor(self.duration_seconds / self.interval_seconds))
        out = []
        for k in range(steps + 1):
            # A triangle: base at both ends, peak in the middle; integer tokens.
            height = 1.0 - abs(2.0 * k / steps - 1.0)
            tokens = self.base_tokens + round((self.peak_tokens - self.base_tokens) * height)
            sessions = round(self.active_sessions * max(height, 0.1)) if self.active_sessions else 0
            out.append(
                QueueLagSample(
                    pool=self.pool,
                    namespace=self.namespace,
                    at_s=self.at_seconds + k * self.interval_seconds,
                    tokens_in_queue=max(0, tokens),
                    token_rate=self.token_rate,
                    active_sessions=sessions,
                    mean_context_tokens=self.mean_context_tokens,
                )
            )
        return out


class _TimelineSpec(_Spec):
    spot_notices: list[_SpotNotice] = Field(default_factory=list)
    node_removals: list[_NodeRemoval] = Field(default_factory=list)
    queue_lag: list[_QueueLag] = Field(default_factory=list)
    queue_lag_bursts: list[_QueueLagBurst] = Field(default_factory=list)


def _is_timeline(doc: Any) -> bool:
    return isinstance(doc, Mapping) and doc.get("kind") == TIMELINE_KIND


def _split(documents: Iterable[Any]) -> tuple[list[Any], list[tuple[int, Mapping[str, Any]]]]:
    """Kubernetes objects and Timelines. A Timeline's place among the objects is kept as an empty
    document (or the List loses that item), so that errors still count documents as the file does."""
    objects: list[Any] = []
    timelines: list[tuple[int, Mapping[str, Any]]] = []
    for number, doc in enumerate(documents, start=1):
        if _is_timeline(doc):
            timelines.append((number, doc))
            objects.append(None)
        elif (
            isinstance(doc, Mapping)
            and str(doc.get("kind", "")).endswith("List")
            and isinstance(doc.get("items"), list)
        ):
            timelines += [(number, item) for item in doc["items"] if _is_timeline(item)]
            objects.append({**doc, "items": [item for item in doc["items"] if not _is_timeline(item)]})
        else:
            objects.append(doc)
    return objects, timelines


def _seconds(pod_ref: str, annotations: Mapping[str, str], key: str) -> float | None:
    text = annotations.get(key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise WorkloadError(
            f'Pod {pod_ref}: metadata.annotations.{key}: {text!r} must be a number of seconds, e.g. "90" or "2.5"'
        ) from None
    if not math.isfinite(value) or value < 0:
        raise WorkloadError(f"Pod {pod_ref}: metadata.annotations.{key}: {text!r} must be >= 0")
    return value


def _timeline(number: int, doc: Mapping[str, Any]) -> _TimelineSpec:
    if doc.get("apiVersion") != TIMELINE_API_VERSION:
        raise WorkloadError(
            f"Timeline (document {number}): apiVersion: {doc.get('apiVersion')!r} must be {TIMELINE_API_VERSION}"
        )
    try:
        return _TimelineSpec.model_validate(doc.get("spec") or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise WorkloadError(f"Timeline (document {number}): {problems}") from None


def from_documents(documents: Iterable[Any], *, name: str = "manifests") -> Workload:
    """Convert parsed manifest documents (and Timelines) into a workload.

    Raises :class:`WorkloadError` naming the object and field for anything it cannot accept, as
    :func:`berth.kube.manifests.load_documents` does. Pods that LimitRange admission would refuse
    are left out with a warning, as the API server would never have created them. Timeline events
    that name unknown nodes are errors (a typo would otherwise silently do nothing).
    """
    objects, timelines = _split(documents)
    try:
        bundle = load_documents(objects)
    except ManifestError as exc:
        raise WorkloadError(str(exc)) from exc
    warnings = [w for w in bundle.warnings if "AgentPool" not in w]  # the simulator does act on them
    pods: list[TimedPod] = []
    for manifest in bundle.pods:
        pod = manifest.pod
        if manifest.rejection is not None:
            warnings.append(f"Pod {pod.key}: left out, admission refuses it: {manifest.rejection}")
            continue
        at_s = _seconds(pod.key, pod.annotations, ANNOTATION_ARRIVAL) or 0.0
        run_s = _seconds(pod.key, pod.annotations, ANNOTATION_RUN)
        pods.append(TimedPod(pod=pod, at_s=at_s, run_s=run_s))

    spot: list[SpotNotice] = []
    removals: list[NodeRemoval] = []
    lag: list[QueueLagSample] = []
    for number, doc in timelines:
        spec = _timeline(number, doc)
        spot += [SpotNotice(s.node, s.at_seconds, s.notice_seconds, s.provider) for s in spec.spot_notices]
        removals += [NodeRemoval(r.node, r.at_seconds) for r in spec.node_removals]
        lag += [
            QueueLagSample(
                pool=q.pool,
                namespace=q.namespace,
                at_s=q.at_seconds,
                tokens_in_queue=q.tokens_in_queue,
                token_rate=q.token_rate,
                active_sessions=q.active_sessions,
                mean_context_tokens=q.mean_context_tokens,
            )
            for q in spec.queue_lag
        ]
        for burst in spec.queue_lag_bursts:
            lag += burst.samples()
    node_names = {node.name for node in bundle.nodes}
    for event in [*spot, *removals]:
        if event.node not in node_names:
            kind = "spotNotices" if isinstance(event, SpotNotice) else "nodeRemovals"
            raise WorkloadError(f"Timeline: spec.{kind}: node {event.node!r} is not a Node of this workload")
    pools = tuple(AgentPool(p.namespace, p.name, dict(p.spec)) for p in bundle.agent_pools)
    pool_keys = {pool.key for pool in pools}
    for sample in lag:
        if f"{sample.namespace}/{sample.pool}" not in pool_keys:
            warnings.append(
                f"Timeline: queue lag for {sample.namespace}/{sample.pool}, which is not an "
                "AgentPool of this workload (published anyway)"
            )
            pool_keys.add(f"{sample.namespace}/{sample.pool}")  # warn once per pool
    return Workload(
        name=name,
        nodes=bundle.nodes,
        policies=(
            *bundle.namespaces,
            *bundle.priority_classes,
            *bundle.limit_ranges,
            *bundle.resource_quotas,
            *bundle.pod_disruption_budgets,
            *bundle.pod_groups,
        ),
        pods=sort_pods(pods),
        pools=pools,
        spot_notices=tuple(sorted(spot, key=lambda s: s.at_s)),
        queue_lag=tuple(sorted(lag, key=lambda q: q.at_s)),
        node_removals=tuple(sorted(removals, key=lambda r: r.at_s)),
        warnings=tuple(warnings),
    )


def read_documents(path: Path) -> list[Any]:
    """Parse a YAML (multi-document) or JSON file into documents."""
    text = path.read_text()
    try:
        if path.suffix.lower() == ".json":
            return [json.loads(text)]
        return list(yaml.safe_load_all(text))
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {exc}") from exc


def load_manifests(path: Path) -> Workload:
    return from_documents(read_documents(path), name=path.name)


def write_documents(documents: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write documents as multi-document YAML (keys in the order given); returns how many."""
    docs = list(documents)
    with path.open("w") as out:
        yaml.safe_dump_all(docs, out, sort_keys=False, default_flow_style=None, width=120)
    return len(docs)
