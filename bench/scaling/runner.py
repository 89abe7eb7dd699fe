"""One benchmark: the same workload, cluster and interruptions replayed under each policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .berth import BerthPolicy
from .cluster import Interruption, draw_interruptions
from .policies import DynamoLike, KedaLike, PoolConfig, ScalingPolicy, StaticPolicy
from .sim import RunConfig, RunResult, simulate
from .workload import TrafficShape, Workload, generate

POLICIES: dict[str, Callable[[PoolConfig], ScalingPolicy]] = {
    "berth": BerthPolicy,
    "keda": KedaLike,
    "dynamo": DynamoLike,
    "static": lambda pool: StaticPolicy(),
    "berth-nolead": lambda pool: BerthPolicy(pool, lead=False),
}
DEFAULT_POLICIES = ("berth", "keda", "dynamo")


@dataclass(frozen=True)
class Scenario:
    workload: Workload
    interruptions: tuple[Interruption, ...]
    config: RunConfig


def scenario(seed: int, shape: TrafficShape | None = None, config: RunConfig | None = None) -> Scenario:
    """The seeded day every policy replays."""
    config = config or RunConfig()
    workload = generate(seed, shape)
    return Scenario(workload, draw_interruptions(seed, config.cluster, workload.shape.duration_s), config)


def run_policies(
    scene: Scenario, names: tuple[str, ...] = DEFAULT_POLICIES, progress: Callable[[str, float], None] | None = None
) -> dict[str, RunResult]:
    """Each named policy over the scenario, in the order given."""
    results: dict[str, RunResult] = {}
    for name in names:
        policy = POLICIES[name](scene.config.pool)
        report = (lambda now, name=name: progress(name, now)) if progress is not None else None
        results[name] = simulate(scene.workload, policy, scene.interruptions, scene.config, report)
    return results


def result_document(results: dict[str, RunResult]) -> dict[str, object]:
    """The JSON line: ``{"policies": {name: {slo_violation_minutes, gpu_hours, cost_usd,
    scale_events, interruptions_survived}}}``."""
    return {"policies": {name: result.summary() for name, result in results.items()}}
