"""/livez and /readyz of real services on a real broker (one broker of its own for this module:
the decision and inventory groups and topics have fixed names).

- decision as a subprocess (``berth decision run --health-port P``): /readyz 503 at first, 200 once
  its cells are assigned and rebuilt; SIGSTOP → the probe gets no answer (the server is on the
  stopped loop); SIGCONT → alive again.
- decision in-process: /readyz 503 (naming the consumer group) while the service has not joined its
  group, 200 once it has; then its loop stalled by a blocking call from another thread (the process
  keeps running): /livez times out during the stall, answers 503 right after it, 200 later.
- inventory (a faust app) as a subprocess: 200 once assigned and its tables recovered; SIGSTOP
  makes /livez time out.
- audit: /readyz 503 naming the database when Postgres cannot be reached; on a real one, 503 while
  the backlog found at start is written (an aborted transaction at a partition's end is not waited
  for), then 200.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from berth_dev.devstack.procs import free_ports, tail_file
from berth_dev.supervisor import ServiceProcess

from berth.bus import ensure_topics
from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings

pytestmark = pytest.mark.integration

READY_TIMEOUT_S = 120.0


def probe(port: int, path: str, timeout: float = 2.0) -> tuple[int, str] | None:
    """(status, body) of ``GET path``; None when nothing answered within ``timeout``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (OSError, TimeoutError):
        return None


def wait_for(
    port: int,
    path: str,
    want: Callable[[tuple[int, str] | None], bool],
    *,
    timeout: float,
    alive: Callable[[], None] = lambda: None,
) -> list[tuple[int, str] | None]:
    """Probe every 0.1 s until ``want(answer)``; returns every answer seen, the wanted one last."""
    seen: list[tuple[int, str] | None] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        answer = probe(port, path)
        seen.append(answer)
        if want(answer):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{path} on port {port} never as wanted within {timeout:.0f} s; last answers: {seen[-3:]}")


def status_is(status: int) -> Callable[[tuple[int, str] | None], bool]:
    return lambda answer: answer is not None and answer[0] == status


@pytest.fixture(scope="module")
def broker(kafka_bootstrap: str) -> Iterator[str]:
    """An empty broker for this module (``kafka_bootstrap`` proves the jars are there)."""
    from berth_dev.devstack.scratch import empty_kafka

    with empty_kafka() as bootstrap:
        asyncio.run(ensure_topics(KafkaSettings(bootstrap=bootstrap)))
        yield bootstrap


def start_service(name: str, args: list[str], bootstrap: str, tmp_path: Path) -> tuple[ServiceProcess, int]:
    health_port, metrics_port = free_ports(2)
    env = {**os.environ, "BERTH_KAFKA_BOOTSTRAP": bootstrap, "BERTH_LOG_LEVEL": "info"}
    service = ServiceProcess(
        name, [*args, "--health-port", str(health_port)], tmp_path / f"{name}.log", env, metrics_port
    )
    service.start()
    return service, health_port


def alive_check(service: ServiceProcess) -> Callable[[], None]:
    def check() -> None:
        if not service.is_alive():
            raise AssertionError(f"{service.name} exited:\n{tail_file(service.log_path)}")

    return check


def assert_sigstop_silences_livez(service: ServiceProcess, port: int) -> None:
    """SIGSTOP: the whole process, its loop included, stands still: the probe gets no answer."""
    assert service.pid is not None
    os.kill(service.pid, signal.SIGSTOP)
    try:
        assert probe(port, "/livez", timeout=2.0) is None
        assert probe(port, "/readyz", timeout=2.0) is None
    finally:
        os.kill(service.pid, signal.SIGCONT)
    wait_for(port, "/livez", status_is(200), timeout=30, alive=alive_check(service))


# --- decision ------------------------------------------------------------------------------------


def test_decision_subprocess_ready_once_assigned_then_sigstop_fails_livez(broker: str, tmp_path: Path):
    service, port = start_service("decision", ["run"], broker, tmp_path)
    try:
        answers = wait_for(port, "/readyz", status_is(200), timeout=READY_TIMEOUT_S, alive=alive_check(service))
        status, body = answers[-1]
        assert "[+]kafka-group ok" in body and "[+]cells ok" in body, body
        # Before its cells were assigned and rebuilt it said so (the health server starts first).
        early = [a for a in answers if a is not None and a[0] == 503]
        assert early and all("[-]" in body for _, body in early), answers[:5]
        verbose = probe(port, "/readyz?verbose")
        assert verbose is not None and "cell(s) [0, 1] taken over" in verbose[1], verbose
        assert probe(port, "/livez") is not None

        assert_sigstop_silences_livez(service, port)
        assert probe(port, "/readyz") == (200, "[+]kafka-group ok\n[+]cells ok\nreadyz check passed\n")
    finally:
        service.stop()
    assert "health endpoints listening" in service.log_path.read_text()


class InProcessDecision:
    """The decision service on an event loop of its own in a thread of this process."""

    def __init__(self, bootstrap: str, *, stale_after_s: float) -> None:
        self.bootstrap = bootstrap
        self.stale_after_s = stale_after_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None
        self.started = threading.Event()
        self.error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._go: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="decision-in-process", daemon=True)

    def _run(self) -> None:
        from berth.services.decision.health import register
        from berth.services.decision.service import DecisionService

        from berth.configfiles import load_cell_config
        from berth.health import HealthServer, serving

        settings = BerthSettings(kafka=KafkaSettings(bootstrap=self.bootstrap))

        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            self._stop, self._go = asyncio.Event(), asyncio.Event()
            service = DecisionService(settings, load_cell_config(None, None, settings.spot_label_table))
            health = register(HealthServer("decision", stale_after_s=self.stale_after_s, host="127.0.0.1"), service)
            async with serving(health, 0):
                self.port = health.port
                self.started.set()
                await self._go.wait()  # served before the service joins its group
                await service.run(self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:
            self.error = exc
        finally:
            self.started.set()

    def __enter__(self) -> InProcessDecision:
        self._thread.start()
        assert self.started.wait(60) and self.port is not None, self.error
        return self

    def run_service(self) -> None:
        assert self.loop is not None and self._go is not None
        self.loop.call_soon_threadsafe(self._go.set)

    def block_loop(self, seconds: float) -> None:
        assert self.loop is not None
        self.loop.call_soon_threadsafe(time.sleep, seconds)

    def __exit__(self, *exc: Any) -> None:
        if self.loop is not None and self._stop is not None and self._go is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            self.loop.call_soon_threadsafe(self._go.set)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the in-process decision service did not stop"


def test_decision_in_process_readyz_then_loop_stall_fails_livez_then_recovers(broker: str):
    stall_s, limit_s = 6.0, 3.0
    with InProcessDecision(broker, stale_after_s=limit_s) as decision:
        assert decision.port is not None
        port = decision.port
        status, body = probe(port, "/readyz") or (0, "")
        assert status == 503, body
        assert body.splitlines() == [
            "[-]kafka-group failed: waiting for consumer group berth-decision to assign partitions",
            "[-]cells failed: no cells assigned yet by consumer group berth-decision",
            "readyz check failed",
        ]
        assert probe(port, "/livez") == (200, "[+]loop ok\nlivez check passed\n")
        decision.run_service()
        wait_for(port, "/readyz", status_is(200), timeout=READY_TIMEOUT_S)
        assert probe(port, "/livez") == (200, "[+]loop ok\nlivez check passed\n")

        blocked_at = time.monotonic()
        decision.block_loop(stall_s)
        time.sleep(0.5)
        assert probe(port, "/livez", timeout=1.0) is None  # a stuck loop cannot answer
        # Right after the stall: answered, but failed (the heartbeat saw the gap).
        answers = wait_for(port, "/livez", lambda answer: answer is not None, timeout=stall_s + 10)
        assert time.monotonic() - blocked_at >= stall_s - 0.5
        status, body = answers[-1]
        assert status == 503, body
        assert "[-]loop failed: the event loop was blocked for" in body
        # ... and alive again once the stall is older than the limit.
        wait_for(port, "/livez", status_is(200), timeout=limit_s + 10)
        wait_for(port, "/readyz", status_is(200), timeout=60)
    assert decision.error is None, decision.error


# --- inventory (faust) ----------------------------------------------------------------------------


def test_inventory_ready_after_assignment_and_table_recovery(broker: str, tmp_path: Path):
    service, port = start_service("inventory", ["run", "--data-dir", str(tmp_path / "inventory")], broker, tmp_path)
    try:
        answers = wait_for(port, "/readyz", status_is(200), timeout=READY_TIMEOUT_S, alive=alive_check(service))
        assert answers[-1][1] == "[+]kafka-group ok\n[+]tables ok\nreadyz check passed\n"
        early = [a for a in answers if a is not None and a[0] == 503]
        assert early, answers[:5]  # served from the app's start, before the tables were recovered
        assert "[-]tables failed" in early[0][1]
        assert_sigstop_silences_livez(service, port)
    finally:
        service.stop()


# --- audit -----------------------------------------------------------------------------------------


async def _readyz_of_audit(settings: BerthSettings, run: bool) -> list[tuple[int, str]]:
    """/readyz answers of the audit service's checks served in-process (and ``run_audit`` if
    ``run``), until 200 or 30 s; the last one is the verdict."""
    import aiohttp
    from berth.services.audit.health import register
    from berth.services.audit.service import run_audit

    from berth.health import HealthServer, serving

    stop = asyncio.Event()
    answers: list[tuple[int, str]] = []
    async with serving(register(HealthServer("audit", host="127.0.0.1"), settings), 0) as health:
        task = asyncio.create_task(run_audit(settings, stop=stop)) if run else None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (task is None or not task.done()):
                async with session.get(f"http://127.0.0.1:{health.port}/readyz") as response:
                    answers.append((response.status, await response.text()))
                if answers[-1][0] == 200 or (task is None and len(answers) >= 2):
                    break
                await asyncio.sleep(0.2)
        stop.set()
        if task is not None:
            await task
    return answers


def test_audit_readyz_names_the_database_when_postgres_cannot_be_reached(broker: str):
    [closed] = free_ports(1)
    settings = BerthSettings(
        kafka=KafkaSettings(bootstrap=broker),
        database=DatabaseSettings(url=f"postgresql+psycopg://berth:secret@127.0.0.1:{closed}/berth"),
    )  # type: ignore[arg-type]  # a test double for the real type
    answers = asyncio.run(_readyz_of_audit(settings, run=False))
    status, body = answers[-1]
    assert status == 503
    assert (
        f"[-]database failed: database postgresql+psycopg://berth:***@127.0.0.1:{closed}/berth does not answer" in body
    )
    assert "secret" not in body
    assert "[-]caught-up failed" in body


async def _backlog(kafka: KafkaSettings, committed: int, aborted: int) -> None:
    """``committed`` cell ticks on cell 0's inputs, then a transaction of ``aborted`` ones on cell 1's,
    aborted (offsets that no reader ever sees, and the audit store never writes a position for)."""
    from datetime import datetime

    from aiokafka import AIOKafkaProducer
    from berth.schemas import CellTick
    from berth.schemas.envelope import encode
    from berth.schemas.topics import DECISION_INPUTS

    def tick() -> Any:
        return encode(CellTick(issued_at=datetime.now(UTC)), source="test")

    plain = AIOKafkaProducer(**kafka.client_options(), enable_idempotence=True)
    transactional = AIOKafkaProducer(
        **kafka.client_options(), enable_idempotence=True, transactional_id="test-health-aborted"
    )
    await plain.start()
    await transactional.start()
    try:
        for _ in range(committed):
            record = tick()
            await plain.send_and_wait(
                DECISION_INPUTS.name, record.value, key=record.key, headers=record.headers, partition=0
            )
        await transactional.begin_transaction()
        for _ in range(aborted):
            record = tick()
            await transactional.send_and_wait(
                DECISION_INPUTS.name, record.value, key=record.key, headers=record.headers, partition=1
            )
        await transactional.abort_transaction()
    finally:
        await plain.stop()
        await transactional.stop()


def test_audit_ready_on_a_real_database_once_the_backlog_is_written(broker: str, fresh_database: str):
    from berth.schemas.topics import DECISION_INPUTS
    from berth.services.audit.health import visible_ends

    settings = BerthSettings(kafka=KafkaSettings(bootstrap=broker), database=DatabaseSettings(url=fresh_database))  # type: ignore[arg-type]  # pydantic-settings parses the str
    before = asyncio.run(visible_ends(settings, [DECISION_INPUTS.name]))
    asyncio.run(_backlog(settings.kafka, committed=40, aborted=30))
    after = asyncio.run(visible_ends(settings, [DECISION_INPUTS.name]))
    assert after[(DECISION_INPUTS.name, 0)] == before[(DECISION_INPUTS.name, 0)] + 40
    assert after[(DECISION_INPUTS.name, 1)] == before[(DECISION_INPUTS.name, 1)]  # the aborted tail is not waited for

    answers = asyncio.run(_readyz_of_audit(settings, run=True))
    assert answers[-1] == (200, "[+]database ok\n[+]caught-up ok\nreadyz check passed\n"), answers[-3:]
    assert any("[-]caught-up failed" in body for status, body in answers if status == 503), answers[:3]
