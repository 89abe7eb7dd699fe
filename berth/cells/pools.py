"""Inference pools' policies: the pools file, and an AgentPool from the cluster over it.

A pool's policy is an :class:`~berth.schemas.agentpool.AgentPoolSpec` (the AgentPool CRD's spec)
that can be scaled: it has ``tokensPerSecondPerReplica`` and ``ttftSloMs``. The pools file,
shared by the token-lag and decision services, maps ``namespace/name`` to such specs::

    pools:
      serving/llama-70b: {tokensPerSecondPerReplica: 2500, ttftSloMs: 2000, maxReplicas: 16,
                          modelLoadSeconds: 90, scheduling: {costOptimization: {spotEnabled: true}}}

(snake_case keys — ``tokens_per_second_per_replica`` … — are accepted too). An AgentPool observed
in the cluster overrides the file's entry key by key (:func:`merge_cluster_spec`).

The scaling rule itself is :mod:`berth.cells.scaling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.schemas.agentpool import AgentPoolSpec, AgentPoolSpecError, error_text


class PoolPolicy(AgentPoolSpec):
    """A scalable pool: an AgentPool spec with its token rate and TTFT SLO. Unknown keys are
    refused here (a pools file is ours to get right), unlike in the cluster's objects."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    ttft_slo_ms: float = Field(gt=0, alias="ttftSloMs")
    tokens_per_second_per_replica: float = Field(gt=0, alias="tokensPerSecondPerReplica")


class PoolsFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pools: dict[str, PoolPolicy] = Field(default_factory=dict)


def parse_pools(document: Mapping[str, object]) -> dict[str, PoolPolicy]:
    """Validate a pools document; keys must be ``namespace/name``. Errors name the pool and key."""
    try:
        pools = PoolsFile.model_validate(dict(document)).pools
    except ValidationError as exc:
        raise ValueError(error_text(exc, prefix="")) from exc
    for key in pools:
        if key.count("/") != 1:
            raise ValueError(f"pools: {key!r} must be NAMESPACE/NAME, e.g. serving/llama-70b")
    return dict(sorted(pools.items()))


def merge_cluster_spec(file_policy: PoolPolicy | None, spec: Mapping[str, Any]) -> PoolPolicy:
    """The policy of a pool whose AgentPool the cluster shows: its spec's keys over the pools
    file's entry (top-level keys replace; the file fills what the object leaves out).

    Raises :class:`AgentPoolSpecError` when the spec is invalid or the result cannot be scaled
    (no token rate or SLO in either)."""
    cluster = AgentPoolSpec.model_validate(dict(spec)) if isinstance(spec, Mapping) else spec
    merged: dict[str, Any] = {}
    if file_policy is not None:
        merged.update(file_policy.model_dump(exclude_unset=True))
    merged.update(cluster.model_dump(exclude_unset=True))
    try:
        return PoolPolicy.model_validate(merged)
    except ValidationError as exc:
        raise AgentPoolSpecError(error_text(exc)) from exc
