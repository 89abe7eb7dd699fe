"""The trace-driven benchmark: a CSV of requests (see :mod:`bench.scaling.trace`) replayed under
each policy with the prefill/decode serving model.

Every figure the trace does not give is a stated constant (README.md, "Trace mode"):

* the replica: ``slots_per_replica`` 16 sequences decoding at 125 tokens/s each (2,000 tokens/s)
  and prefilling a prompt at 24,000 tokens/s — an 8B-parameter model on one H100 SXM;
* the work a request brings, in the unit the gateway reports (``tokens_in_queue``, the token
  rate) and ``tokensPerSecondPerReplica`` counts: *decode-equivalent tokens*, its output tokens
  plus its prompt tokens at what they cost next to one (``prompt × 125 / 24,000``), so that a
  replica's 2,000 tokens/s holds whatever the prompt/output mix (prompt + output tokens would
  not: the trace's prompts are 85 % of its tokens but 3 % of the GPU time);
* the initial (warm) replicas of every policy and the static control's count: the trace's mean
  token demand at :data:`berth.cells.scaling.TARGET_UTILISATION` of that throughput;
* no spot interruption unless asked (``--interruptions``): the trace is about traffic;
* every policy starts warm: the initial replicas ready at second 0, and the KEDA-like HPA's
  stabilization window holding that count (as if it had been running), so that the trace's
  first quiet seconds do not make it scale a warm pool to one replica.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from berth.cells.scaling import TARGET_UTILISATION

from .cluster import draw_interruptions
from .policies import KedaLike, PoolConfig, StaticPolicy
from .runner import POLICIES, Scenario
from .sim import RunConfig, RunResult, simulate
from .trace import Trace, scaled_workload
from .workload import Workload


@dataclass(frozen=True)
class TraceSetup:
    """What the trace run derived from the trace (all printed, all in the JSON)."""

    requests: int
    duration_s: int
    mean_tokens_per_s: float
    peak_minute_tokens_per_s: float
    tokens_per_second_per_replica: float
    initial_replicas: int


def decode_equivalent(workload: Workload, pool: PoolConfig) -> Workload:
    """The workload with ``tokens`` = output + prompt × decode rate / prefill rate (rounded)."""
    assert workload.prompt_tokens is not None and workload.generated_tokens is not None
    seq_rate = pool.tokens_per_second_per_replica / pool.slots_per_replica
    work = workload.generated_tokens + np.rint(workload.prompt_tokens * seq_rate / pool.prefill_tokens_per_second)
    return replace(workload, tokens=np.maximum(work, 1).astype(np.int64))


def trace_scenario(
    trace: Trace,
    *,
    scale: float,
    seed: int,
    config: RunConfig,
    speed: float = 1.0,
    tokens_per_second_per_replica: float | None = None,
) -> tuple[Scenario, TraceSetup]:
    """The scenario every policy replays, and what was derived from the trace for it."""
    pool = config.pool
    workload = decode_equivalent(scaled_workload(trace, scale, seed, speed), pool)
    tps = tokens_per_second_per_replica or pool.tokens_per_second_per_replica
    duration = workload.shape.duration_s
    mean = float(workload.tokens.sum()) / duration
    minutes = max(1, duration // 60)
    per_minute = [0.0] * minutes
    for at, tok in zip(workload.arrivals.tolist(), workload.tokens.tolist(), strict=True):
        per_minute[min(int(at // 60), minutes - 1)] += tok
    initial = max(pool.min_replicas, min(pool.max_replicas, math.ceil(mean / (tps * TARGET_UTILISATION))))
    pool = replace(pool, reported_tokens_per_second_per_replica=round(tps, 1), initial_replicas=initial)
    config = replace(config, pool=pool)
    interruptions = draw_interruptions(seed, config.cluster, duration)
    setup = TraceSetup(workload.requests, duration, mean, max(per_minute) / 60.0, round(tps, 1), initial)
    return Scenario(workload, interruptions, config), setup


def run_trace_policies(scene: Scenario, names: tuple[str, ...]) -> dict[str, RunResult]:
    results: dict[str, RunResult] = {}
    for name in names:
        if name == "static":
            policy = StaticPolicy()
        elif name == "keda":
            policy = KedaLike(scene.config.pool, warm=True)
        else:
            policy = POLICIES[name](scene.config.pool)
        results[name] = simulate(scene.workload, policy, scene.interruptions, scene.config)
    return results


def trace_document(
    results: dict[str, RunResult], setup: TraceSetup, *, trace: str, scale: float, seed: int
) -> dict[str, object]:
    """The JSON line of a trace run: the setup, then per policy the figures of the table."""
    return {
        "trace": trace,
        "scale": scale,
        "seed": seed,
        "setup": {
            "requests": setup.requests,
            "duration_s": setup.duration_s,
            "mean_tokens_per_s": round(setup.mean_tokens_per_s, 1),
            "peak_minute_tokens_per_s": round(setup.peak_minute_tokens_per_s, 1),
            "tokens_per_second_per_replica": setup.tokens_per_second_per_replica,
            "initial_replicas": setup.initial_replicas,
        },
        "policies": {
            name: {
                **r.summary(),
                "ttft_p50_s": round(r.ttft_p50_s, 3),
                "ttft_p99_s": round(r.ttft_p99_s, 3),
                "requests_over_slo": r.requests_over_slo,
                "peak_replicas": r.peak_replicas,
            }
            for name, r in results.items()
        },
    }
