"""berth.health: /livez and /readyz bodies and statuses, the heartbeat, and the shared checks
(consumer group, faust worker, blocking calls) on fakes. No broker needed."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from typer.testing import CliRunner

from berth.cli import app as cli
from berth.health import (
    ConsumerReadiness,
    HealthServer,
    blocking_check,
    faust_checks,
    group_assignment,
    serving,
)
from berth.settings import BerthSettings


def passing(detail: str = "fine"):
    async def check() -> tuple[bool, str]:
        return True, detail

    return check


def failing(reason: str):
    async def check() -> tuple[bool, str]:
        return False, reason

    return check


def hanging():
    async def check() -> tuple[bool, str]:
        await asyncio.sleep(60)
        return True, ""

    return check


def raising():
    async def check() -> tuple[bool, str]:
        raise ConnectionRefusedError("connect to 127.0.0.1:1\nrefused")

    return check


async def get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with session.get(f"http://127.0.0.1:{port}{path}") as response:
            return response.status, await response.text()


# --- /readyz -------------------------------------------------------------------------------------


async def test_all_checks_pass_gives_200_and_ok_lines():
    health = HealthServer("test")
    health.add_readiness("kafka-group", passing("3 partitions"))
    health.add_readiness("database", passing())
    status, body = health.render("readyz", await health.readyz())
    assert status == 200
    assert body == "[+]kafka-group ok\n[+]database ok\nreadyz check passed\n"
    _, verbose = health.render("readyz", await health.readyz(), verbose=True)
    assert "[+]kafka-group ok (3 partitions)" in verbose


async def test_a_failing_check_gives_503_naming_it_and_its_reason():
    health = HealthServer("test")
    health.add_readiness("kafka-group", passing())
    health.add_readiness("database", failing("database postgresql://u:***@db/berth does not answer"))
    status, body = health.render("readyz", await health.readyz())
    assert status == 503
    assert body.splitlines() == [
        "[+]kafka-group ok",
        "[-]database failed: database postgresql://u:***@db/berth does not answer",
        "readyz check failed",
    ]


async def test_a_check_that_does_not_answer_in_time_fails_and_the_others_still_report():
    health = HealthServer("test")
    health.add_readiness("slow", hanging(), timeout_s=0.2)
    health.add_readiness("fast", passing())
    started = time.monotonic()
    status, body = health.render("readyz", await health.readyz())
    assert time.monotonic() - started < 2  # the checks run at once, each bounded
    assert status == 503
    assert "[-]slow failed: no answer within 0.2 s" in body
    assert "[+]fast ok" in body


async def test_an_exception_is_a_one_line_failure():
    health = HealthServer("test")
    health.add_readiness("api", raising())
    status, body = health.render("readyz", await health.readyz())
    assert status == 503
    assert "[-]api failed: ConnectionRefusedError: connect to 127.0.0.1:1 refused\n" in body


async def test_over_http_with_exclude_and_verbose():
    health = HealthServer("test", host="127.0.0.1")
    health.add_readiness("kafka-group", passing("assigned"))
    health.add_readiness("database", failing("down"))
    async with serving(health, 0):
        assert health.port
        status, body = await get(health.port, "/readyz")
        assert status == 503 and "[-]database failed: down" in body
        status, body = await get(health.port, "/readyz?exclude=database")
        assert status == 200
        assert body == "[+]kafka-group ok\n[+]database excluded: ok\nreadyz check passed\n"
        status, body = await get(health.port, "/readyz?verbose&exclude=database")
        assert "[+]kafka-group ok (assigned)" in body
        status, body = await get(health.port, "/livez")
        assert (status, body) == (200, "[+]loop ok\nlivez check passed\n")
    assert health.port is not None
    with pytest.raises(aiohttp.ClientError):
        await get(health.port, "/livez")  # stopped


async def test_no_port_serves_nothing():
    health = HealthServer("test")
    async with serving(health, None):
        assert health.port is None


# --- /livez and the heartbeat -----------------------------------------------------------------------


async def test_a_stale_heartbeat_makes_livez_503():
    now = [1000.0]
    health = HealthServer("test", stale_after_s=10, heartbeat_s=3600, clock=lambda: now[0])
    health.start_heartbeat()
    await asyncio.sleep(0)
    status, _ = health.render("livez", await health.livez())
    assert status == 200
    now[0] += 11
    status, body = health.render("livez", await health.livez())
    assert status == 503
    assert re.search(r"\[-\]loop failed: event loop heartbeat 11\.0 s old \(limit 10 s\)", body), body


async def test_a_loop_blocked_longer_than_the_limit_fails_livez_until_the_heartbeat_runs_again():
    health = HealthServer("test", stale_after_s=0.2, heartbeat_s=0.05)
    health.start_heartbeat()
    await asyncio.sleep(0.1)
    assert all(o.ok for o in await health.livez())
    time.sleep(0.4)  # the loop is blocked: no heartbeat can run
    [loop] = await health.livez()  # no await suspended before the check reads the stamp
    assert not loop.ok and "the loop was blocked" in loop.detail
    await asyncio.sleep(0.1)  # the heartbeat stamps again, and saw the gap
    [loop] = await health.livez()
    assert not loop.ok and re.match(r"the event loop was blocked for 0\.[45] s until 0\.\d s ago", loop.detail), loop
    await asyncio.sleep(0.25)  # the stall is older than the limit: alive again
    assert all(o.ok for o in await health.livez())
    await health.stop()


async def test_livez_without_heartbeat_fails():
    health = HealthServer("test")
    [loop] = await health.livez()
    assert not loop.ok and loop.detail == "heartbeat not started"


async def test_a_stuck_loop_does_not_answer_at_all():
    """The point of serving on the service's loop: while it is stuck, the probe gets nothing."""
    health = HealthServer("test", host="127.0.0.1")
    await health.start(0)
    port = health.port
    result: dict[str, Any] = {}

    def probe() -> None:
        import urllib.request

        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=0.5)
            result["answered"] = True
        except OSError as exc:
            result["error"] = exc

    thread = threading.Thread(target=probe)
    thread.start()
    time.sleep(1.0)  # the loop is stuck for longer than the probe's timeout
    thread.join()
    assert "error" in result and "answered" not in result
    assert (await get(port, "/livez"))[0] in (200, 503)  # answers again once the loop runs
    await health.stop()


# --- blocking checks ---------------------------------------------------------------------------------


async def test_a_hanging_blocking_check_does_not_pile_up_threads():
    release = threading.Event()
    calls = []

    def query() -> tuple[bool, str]:
        calls.append(1)
        release.wait(5)
        return True, "answered"

    check = blocking_check(query)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(check(), 0.1)
    ok, detail = await check()
    assert not ok and "previous attempt has not returned" in detail
    assert len(calls) == 1
    release.set()
    await asyncio.sleep(0.1)
    assert await check() == (True, "answered")


# --- consumer groups ---------------------------------------------------------------------------------


class FakeConsumer:
    """What ConsumerReadiness reads of an aiokafka consumer."""

    def __init__(self) -> None:
        self._subscription = SimpleNamespace(subscription=None)
        self.ends: dict[Any, int] = {}
        self.positions: dict[Any, int] = {}
        self.end_offsets_calls = 0

    def assign(self, partitions: set[Any] | None) -> None:
        assignment = None if partitions is None else SimpleNamespace(tps=set(partitions))
        self._subscription = SimpleNamespace(subscription=SimpleNamespace(assignment=assignment))

    def assignment(self) -> set[Any]:
        subscription = self._subscription.subscription
        return set() if subscription is None or subscription.assignment is None else set(subscription.assignment.tps)

    async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        self.end_offsets_calls += 1
        return {tp: self.ends[tp] for tp in partitions}

    async def position(self, tp: Any) -> int:
        return self.positions[tp]


class _TP(tuple):
    """A hashable (topic, partition) with aiokafka's attribute names."""

    def __new__(cls, topic: str, partition: int) -> _TP:
        return super().__new__(cls, (topic, partition))

    topic = property(lambda self: self[0])
    partition = property(lambda self: self[1])


async def test_consumer_not_ready_until_assigned_then_standby_or_caught_up():
    consumer = FakeConsumer()
    check = ConsumerReadiness(consumer, group="g", max_lag=10)
    assert group_assignment(consumer) is None
    ok, detail = await check()
    assert not ok and "waiting for consumer group g" in detail

    consumer.assign(None)  # subscribed, still joining
    assert not (await check())[0]

    consumer.assign(set())  # the group left this member idle
    ok, detail = await check()
    assert ok and "standby" in detail

    a, b = _TP("commands", 0), _TP("commands", 1)
    consumer.assign({a, b})
    consumer.ends = {a: 500, b: 20}
    consumer.positions = {a: 100, b: 20}
    ok, detail = await check()
    assert not ok and "commands[0] 400" in detail and "1 of 2 partition(s)" in detail
    consumer.ends = {a: 10_000, b: 10_000}  # later records do not move the target
    consumer.positions = {a: 495, b: 20}
    ok, detail = await check()
    assert ok and "caught up" in detail
    assert consumer.end_offsets_calls == 1
    consumer.positions = {a: 0, b: 0}  # falling behind later does not make it unready
    assert (await check())[0]

    consumer.assign({a})  # a new assignment is caught up again
    ok, _ = await check()
    assert not ok and consumer.end_offsets_calls == 2


async def test_assigned_is_enough_without_max_lag():
    consumer = FakeConsumer()
    consumer.assign({_TP("inputs", 3)})
    ok, detail = await ConsumerReadiness(consumer, group="berth-decision", max_lag=None)()
    assert ok and detail == "1 partition(s) of berth-decision assigned"
    assert consumer.end_offsets_calls == 0


# --- faust workers ------------------------------------------------------------------------------------


def fake_faust_app(
    *, completed: bool, rebalancing: bool = False, in_recovery: bool = False, assigned: set[Any] = frozenset()
) -> Any:
    event = asyncio.Event()
    if completed:
        event.set()

    class Tables(dict):  # faust's TableManager: a mapping of tables with the recovery service
        recovery = SimpleNamespace(completed=event)

    return SimpleNamespace(
        tables=Tables(a=1, b=2),
        rebalancing=rebalancing,
        in_recovery=in_recovery,
        consumer=SimpleNamespace(assignment=lambda: set(assigned)),
        assignor=SimpleNamespace(assigned_actives=lambda: set(assigned)),
    )


async def run_faust(app: Any) -> dict[str, tuple[bool, str]]:
    return {name: await check() for name, check in faust_checks(app)}


async def test_faust_worker_ready_after_assignment_and_recovery():
    results = await run_faust(fake_faust_app(completed=False))
    assert not results["kafka-group"][0] and not results["tables"][0]
    results = await run_faust(fake_faust_app(completed=True, in_recovery=True, assigned={_TP("pods", 0)}))
    assert results["kafka-group"][0] and not results["tables"][0]
    results = await run_faust(fake_faust_app(completed=True, rebalancing=True, assigned={_TP("pods", 0)}))
    assert not results["kafka-group"][0]
    results = await run_faust(fake_faust_app(completed=True, assigned={_TP("pods", 0)}))
    assert results == {
        "kafka-group": (True, "1 active partition(s) assigned"),
        "tables": (True, "2 table(s) recovered"),
    }
    results = await run_faust(fake_faust_app(completed=True))
    assert results["kafka-group"][0] and "standby" in results["kafka-group"][1]


# --- configuration ------------------------------------------------------------------------------------


def test_health_port_setting(monkeypatch):
    assert BerthSettings().health_port is None
    monkeypatch.setenv("BERTH_HEALTH_PORT", "8081")
    assert BerthSettings().health_port == 8081
    monkeypatch.setenv("BERTH_HEALTH_PORT", "70000")
    with pytest.raises(ValueError):
        BerthSettings()


@pytest.mark.parametrize("service", ["decision", "binder", "audit", "ingest", "inventory", "token-lag"])
def test_every_service_run_command_has_health_port(service):
    result = CliRunner().invoke(cli, [service, "run", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "--health-port" in result.output and "--metrics-port" in result.output
