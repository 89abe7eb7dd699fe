"""The decision cell keeps the scaling policy's memory (smoothed demand, window of needs) as a pure
fold of the lag states it consumed: the same inputs rebuild it, and scale-downs use its window."""

from __future__ import annotations

from datetime import timedelta

from berth.schemas import InputPosition, PoolLagState, ScalePool
from berth.schemas.samples import T0

from berth.cells import Cell, CellConfig, PoolPolicy

from .fake_engine import FakeEngine

POLICY = PoolPolicy(
    tokens_per_second_per_replica=1000,
    ttft_slo_ms=2000,
    min_replicas=1,
    max_replicas=40,
    cooldown_s=300,
    model_load_seconds=0,
)


def lag(tokens: int, rate: float, seconds: float, ready: int = 2) -> PoolLagState:
    return PoolLagState(
        pool="llama",
        namespace="serving",
        tokens_in_queue=tokens,
        token_rate=rate,
        smoothed_token_rate=rate,
        expected_ttft_ms=tokens / rate * 1000 if rate else None,
        ready_replicas=ready,
        updated_at=T0 + timedelta(seconds=seconds),
    )


def run(states: list[PoolLagState]) -> list[tuple[int, int, str]]:
    """(previous, replicas, message) of every scale a fresh cell decides for ``states``."""
    cell = Cell(0, CellConfig(pools={"serving/llama": POLICY}), engine=FakeEngine())
    scales = []
    for offset, state in enumerate(states):
        for decision in cell.handle(state, InputPosition(topic="t", partition=0, offset=offset)):
            for command in decision.commands:
                if isinstance(command, ScalePool):
                    scales.append((command.previous_replicas, command.replicas, decision.record.message))
    return scales


def day() -> list[PoolLagState]:
    # 10,000 tokens/s for two minutes (a spike), then 2,000 tokens/s; reports every 10 s.
    states = [lag(0, 10_000, t, ready=2) for t in range(0, 120, 10)]
    states += [lag(0, 2_000, t, ready=15) for t in range(120, 900, 10)]
    return states


def test_scale_down_waits_for_the_window_then_goes_in_one_step_to_its_highest_need():
    scales = run(day())
    # Up at once to the steady need: 10,000 / (1,000 × 0.7) = 15.
    assert scales[0][:2] == (2, 15) and scales[0][2].startswith("2 → 15 replicas: steady: demand 10000")
    downs = scales[1:]
    # Not one replica per cooldown: each scale-down (300 s after the previous scale) goes in one
    # step to the highest steady need still in the window — at 410 s the demand smoothed down
    # from the spike at 120 s (11), at 710 s the 2,000 tokens/s since (2,000 / 700 → 3).
    assert [(prev, new) for prev, new, _ in downs] == [(15, 11), (11, 3)], downs
    assert "11 is the highest steady need of the last 300s" in downs[0][2]
    assert "3 is the need now (steady)" in downs[1][2]


def test_the_same_lag_states_rebuild_the_same_memory_and_decisions():
    assert run(day()) == run(day())
    # A repeated (redelivered) state changes nothing.
    states = day()
    with_repeats = [s for state in states for s in (state, state)]
    assert run(with_repeats) == run(states)
