"""Token-based scaling of inference pools: the rule from the seed document, as a pure function.

Scale up when the expected time to first token exceeds the pool's SLO, to
``ceil(tokens_in_queue / (tokens_per_second_per_replica × SLO))`` replicas within the bounds;
scale down one replica at a time, after a cooldown, while the queue is short (the expected TTFT
with one replica fewer stays under half the SLO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from berth.schemas import PoolLagState


class PoolPolicy(BaseModel):
    """How one pool scales (the scaling part of an AgentPool)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens_per_second_per_replica: float = Field(gt=0)
    ttft_slo_ms: float = Field(gt=0)
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=10, ge=1)
    cooldown_s: float = Field(default=300, ge=0)
    initial_replicas: int = Field(default=1, ge=0)
    model_load_seconds: float = Field(default=60, ge=0)
    """Time for a new replica to serve its first token (image pull, weights load, warm-up)."""


class PoolsFile(BaseModel):
    """The pools file shared by the token-lag and decision services::

        pools:
          serving/llama-70b: {tokens_per_second_per_replica: 2000, ttft_slo_ms: 2000,
                              max_replicas: 16, model_load_seconds: 90}
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pools: dict[str, PoolPolicy] = Field(default_factory=dict)


def parse_pools(document: dict[str, object]) -> dict[str, PoolPolicy]:
    """Validate a pools document; keys must be ``namespace/name``."""
    pools = PoolsFile.model_validate(document).pools
    for key in pools:
        if key.count("/") != 1:
            raise ValueError(f"pools: {key!r} must be NAMESPACE/NAME, e.g. serving/llama-70b")
    return dict(sorted(pools.items()))


@dataclass(frozen=True)
class ScaleVerdict:
    replicas: int
    reason: str


def desired_replicas(policy: PoolPolicy, lag: PoolLagState, current: int,
                     last_scaled_at: datetime | None) -> ScaleVerdict | None:
    """The replica count to ask for now, or None to leave the pool as it is."""
    slo_s = policy.ttft_slo_ms / 1000
    rate = max(lag.smoothed_token_rate, 0.0)
    expected = lag.expected_ttft_ms
    if expected is not None and expected > policy.ttft_slo_ms:
        wanted = math.ceil(lag.tokens_in_queue / (policy.tokens_per_second_per_replica * slo_s))
        wanted = max(policy.min_replicas, min(policy.max_replicas, wanted))
        if wanted > current:
            return ScaleVerdict(wanted, f"expected TTFT {expected:.0f}ms > SLO {policy.ttft_slo_ms:.0f}ms "
                                        f"with {lag.tokens_in_queue} tokens queued")
        return None
    if current <= policy.min_replicas:
        return None
    cooled = last_scaled_at is None or (lag.updated_at - last_scaled_at).total_seconds() >= policy.cooldown_s
    capacity_after = policy.tokens_per_second_per_replica * (current - 1)
    ttft_after_ms = lag.tokens_in_queue / capacity_after * 1000 if capacity_after > 0 else math.inf
    if cooled and ttft_after_ms < policy.ttft_slo_ms / 2 and rate <= capacity_after:
        return ScaleVerdict(current - 1, f"queue short: expected TTFT {ttft_after_ms:.0f}ms with "
                                         f"{current - 1} replicas, under half the SLO")
    return None
