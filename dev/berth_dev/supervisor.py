"""Running Berth's services as separate processes: for the demo, the benchmarks and crash tests.

Each service is ``berth <service> run ...`` in its own process group, its output appended to a
log file, its Prometheus endpoint on a free port (which doubles as the readiness probe). Built
on :mod:`berth_dev.devstack.procs`, so a killed supervisor takes its services with it — unless the
services were started ``detached`` (``berth dev up --with-kubernetes``): then they outlive this
process, and :meth:`ServiceProcess.to_state` / :meth:`ServiceProcess.from_state` let a later
process find, probe and stop them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import TYPE_CHECKING, Any

from berth_dev.devstack import procs

if TYPE_CHECKING:
    from berth.settings import KafkaSettings


class ServiceFailed(RuntimeError):
    """A service exited or never became ready; the message carries the tail of its log."""


@dataclass
class ServiceProcess:
    """One service process. ``args`` follow ``berth <name>`` (e.g. ``["run", "--qps", "50"]``).

    ``detached``: the process starts a session of its own and outlives this one (no parent-death
    signal, no stop at exit); keep :meth:`to_state` to stop it later.
    """

    name: str
    args: Sequence[str]
    log_path: Path
    env: dict[str, str]
    metrics_port: int
    popen: Popen[bytes] | None = field(default=None, repr=False)
    detached: bool = False
    recorded_pid: int | None = None
    """The pid of a process another Python process started (:meth:`from_state`); None for ours."""

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else self.recorded_pid

    @property
    def marker(self) -> str:
        """What this service's command line contains (a guard against pid reuse): its metrics port."""
        return f"--metrics-port {self.metrics_port}"

    def start(self) -> None:
        berth = str(Path(sys.executable).with_name("berth"))
        argv = [berth, self.name, *self.args, "--metrics-port", str(self.metrics_port)]
        self.popen = procs.spawn(argv, log_path=self.log_path, env=self.env, detached=self.detached)
        self.recorded_pid = None
        if not self.detached:
            procs.register_for_exit(self)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once the service's /metrics answers; raise ServiceFailed if it died."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise ServiceFailed(
                    f"{self.name} exited with {self.popen.returncode if self.popen else '?'}:\n"
                    f"{procs.tail_file(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise ServiceFailed(
            f"{self.name} did not answer on {url} within {timeout:.0f} s:\n{procs.tail_file(self.log_path)}"
        )

    def is_alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.recorded_pid is not None and procs.is_running(self.recorded_pid, cmdline_contains=self.marker)

    def is_answering(self, timeout: float = 3.0) -> bool:
        """True if ``/metrics`` answers now (what :meth:`wait_ready` waits for)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=timeout):
                return True
        except OSError:
            return False

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds. Idempotent."""
        if self.popen is not None:
            procs.terminate(self.popen.pid, popen=self.popen, grace=grace)
        elif self.recorded_pid is not None:
            procs.terminate(self.recorded_pid, cmdline_contains=self.marker, grace=grace)
        procs.unregister_for_exit(self)

    def kill(self) -> None:
        """``kill -9``: no shutdown hooks, no flush, no goodbye (for crash tests)."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        elif self.popen is None and self.is_alive():
            assert self.recorded_pid is not None
            os.killpg(self.recorded_pid, signal.SIGKILL)
            procs.wait_for_exit(self.recorded_pid, 10, cmdline_contains=self.marker)

    def to_state(self) -> dict[str, Any]:
        """What a detached service's starter records (JSON-able) so that another process can find it."""
        return {
            "name": self.name,
            "args": list(self.args),
            "pid": self.pid,
            "metrics_port": self.metrics_port,
            "log": str(self.log_path),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ServiceProcess:
        """A handle on a service another process started (probe, stop or kill it; not restart)."""
        return cls(
            state["name"],
            list(state.get("args") or ()),
            Path(state["log"]),
            {},
            int(state["metrics_port"]),
            detached=True,
            recorded_pid=state.get("pid"),
        )


class Supervisor:
    """Starts services with a shared environment and stops them all, in reverse order.

    ``detached=True`` starts every service detached (see :class:`ServiceProcess`); stopping them
    is then up to whoever keeps their state — leaving the ``with`` block does so only on an
    exception (a half-started set is not left behind).
    """

    def __init__(self, log_dir: Path, env: dict[str, str], *, detached: bool = False) -> None:
        self.log_dir = log_dir
        self.env = {**os.environ, **env}
        self.detached = detached
        self.services: dict[str, ServiceProcess] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self,
        name: str,
        args: Sequence[str] = ("run",),
        *,
        ready_timeout: float = 60.0,
        wait: bool = True,
        key: str | None = None,
    ) -> ServiceProcess:
        """Start ``berth <name> <args>``; ``key`` (default ``name``) names this instance in
        :attr:`services` and its log file, for several instances of one service."""
        key = key or name
        [port] = procs.free_ports(1)
        service = ServiceProcess(name, list(args), self.log_dir / f"{key}.log", self.env, port, detached=self.detached)
        service.start()
        self.services[key] = service
        if wait:
            service.wait_ready(ready_timeout)
        return service

    def restart(self, key: str, *, ready_timeout: float = 60.0) -> ServiceProcess:
        old = self.services[key]
        old.stop()
        return self.start(old.name, old.args, ready_timeout=ready_timeout, key=key)

    def check_alive(self) -> None:
        for service in self.services.values():
            if not service.is_alive():
                raise ServiceFailed(f"{service.name} stopped unexpectedly:\n{procs.tail_file(service.log_path)}")

    def stop_all(self) -> None:
        for service in reversed(list(self.services.values())):
            service.stop()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if not self.detached or exc_type is not None:
            self.stop_all()


async def create_pipeline_topics(kafka: KafkaSettings) -> list[str]:
    """Create every Berth topic that does not exist yet; return the names created.

    The faust services create their own internal topics when they start
    (:func:`berth.bus.streams.internal_topics`), so the contract's topics are all a pipeline needs
    up front.
    """
    from berth.bus import ensure_topics

    return list(await ensure_topics(kafka))
