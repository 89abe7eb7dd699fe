"""The token-lag fold: a pool's previous lag state + one queue observation → its new lag state.

Pure: no I/O, no clock; time is the observation's ``observed_at``.

Smoothing. The token rate is an exponentially weighted moving average in *event time* with a
half-life ``H`` (seconds): an observation ``dt`` seconds after the previous one moves the average
by ``alpha = 1 - 2 ** (-dt / H)`` of the way to the new rate. So a rate that has held for ``H``
seconds carries half the weight, whatever the reporting interval, and bursts of reports close
together count no more than one report over the same span. The first observation of a pool sets
the average to its rate. Two observations with the same timestamp leave the average unchanged (no
time passed) while the queue and session counts follow the newer one. An observation older than
the pool's latest is stale (reports from several gateways interleave) and is ignored entirely, and
so is a repeat of the latest (Kafka redelivers after a restart: at-least-once), so that
``observations`` counts distinct reports.

Expected TTFT (how long a request arriving now waits for its first token), in milliseconds:

* ``tokens_in_queue / smoothed_rate * 1000`` while tokens wait and the pool processes some;
* ``0`` when nothing waits but the pool is busy (sessions active or tokens flowing);
* ``None`` when the pool is idle: nothing queued, no session, no tokens flowing;
* plus the pool's model load time when no replica is ready (``ready_replicas == 0``): the first
  token waits for a replica to load the model;
* capped at ``max_ttft_ms``. With tokens queued and a smoothed rate of zero the wait is unbounded;
  JSON has no infinity and the decision core compares with an SLO, so the pool reports the cap, a
  large finite value meaning "stalled". :func:`is_stalled` tells the case apart for logs/metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from berth.schemas import PoolLagState, QueueLagObserved
from berth.schemas.agentpool import duration_seconds
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from berth.cells.pools import PoolPolicy

DEFAULT_MODEL_LOAD_SECONDS = 60.0
DEFAULT_HALF_LIFE_SECONDS = 30.0
DEFAULT_MAX_TTFT_MS = 3_600_000.0
"""One hour: far beyond any TTFT SLO, so a stalled pool always reads as violating it."""


class PoolSettings(BaseModel):
    """What token-lag reads of a pool in the shared pools file (an AgentPool spec per pool, see
    berth.cells.pools): its model load time. Every other AgentPool key is the decision
    service's and is left to it; a key neither knows is a mistake."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _leave_scaling_keys_to_the_decision_service(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        ours = {"model_load_seconds", "modelLoadSeconds", "modelLoadTime"}
        theirs: set[str] = set()
        for name, info in PoolPolicy.model_fields.items():
            theirs.add(name)
            if info.alias:
                theirs.add(info.alias)
            choices = getattr(info.validation_alias, "choices", None) or ()
            theirs.update(c for c in choices if isinstance(c, str))
        return {key: value for key, value in data.items() if key in ours or key not in theirs}

    model_load_seconds: Annotated[
        float, Field(ge=0, validation_alias=AliasChoices("model_load_seconds", "modelLoadSeconds", "modelLoadTime"))
    ] = DEFAULT_MODEL_LOAD_SECONDS

    @field_validator("model_load_seconds", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return duration_seconds(value)


class LagSettings(BaseModel):
    """How the fold smooths and estimates; ``pools`` maps ``namespace/name`` to per-pool settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    half_life_seconds: Annotated[float, Field(gt=0)] = DEFAULT_HALF_LIFE_SECONDS
    default_model_load_seconds: Annotated[float, Field(ge=0)] = DEFAULT_MODEL_LOAD_SECONDS
    max_ttft_ms: Annotated[float, Field(gt=0)] = DEFAULT_MAX_TTFT_MS
    pools: dict[str, PoolSettings] = Field(default_factory=dict)

    @field_validator("pools")
    @classmethod
    def _keys_name_namespace_and_pool(cls, pools: dict[str, PoolSettings]) -> dict[str, PoolSettings]:
        bad = sorted(key for key in pools if key.count("/") != 1 or "" in key.split("/"))
        if bad:
            raise ValueError(f"pool keys must be NAMESPACE/NAME, got {bad}")
        return pools

    def model_load_seconds(self, namespace: str, pool: str) -> float:
        settings = self.pools.get(f"{namespace}/{pool}")
        return settings.model_load_seconds if settings is not None else self.default_model_load_seconds


class PoolsFileError(ValueError):
    """The ``--pools`` file is missing, not YAML, or not of the expected shape."""


def load_lag_settings(path: Path | None, **overrides: float) -> LagSettings:
    """Settings from a YAML file ``{pools: {"ns/name": {model_load_seconds: 90}}}`` (optional)
    plus the command line's ``overrides``; the file may also set the top-level fields."""
    document: dict[str, object] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise PoolsFileError(f"{path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise PoolsFileError(f"{path}: expected a mapping with a 'pools' key")
        document = loaded
    try:
        return LagSettings.model_validate({**document, **overrides})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))
        raise PoolsFileError(f"{path or 'settings'}: {problems}") from exc


def pool_key(namespace: str, pool: str) -> str:
    """The lag table's key and the state topic's key: ``namespace/pool``."""
    return f"{namespace}/{pool}"


def smoothing_factor(dt_seconds: float, half_life_seconds: float) -> float:
    """The EWMA weight of an observation ``dt_seconds`` after the previous one."""
    if dt_seconds <= 0:
        return 0.0
    return 1.0 - 2.0 ** (-dt_seconds / half_life_seconds)


def expected_ttft_ms(
    tokens_in_queue: int,
    smoothed_rate: float,
    *,
    busy: bool,
    ready_replicas: int | None,
    model_load_seconds: float,
    max_ttft_ms: float,
) -> float | None:
    """See the module docstring; ``busy`` = sessions active or tokens flowing."""
    if tokens_in_queue == 0 and not busy:
        return None
    if tokens_in_queue == 0:
        wait_ms = 0.0
    elif smoothed_rate > 0:
        wait_ms = tokens_in_queue / smoothed_rate * 1000.0
    else:
        return max_ttft_ms
    if ready_replicas == 0:
        wait_ms += model_load_seconds * 1000.0
    return min(wait_ms, max_ttft_ms)


def is_stalled(state: PoolLagState) -> bool:
    """Tokens wait and nothing is being processed: the TTFT reported is the cap, not an estimate."""
    return state.tokens_in_queue > 0 and state.smoothed_token_rate == 0


def _repeats(observation: QueueLagObserved, state: PoolLagState) -> bool:
    """The observation is the one ``state`` already holds (a redelivery after a restart)."""
    return (
        observation.tokens_in_queue,
        observation.token_rate,
        observation.active_sessions,
        observation.ready_replicas,
    ) == (state.tokens_in_queue, state.token_rate, state.active_sessions, state.ready_replicas)


def fold_queue_lag(
    previous: PoolLagState | None, observation: QueueLagObserved, settings: LagSettings
) -> PoolLagState | None:
    """The pool's new lag state, or None when ``observation`` brings nothing: it is older than
    ``previous`` (stale) or the very observation ``previous`` came from (redelivered)."""
    if previous is None:
        smoothed = observation.token_rate
        observations = 1
    else:
        dt = (observation.observed_at - previous.updated_at).total_seconds()
        if dt < 0 or (dt == 0 and _repeats(observation, previous)):
            return None
        alpha = smoothing_factor(dt, settings.half_life_seconds)
        smoothed = previous.smoothed_token_rate + alpha * (observation.token_rate - previous.smoothed_token_rate)
        observations = previous.observations + 1
    busy = observation.active_sessions > 0 or observation.token_rate > 0
    return PoolLagState(
        pool=observation.pool,
        namespace=observation.namespace,
        tokens_in_queue=observation.tokens_in_queue,
        token_rate=observation.token_rate,
        smoothed_token_rate=smoothed,
        expected_ttft_ms=expected_ttft_ms(
            observation.tokens_in_queue,
            smoothed,
            busy=busy,
            ready_replicas=observation.ready_replicas,
            model_load_seconds=settings.model_load_seconds(observation.namespace, observation.pool),
            max_ttft_ms=settings.max_ttft_ms,
        ),
        active_sessions=observation.active_sessions,
        ready_replicas=observation.ready_replicas,
        observations=observations,
        updated_at=observation.observed_at,
    )
