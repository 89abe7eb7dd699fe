"""The token-lag fold: event-time EWMA of the token rate and the expected TTFT, without Kafka."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from berth.schemas import QueueLagObserved
from berth.services.token_lag.fold import (
    LagSettings,
    PoolSettings,
    PoolsFileError,
    expected_ttft_ms,
    fold_queue_lag,
    is_stalled,
    load_lag_settings,
    smoothing_factor,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = LagSettings(
    half_life_seconds=10,
    default_model_load_seconds=60,
    max_ttft_ms=600_000,
    pools={"serving/llama": PoolSettings(model_load_seconds=90)},
)


def observe(
    t: float,
    tokens: int,
    rate: float,
    *,
    sessions: int = 1,
    ready: int | None = 2,
    pool: str = "llama",
    namespace: str = "serving",
) -> QueueLagObserved:
    return QueueLagObserved(
        pool=pool,
        namespace=namespace,
        tokens_in_queue=tokens,
        token_rate=rate,
        active_sessions=sessions,
        ready_replicas=ready,
        observed_at=T0 + timedelta(seconds=t),
    )


def fold_all(*observations: QueueLagObserved):
    state = None
    for observation in observations:
        state = fold_queue_lag(state, observation, SETTINGS) or state
    return state


@pytest.mark.parametrize(
    ("dt", "alpha"),
    [
        (0, 0.0),
        (-5, 0.0),
        (10, 0.5),
        (20, 0.75),
        (5, 1 - 2**-0.5),
    ],
)
def test_smoothing_factor_is_a_half_life_in_event_time(dt, alpha):
    assert smoothing_factor(dt, 10) == pytest.approx(alpha)


def test_first_observation_sets_the_rate_and_later_ones_move_it_by_half_per_half_life():
    first = fold_all(observe(0, 1000, 400))
    assert first.smoothed_token_rate == 400 and first.observations == 1
    second = fold_all(observe(0, 1000, 400), observe(10, 1000, 200))
    assert second.smoothed_token_rate == pytest.approx(300)
    assert second.token_rate == 200 and second.observations == 2


def test_report_frequency_does_not_change_the_average():
    # One report after 20 s, or four 5 s reports of the same new rate, end at the same average.
    sparse = fold_all(observe(0, 0, 100), observe(20, 0, 500))
    dense = fold_all(observe(0, 0, 100), *(observe(t, 0, 500) for t in (5, 10, 15, 20)))
    assert sparse.smoothed_token_rate == pytest.approx(dense.smoothed_token_rate)


def test_stale_observations_are_ignored_and_simultaneous_ones_update_counts_only():
    state = fold_all(observe(0, 1000, 400), observe(10, 500, 200))
    assert fold_queue_lag(state, observe(5, 9999, 1), SETTINGS) is None
    same_time = fold_queue_lag(state, observe(10, 800, 50), SETTINGS)
    assert same_time.smoothed_token_rate == state.smoothed_token_rate
    assert same_time.tokens_in_queue == 800
    assert fold_queue_lag(state, observe(10, 500, 200), SETTINGS) is None  # redelivered: not counted again


@pytest.mark.parametrize(
    ("tokens", "rate", "busy", "ready", "expected"),
    [
        pytest.param(0, 0.0, False, 2, None, id="idle"),
        pytest.param(0, 0.0, False, 0, None, id="idle, scaled to zero"),
        pytest.param(0, 100.0, True, 2, 0.0, id="busy, empty queue"),
        pytest.param(2000, 400.0, True, 2, 5000.0, id="queue / rate"),
        pytest.param(2000, 400.0, True, 0, 5000.0 + 90_000, id="no replica ready: plus model load"),
        pytest.param(2000, 400.0, True, None, 5000.0, id="replicas unknown: no load time"),
        pytest.param(2000, 0.0, True, 2, 600_000.0, id="stalled: the cap"),
        pytest.param(10**9, 1.0, True, 2, 600_000.0, id="capped"),
    ],
)
def test_expected_ttft(tokens, rate, busy, ready, expected):
    assert (
        expected_ttft_ms(tokens, rate, busy=busy, ready_replicas=ready, model_load_seconds=90, max_ttft_ms=600_000)
        == expected
    )


def test_fold_uses_the_pools_model_load_time_and_the_default_for_others():
    configured = fold_all(observe(0, 1000, 500, ready=0))
    assert configured.expected_ttft_ms == pytest.approx(2000 + 90_000)
    other = fold_queue_lag(None, observe(0, 1000, 500, ready=0, pool="mistral"), SETTINGS)
    assert other.expected_ttft_ms == pytest.approx(2000 + 60_000)


def test_stalled_pool_reports_the_cap_finitely_and_is_flagged():
    state = fold_all(observe(0, 5000, 0, sessions=3))
    assert state.expected_ttft_ms == 600_000 and math.isfinite(state.expected_ttft_ms)
    assert is_stalled(state)
    assert not is_stalled(fold_all(observe(0, 5000, 10)))


def test_idle_pool_has_no_ttft():
    state = fold_all(observe(0, 0, 0, sessions=0))
    assert state.expected_ttft_ms is None and not is_stalled(state)


def test_state_keys_and_contract_fields():
    state = fold_all(observe(0, 100, 50))
    assert (state.partition_key, state.pool, state.namespace) == ("serving/llama", "llama", "serving")
    assert state.updated_at == T0


def test_pools_file(tmp_path: Path):
    path = tmp_path / "pools.yaml"
    path.write_text("pools:\n  serving/llama: {model_load_seconds: 120}\nhalf_life_seconds: 15\n")
    settings = load_lag_settings(path, default_model_load_seconds=45)
    assert settings.model_load_seconds("serving", "llama") == 120
    assert settings.model_load_seconds("serving", "other") == 45
    assert settings.half_life_seconds == 15
    assert load_lag_settings(None).model_load_seconds("a", "b") == 60


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pools:\n  llama: {model_load_seconds: 1}\n", "NAMESPACE/NAME"),
        ("pools:\n  a/b: {model_load_secs: 1}\n", "model_load_secs"),
        ("pools:\n  a/b: {model_load_seconds: -1}\n", "greater than or equal"),
        ("- not a mapping\n", "expected a mapping"),
        ("pools: [\n", "expected"),
    ],
)
def test_bad_pools_files_say_what_is_wrong(tmp_path: Path, text, message):
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    with pytest.raises(PoolsFileError, match=message):
        load_lag_settings(path)


# --- the agent, in-process (faust's test_context: no broker) -------------------------------------


async def test_agent_publishes_state_and_cell_input_and_dead_letters_garbage():
    from berth.schemas.cells import cell_of_pool
    from berth.schemas.envelope import encode
    from berth.schemas.topics import DEAD_LETTER, DECISION_INPUTS, LAG_STATE
    from berth.services.token_lag.app import Layout, create_app

    from berth.bus.streams import RecordingOutbox

    outbox = RecordingOutbox()
    service = create_app(
        Layout(cells=4, queue_partitions=2),
        SETTINGS,
        outbox=outbox,
        app_options={"store": "memory://", "broker": "kafka://127.0.0.1:1"},
        app_id="berth-token-lag-unit",
    )
    service.app.finalize()
    service.app.flow_control.resume()
    async with service.agent.test_context() as agent:
        for observation in (observe(0, 1000, 400), observe(10, 1000, 200), observe(5, 1, 1)):
            record = encode(observation, source="test")
            await agent.put(record.value, key=record.key, headers=record.headers)
        await agent.put(b'{"type": "io.berth.inference.queue-lag.v1"}', key=b"llama", headers=[])
    states = [p.event for p in outbox.on(LAG_STATE.name)]
    assert [s.smoothed_token_rate for s in states] == [400, pytest.approx(300)]  # the stale one: nothing
    inputs = outbox.on(DECISION_INPUTS.name)
    assert {p.partition for p in inputs} == {cell_of_pool("serving", "llama", 4)}
    assert [p.event for p in inputs] == states
    assert len(outbox.on(DEAD_LETTER.name)) == 1


def test_the_pools_file_shared_with_the_decision_service_is_accepted(tmp_path):
    import yaml
    from berth.services.token_lag.fold import load_lag_settings

    from berth.cells.pools import parse_pools

    document = {
        "pools": {
            "serving/llama-70b": {
                "tokens_per_second_per_replica": 2500,
                "ttft_slo_ms": 2000,
                "max_replicas": 8,
                "model_load_seconds": 90,
            }
        }
    }
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(document))
    assert parse_pools(document)["serving/llama-70b"].model_load_seconds == 90
    assert load_lag_settings(path).model_load_seconds("serving", "llama-70b") == 90
