"""Running Berth's services as separate processes: for the demo, the benchmarks and crash tests.

Each service is ``berth <service> run ...`` in its own process group, its output appended to a
log file, its Prometheus endpoint on a free port (which doubles as the readiness probe). Built
on :mod:`berth.devstack.procs`, so a killed supervisor takes its services with it.
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

from berth.devstack import procs


class ServiceFailed(RuntimeError):
    """A service exited or never became ready; the message carries the tail of its log."""


@dataclass
class ServiceProcess:
    """One service process. ``args`` follow ``berth <name>`` (e.g. ``["run", "--qps", "50"]``)."""

    name: str
    args: Sequence[str]
    log_path: Path
    env: dict[str, str]
    metrics_port: int
    popen: Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        berth = str(Path(sys.executable).with_name("berth"))
        argv = [berth, self.name, *self.args, "--metrics-port", str(self.metrics_port)]
        self.popen = procs.spawn(argv, log_path=self.log_path, env=self.env)
        procs.register_for_exit(self)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once the service's /metrics answers; raise ServiceFailed if it died."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise ServiceFailed(f"{self.name} exited with {self.popen.returncode if self.popen else '?'}:\n"
                                    f"{procs.tail_file(self.log_path)}")
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise ServiceFailed(f"{self.name} did not answer on {url} within {timeout:.0f} s:\n"
                            f"{procs.tail_file(self.log_path)}")

    def is_alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds. Idempotent."""
        if self.popen is not None:
            procs.terminate(self.popen.pid, popen=self.popen, grace=grace)
        procs.unregister_for_exit(self)

    def kill(self) -> None:
        """``kill -9``: no shutdown hooks, no flush, no goodbye (for crash tests)."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)


class Supervisor:
    """Starts services with a shared environment and stops them all, in reverse order."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = {**os.environ, **env}
        self.services: dict[str, ServiceProcess] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, args: Sequence[str] = ("run",), *, ready_timeout: float = 60.0,
              wait: bool = True) -> ServiceProcess:
        [port] = procs.free_ports(1)
        service = ServiceProcess(name, list(args), self.log_dir / f"{name}.log", self.env, port)
        service.start()
        self.services[name] = service
        if wait:
            service.wait_ready(ready_timeout)
        return service

    def restart(self, name: str, *, ready_timeout: float = 60.0) -> ServiceProcess:
        old = self.services[name]
        old.stop()
        return self.start(name, old.args, ready_timeout=ready_timeout)

    def check_alive(self) -> None:
        for service in self.services.values():
            if not service.is_alive():
                raise ServiceFailed(f"{service.name} stopped unexpectedly:\n{procs.tail_file(service.log_path)}")

    def stop_all(self) -> None:
        for service in reversed(list(self.services.values())):
            service.stop()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
