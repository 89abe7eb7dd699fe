"""Kafka and Postgres together: in-process (:class:`DevStack`) or in the background (``up``/``down``).

With ``with_kubernetes=True`` (``berth dev up --with-kubernetes``) the stack also runs etcd and
kube-apiserver (:class:`~berth_dev.devstack.kube.KubeControlPlane`) and exports ``BERTH_KUBECONFIG``;
with ``with_services=True`` as well (what the ``berth`` CLI asks for), :func:`up` then migrates the
audit store, creates the topics and starts Berth itself against that apiserver — ingest,
inventory, token-lag, decision, audit and ``binder --backend kube`` — each detached, with its log
and data under ``$BERTH_RUN_DIR/services/`` (:data:`SERVICE_ORDER`, :func:`service_args`).

In-process, for tests and scripts::

    with DevStack() as stack:
        os.environ.update(stack.env())

In the background, for a developer's shell (``berth dev up`` / ``status`` / ``down``): :func:`up`
starts both services detached from this process and records them in a state file
(``$BERTH_RUN_DIR/devstack.json``, default ``<repo>/.run/devstack.json``); :func:`status` and
:func:`down` read it back, from any later process.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from berth_dev.devstack import procs
from berth_dev.devstack.cache import repo_root
from berth_dev.devstack.gobuild import ensure_kubernetes_binaries
from berth_dev.devstack.kafka import KafkaCluster, KafkaProcess, KafkaSecurity
from berth_dev.devstack.kube import KubeControlPlane
from berth_dev.devstack.postgres import PostgresProcess
from berth_dev.devstack.procs import DevStackError
from berth_dev.devstack.tls import make_tls_files

STATE_FORMAT = 1
ENV_KAFKA = "BERTH_KAFKA_BOOTSTRAP"
ENV_DATABASE = "BERTH_DATABASE_URL"
ENV_KUBECONFIG = "BERTH_KUBECONFIG"

#: Progress and diagnostics; stdout is kept for output meant to be parsed (the env lines).
err_console = Console(stderr=True)


def run_dir() -> Path:
    """Where the background stack's state lives: ``$BERTH_RUN_DIR`` or ``<repo>/.run``."""
    override = os.environ.get("BERTH_RUN_DIR")
    return Path(override).expanduser().resolve() if override else repo_root() / ".run"


def state_file() -> Path:
    return run_dir() / "devstack.json"


def services_dir() -> Path:
    """Logs and local state of the Berth services :func:`up` starts (removed by :func:`down`)."""
    return run_dir() / "services"


#: The Berth services of a stack with Kubernetes, in start order: ingest last, since it publishes
#: the cluster as soon as it holds its Lease. They stop in reverse order.
SERVICE_ORDER = ("audit", "inventory", "token-lag", "decision", "binder", "ingest")


def service_args(kubeconfig: Path, work: Path) -> dict[str, list[str]]:
    """``berth <service>`` arguments of each service of :data:`SERVICE_ORDER` for the cluster of
    ``kubeconfig``; ``work`` holds the faust services' local table stores."""
    return {
        "audit": ["run"],
        "inventory": ["run", "--data-dir", str(work / "inventory")],
        "token-lag": ["run", "--data-dir", str(work / "token-lag")],
        "decision": ["run"],
        "binder": ["run", "--backend", "kube", "--kubeconfig", str(kubeconfig)],
        "ingest": ["run", "--kubeconfig", str(kubeconfig), "--lease-namespace", "default"],
    }


class DevStack:
    """Kafka and Postgres (and, with ``with_kubernetes``, etcd + kube-apiserver) started together;
    all stop together. ``kafka_brokers=3``: a three-broker KRaft cluster
    (:class:`~berth_dev.devstack.kafka.KafkaCluster`, in-process only) instead of one broker.

    :meth:`start` boots Postgres (and the control plane) while the Kafka JVM warms up, so the
    stack is ready in about the time its slowest member needs. If one fails, all are stopped
    before the error propagates. Kubernetes binaries missing from the cache are built first,
    before anything starts (many minutes the first time).

    ``secured_in``: a directory for a CA and a server certificate made now; Kafka then takes
    clients only over SASL_SSL (SCRAM-SHA-512, user ``berth``, a random password) and SSL, and
    Postgres only over TLS with the role's (random) password; :meth:`env` carries the settings
    that reach them. In-process, one broker only.
    """

    def __init__(
        self,
        *,
        detached: bool = False,
        with_kubernetes: bool = False,
        kafka: KafkaProcess | None = None,
        postgres: PostgresProcess | None = None,
        kube: KubeControlPlane | None = None,
        kafka_brokers: int = 1,
        secured_in: Path | None = None,
    ) -> None:
        if kafka_brokers > 1 and (detached or kafka is not None):
            raise DevStackError("a several-broker Kafka runs in-process only (not detached, not given)")
        if secured_in is not None and (detached or kafka or postgres or kafka_brokers > 1):
            raise DevStackError("a secured stack runs in-process only, with one broker of its own making")
        self.security: KafkaSecurity | None = None
        if secured_in is not None:
            tls = make_tls_files(secured_in)
            self.security = KafkaSecurity(tls, {"berth": secrets.token_urlsafe(18)})
            kafka = KafkaProcess(security=self.security)
            postgres = PostgresProcess(tls=tls, password=secrets.token_urlsafe(18))
        self.kafka: KafkaProcess | KafkaCluster = (
            KafkaCluster(size=kafka_brokers) if kafka_brokers > 1 else kafka or KafkaProcess(detached=detached)
        )
        self.postgres = postgres or PostgresProcess(detached=detached)
        self.kube = kube or (KubeControlPlane(detached=detached) if with_kubernetes else None)

    def start(self) -> DevStack:
        if self.kube is not None and self.kube.binaries is None:
            self.kube.binaries = ensure_kubernetes_binaries()
        try:
            self.kafka.launch()
            self.postgres.launch()
            if self.kube is not None:
                self.kube.launch()
            self.postgres.wait_until_ready()
            if self.kube is not None:
                self.kube.wait_until_ready()
            self.kafka.wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every service (each stop is attempted even if another fails)."""
        try:
            self.kafka.stop()
        finally:
            try:
                self.postgres.stop()
            finally:
                if self.kube is not None:
                    self.kube.stop()

    def env(self) -> dict[str, str]:
        """The environment variables through which Berth's code and tests find these services."""
        env = {ENV_KAFKA: self.kafka.bootstrap_servers, ENV_DATABASE: self.postgres.url}
        if self.security is not None:
            env |= {**self.security.client_settings(), **self.postgres.client_settings()}
        if self.kube is not None:
            env[ENV_KUBECONFIG] = str(self.kube.kubeconfig_path)
        return env

    def to_state(self) -> dict[str, Any]:
        state = {
            "format": STATE_FORMAT,
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "env": self.env(),
            "kafka": self.kafka.to_state(),
            "postgres": self.postgres.to_state(),
        }
        if self.kube is not None:
            state["kubernetes"] = self.kube.to_state()
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> DevStack:
        kube_state = state.get("kubernetes")
        return cls(
            kafka=KafkaProcess.from_state(state.get("kafka") or {}),
            postgres=PostgresProcess.from_state(state.get("postgres") or {}),
            kube=KubeControlPlane.from_state(kube_state) if kube_state else None,
        )

    def __enter__(self) -> DevStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------------
# Background mode: berth dev up / status / down
# ------------------------------------------------------------------------------------------------


def _read_state() -> dict[str, Any] | None:
    path = state_file()
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise DevStackError(f"{path} is not valid JSON ({exc}); stop any leftover processes and delete it") from exc
    if state.get("format") != STATE_FORMAT:
        raise DevStackError(f"{path} was written by another version of berth; stop its processes and delete it")
    return state


def _write_state(state: dict[str, Any]) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    partial.replace(path)  # atomic: readers never see half a file


def _print_env(env: dict[str, str], out: TextIO) -> None:
    for key, value in env.items():
        print(f"{key}={value}", file=out)
    out.flush()


def up(*, out: TextIO | None = None, with_kubernetes: bool = False, with_services: bool = False) -> dict[str, str]:
    """Start Kafka and Postgres in the background and record them in :func:`state_file`.

    Prints ``BERTH_KAFKA_BOOTSTRAP=...`` and ``BERTH_DATABASE_URL=...`` lines on ``out``
    (default stdout; progress goes to stderr, so ``export $(berth dev up)`` works) and returns
    them as a dict. If a recorded stack is already running and answering, it is reused; a
    half-dead one is stopped and replaced. Raises :class:`DevStackError` if a service cannot start
    (nothing is left running then).

    ``with_kubernetes``: also etcd + kube-apiserver (building them first if the cache lacks them:
    many minutes the first time), and a ``BERTH_KUBECONFIG=...`` line. A running stack without
    Kubernetes gets a control plane added to it.

    ``with_services`` (only with ``with_kubernetes``): then migrate the audit store, create the
    topics and start the Berth services against the control plane (see the module docstring),
    returning once each one's /metrics answers; a running stack without them gets them added.
    """
    out = out or sys.stdout
    if with_services and not with_kubernetes:
        raise DevStackError("the Berth services need the Kubernetes control plane: add --with-kubernetes")
    state = _read_state()
    if state is not None:
        current = status(quiet=True)
        if current.healthy:
            added = False
            if with_kubernetes and not state.get("kubernetes"):
                state, added = _add_kubernetes(state), True
            if with_services and not state.get("services"):
                state, added = _add_services(state), True
            if not added:
                err_console.print("[green]Dev stack already running[/green] (berth dev status for details)")
            _print_env(state["env"], out)
            return dict(state["env"])
        err_console.print("[yellow]Recorded dev stack is not healthy; replacing it.[/yellow]")
        down(quiet=True)

    stack = DevStack(detached=True, with_kubernetes=with_kubernetes)
    if stack.kube is not None:
        stack.kube.binaries = ensure_kubernetes_binaries()  # before the spinner: it shows its own progress
    what = "Kafka, Postgres and Kubernetes" if with_kubernetes else "Kafka and Postgres"
    with err_console.status(f"Starting {what} in the background…"):
        stack.start()
    try:
        _write_state(stack.to_state())
    except BaseException:
        stack.stop()
        raise
    kube_note = ""
    if stack.kube is not None:
        kube_note = f", kube-apiserver {stack.kube.binaries.kubernetes_version} (pid {stack.kube.apiserver_pid})"  # type: ignore[union-attr]  # kube is set in this branch
    err_console.print(
        f"[green]✓[/green] Kafka {stack.kafka.version} (pid {stack.kafka.pid}){kube_note} and "
        f"Postgres (pid {stack.postgres.pid}) running; state in {state_file()}. Stop with: berth dev down"
    )
    state = stack.to_state()
    if with_services:
        try:
            state = _add_services(state)
        except BaseException:
            down(quiet=True)  # nothing half-started is left running
            raise
    _print_env(state["env"], out)
    return dict(state["env"])


def _add_kubernetes(state: dict[str, Any]) -> dict[str, Any]:
    """Start a detached control plane next to a running stack and record it in the same state file."""
    kube = KubeControlPlane(detached=True)
    kube.binaries = ensure_kubernetes_binaries()
    with err_console.status("Starting etcd and kube-apiserver in the background…"):
        kube.start()
    try:
        state["kubernetes"] = kube.to_state()
        state["env"] = {**state["env"], ENV_KUBECONFIG: str(kube.kubeconfig_path)}
        _write_state(state)
    except BaseException:
        kube.stop()
        raise
    err_console.print(
        f"[green]✓[/green] kube-apiserver (pid {kube.apiserver_pid}) added to the running dev stack. "
        "Stop everything with: berth dev down"
    )
    return state


def _add_services(state: dict[str, Any]) -> dict[str, Any]:
    """Migrate the audit store, create the topics and start every Berth service detached against
    the recorded stack; record them in the state file. If one does not become ready, those
    started are stopped again and :class:`DevStackError` carries the tail of its log."""
    import asyncio

    from berth.services.audit import db

    from berth.settings import DatabaseSettings, load_settings
    from berth_dev.supervisor import ServiceFailed, Supervisor, create_pipeline_topics

    env = state["env"]
    work = services_dir()
    procs.remove_dir(work)  # leftovers of a stack that was not stopped with down(): stale tables
    with err_console.status("Migrating the audit store and creating the topics…"):
        db.upgrade(DatabaseSettings(url=env[ENV_DATABASE]))
        # The installation's own topics: the services below get the caller's BERTH_KAFKA__* too.
        asyncio.run(create_pipeline_topics(load_settings(kafka=env[ENV_KAFKA]).kafka))
    args = service_args(Path(env[ENV_KUBECONFIG]), work)
    supervisor = Supervisor(work / "logs", {ENV_KAFKA: env[ENV_KAFKA], ENV_DATABASE: env[ENV_DATABASE]}, detached=True)
    try:
        with err_console.status(f"Starting {', '.join(SERVICE_ORDER)}…"):
            # All at once, then wait for each: on 2 cores the faust workers take ~10 s apiece.
            for name in SERVICE_ORDER:
                supervisor.start(name, args[name], wait=False)
            for service in supervisor.services.values():
                service.wait_ready(timeout=180)
        state["services"] = [service.to_state() for service in supervisor.services.values()]
        _write_state(state)
    except ServiceFailed as exc:
        supervisor.stop_all()
        raise DevStackError(f"a Berth service did not start: {exc}") from exc
    except BaseException:
        supervisor.stop_all()
        raise
    err_console.print(
        "[green]✓[/green] Berth running against the apiserver: "
        + ", ".join(f"{name} (pid {service.pid})" for name, service in supervisor.services.items())
        + f"; logs in {work / 'logs'}"
    )
    return state


def recorded_services(state: dict[str, Any]) -> list[Any]:
    """Handles (:class:`~berth_dev.supervisor.ServiceProcess`) on the services recorded in ``state``."""
    from berth_dev.supervisor import ServiceProcess

    return [ServiceProcess.from_state(entry) for entry in state.get("services") or ()]


def recorded_kubeconfig() -> Path:
    """The kubeconfig of the background stack's control plane (``berth dev up --with-kubernetes``).

    Raises :class:`DevStackError` when no stack with Kubernetes is recorded.
    """
    state = _read_state()
    kube_state = (state or {}).get("kubernetes") or {}
    if not kube_state.get("kubeconfig"):
        raise DevStackError(
            f"no Kubernetes control plane recorded in {state_file()}; start one with: berth dev up --with-kubernetes"
        )
    return Path(kube_state["kubeconfig"])


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    alive: bool
    answering: bool
    endpoint: str | None
    directory: str | None


@dataclass(frozen=True)
class StackStatus:
    """What :func:`status` found. ``recorded`` is False when no state file exists."""

    recorded: bool
    state_file: Path
    services: list[ServiceStatus] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.recorded and bool(self.services) and all(s.alive and s.answering for s in self.services)


def status(*, quiet: bool = False, out: TextIO | None = None) -> StackStatus:
    """Report the recorded background stack: pids, whether each is alive and answering, endpoints.

    Prints a table on ``out`` (default stdout) unless ``quiet``, and returns the findings.
    """
    state = _read_state()
    if state is None:
        result = StackStatus(recorded=False, state_file=state_file())
    else:
        stack = DevStack.from_state(state)
        kafka, postgres = stack.kafka, stack.postgres
        kafka_alive, postgres_alive = kafka.is_alive(), postgres.is_alive()
        services = [
            ServiceStatus(
                "kafka",
                kafka.pid,
                kafka_alive,
                kafka_alive and kafka.is_answering(timeout=3.0),
                state["kafka"].get("bootstrap_servers"),
                state["kafka"].get("data_dir"),
            ),
            ServiceStatus(
                "postgres",
                postgres.pid,
                postgres_alive,
                postgres_alive and postgres.is_answering(timeout=3.0),
                state["postgres"].get("url"),
                state["postgres"].get("base_dir"),
            ),
        ]
        if stack.kube is not None:
            kube_alive = stack.kube.is_alive()  # etcd and kube-apiserver both
            services.append(
                ServiceStatus(
                    "kubernetes",
                    stack.kube.apiserver_pid,
                    kube_alive,
                    kube_alive and stack.kube.is_answering(timeout=3.0),
                    state["kubernetes"].get("server"),
                    state["kubernetes"].get("data_dir"),
                )
            )
        for service in recorded_services(state):
            alive = service.is_alive()
            services.append(
                ServiceStatus(
                    service.name,
                    service.pid,
                    alive,
                    alive and service.is_answering(timeout=3.0),
                    f"http://127.0.0.1:{service.metrics_port}/metrics",
                    str(service.log_path),
                )
            )
        result = StackStatus(recorded=True, state_file=state_file(), env=dict(state.get("env", {})), services=services)
    if not quiet:
        _render_status(result, out or sys.stdout)
    return result


def _render_status(result: StackStatus, out: TextIO) -> None:
    # One line per service and soft wrapping: URLs and paths must stay copyable in full.
    console = Console(file=out, soft_wrap=True, highlight=False)
    if not result.recorded:
        console.print(f"No dev stack recorded ({result.state_file}). Start one with: berth dev up")
        return
    console.print(f"Dev stack recorded in {result.state_file}:")
    for service in result.services:
        alive = "[green]alive[/green]" if service.alive else "[red]not running[/red]"
        answering = "[green]answering[/green]" if service.answering else "[red]not answering[/red]"
        console.print(
            f"  {service.name:<10} pid {service.pid}  {alive}  {answering}  "
            f"{service.endpoint or '-'}  {service.directory or '-'}"
        )
    if result.healthy:
        for key, value in result.env.items():
            console.print(f"{key}={value}", markup=False)


def down(*, quiet: bool = False, out: TextIO | None = None) -> list[str]:
    """Stop every service recorded by :func:`up` and delete the state file.

    Prints what it did on ``out`` (default stdout) unless ``quiet``. Returns the names of the
    services that were still running. Pids are only signalled while
    their command line still names the recorded data directory, so a stale state file cannot
    make us kill an unrelated process that reused a pid.
    """
    state = _read_state()
    if state is None:
        if not quiet:
            print(f"No dev stack recorded ({state_file()}); nothing to stop.", file=out or sys.stdout)
        return []
    stack = DevStack.from_state(state)
    berth_services = recorded_services(state)
    services: list[tuple[str, Any]] = [(service.name, service) for service in berth_services]
    services += [("kafka", stack.kafka), ("postgres", stack.postgres)]
    if stack.kube is not None:
        services.append(("kubernetes", stack.kube))
    running = [name for name, service in services if service.is_alive()]
    try:
        # Berth first (reverse start order), while Kafka, Postgres and the apiserver still answer
        # its goodbyes (offset commits, the Lease release).
        for service in reversed(berth_services):
            service.stop()
    finally:
        stack.stop()
    state_file().unlink(missing_ok=True)
    if services_dir().exists():
        procs.remove_dir(services_dir())
    procs.sweep_stale_dirs()
    if not quiet:
        stopped = ", ".join(running) if running else "nothing was running"
        print(f"Dev stack stopped ({stopped}).", file=out or sys.stdout)
    return running


def fake_nodes(
    count: int, *, kubeconfig: str | Path | None = None, delete: bool = False, **options: Any
) -> list[str] | int:
    """Create ``count`` fake GPU nodes (or, with ``delete``, remove them; returns how many) on the
    cluster of ``kubeconfig``, else ``$BERTH_KUBECONFIG``, else the recorded dev stack's."""
    from berth_dev.devstack.fakenodes import create_fake_nodes, delete_fake_nodes
    from berth_dev.devstack.kube import KubeConnection

    config = kubeconfig or os.environ.get(ENV_KUBECONFIG) or recorded_kubeconfig()
    with KubeConnection.from_kubeconfig(config).api_client() as api:
        if delete:
            return delete_fake_nodes(api)
        return create_fake_nodes(api, count, **options)
