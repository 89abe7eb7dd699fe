"""Real Apache Kafka brokers (KRaft, broker+controller) run straight from their jars.

No Docker and no Kafka shell scripts: we format the storage with ``kafka.tools.StorageTool`` and
start ``kafka.Kafka`` with a classpath from :mod:`berth_dev.devstack.cache`. Everything a broker
writes (data, its log4j log, the JVM's own output) lives in one temporary directory that is
removed on :meth:`KafkaProcess.stop`.

:class:`KafkaProcess` is one broker (by default a single-node cluster of its own);
:class:`KafkaCluster` is three of them forming one KRaft quorum (replication factor 3,
``min.insync.replicas=2``), with the fault helpers the reliability tests use: kill -9 a broker,
restart it on its own data, a rolling restart, "who leads this partition", "are all replicas in
sync".
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from berth_dev.devstack import procs
from berth_dev.devstack.cache import KAFKA_VERSION, ensure_kafka_jars
from berth_dev.devstack.procs import DevStackError
from berth_dev.devstack.tls import TlsFiles

T = TypeVar("T")

#: Heap sized for a dev/test broker on a small machine. We launch ``java`` ourselves, so this
#: replaces what KAFKA_HEAP_OPTS would do for Kafka's shell scripts.
DEFAULT_HEAP_OPTIONS: tuple[str, ...] = ("-Xms256m", "-Xmx768m")

#: Brokers of the dev stack stop at the C1 compiler. A dev broker lives for a test, a demo, a
#: soak or a bench (seconds to half an hour). On a 2-core machine C2's compilation of its hot
#: paths was 43 % of the broker's CPU during bench.k8s's measured run (thread CPU times of the JVM:
#: 5.4 s of 12.5 s); with C1 alone the request threads used the same CPU (5.7 s vs 5.6 s) and
#: nothing else did. A production broker runs for weeks, long past its compilation: this way the
#: benches charge Berth for a warm broker's work, not for a JIT warm-up users' brokers paid long ago.
BROKER_JIT_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1",)

#: StorageTool runs for a couple of seconds; stopping at the C1 compiler and a serial collector
#: start it noticeably faster on a 2-core machine and cost nothing for so short a run.
_SHORT_RUN_JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m")

JAVA_HINT = "Install a Java runtime (apt-get install openjdk-17-jre-headless) or set JAVA_HOME."


def find_java() -> str:
    """Path of the ``java`` to use: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise DevStackError(f"java not found: {JAVA_HINT}")
    return found


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka's Uuid).

    Kafka rejects ids that start with '-' (they read as command-line flags), so those are redrawn.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class KafkaSecurity:
    """A secured broker: clients connect over SASL_SSL (SCRAM-SHA-512, one of ``users``) on the
    broker's main port, or over SSL (TLS, no SASL) on its ``tls_port``; the broker's certificate
    comes from ``tls`` and clients trust ``tls.ca_cert``. The controller listener stays plain
    (127.0.0.1 only, no client talks to it)."""

    tls: TlsFiles
    users: Mapping[str, str]
    """SCRAM-SHA-512 credentials (user name → password), created when the storage is formatted."""

    def client_settings(self, protocol: str = "SASL_SSL") -> dict[str, str]:
        """``BERTH_KAFKA__*`` variables that connect a Berth process as the first user (the
        bootstrap address is not among them: it differs per listener)."""
        env = {"BERTH_KAFKA__SECURITY_PROTOCOL": protocol, "BERTH_KAFKA__SSL_CAFILE": str(self.tls.ca_cert)}
        if protocol == "SASL_SSL":
            user, password = next(iter(self.users.items()))
            env |= {
                "BERTH_KAFKA__SASL_MECHANISM": SCRAM_MECHANISM,
                "BERTH_KAFKA__SASL_USERNAME": user,
                "BERTH_KAFKA__SASL_PASSWORD": password,
            }
        return env

    def client_options(self) -> dict[str, object]:
        """aiokafka keyword arguments (beside ``bootstrap_servers``) for the SASL_SSL listener."""
        from berth.settings import KafkaSettings

        user, password = next(iter(self.users.items()))
        settings = KafkaSettings(
            security_protocol="SASL_SSL",
            sasl_mechanism=SCRAM_MECHANISM,
            sasl_username=user,
            sasl_password=password,
            ssl_cafile=self.tls.ca_cert,
        )
        options = settings.client_options()
        del options["bootstrap_servers"], options["client_id"]
        return options

    def scram_arguments(self) -> list[str]:
        """StorageTool's ``--add-scram`` arguments creating :attr:`users`."""
        return [
            arg
            for user, password in self.users.items()
            for arg in ("--add-scram", f'{SCRAM_MECHANISM}=[name={user},password="{password}"]')
        ]

    def redact(self, text: str) -> str:
        """``text`` with every password of :attr:`users` replaced by ``***``."""
        for password in self.users.values():
            text = text.replace(password, "***")
        return text


def _security_properties(security: KafkaSecurity, port: int, tls_port: int, controller_port: int) -> dict[str, str]:
    """The listeners and TLS/SASL settings of a secured broker; brokers talk to each other over
    the SSL listener."""
    tls = security.tls
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{tls_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{tls_port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "SSL",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_cert),
        "ssl.client.auth": "none",
    }


def server_properties(
    *,
    port: int,
    controller_port: int,
    log_dirs: Path,
    node_id: int = 1,
    quorum_voters: str | None = None,
    cluster_size: int = 1,
    security: KafkaSecurity | None = None,
    tls_port: int | None = None,
) -> str:
    """A broker's configuration, on 127.0.0.1 only: every node is broker and controller.

    ``cluster_size`` 1 (default): one node that is its own controller, every replication factor 1.
    ``cluster_size`` 3 (:class:`KafkaCluster`): ``quorum_voters`` names the three controllers;
    topics (the internal ones included) get 3 replicas and ``min.insync.replicas=2``, so an
    ``acks=all`` write survives the loss of any one broker and is refused, not lost, with two down.
    ``security`` (with ``tls_port``): SASL_SSL on ``port`` and SSL on ``tls_port`` instead of
    PLAINTEXT (:class:`KafkaSecurity`).
    """
    replication = min(3, cluster_size)
    min_insync = 2 if replication >= 3 else 1
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum_voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dirs),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(min_insync),
        "auto.create.topics.enable": "true",
        # Internal topics must fit on the brokers there are (one, in a single-node cluster).
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min_insync),
        # Never elect an out-of-sync replica: that would drop acknowledged records.
        "unclean.leader.election.enable": "false",
        # The first consumer group otherwise waits 3 s for more members, in every test.
        "group.initial.rebalance.delay.ms": "0",
        # The defaults (50 partitions each) make the first consumer group or transaction
        # create 50 partitions on a dev broker; a few are plenty and start much faster.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4",
    }
    if security is not None:
        if tls_port is None:
            raise DevStackError("a secured broker needs a port for its SSL listener")
        settings |= _security_properties(security, port, tls_port, controller_port)
    return "".join(f"{key}={value}\n" for key, value in settings.items())


#: StorageTool's log4j configuration: warnings only, to stderr, where run_checked collects them
#: for its error message (the broker's log file stays the broker's alone).
_STORAGE_TOOL_LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%p %m (%c)%n
"""


def log4j_properties(log_file: Path) -> str:
    """log4j 1.x (reload4j) configuration sending the broker's log to ``log_file``, not stdout."""
    return f"""\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log_file}
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
"""


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Silence a library logger while we expect it to fail (connection refused while booting)."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, even if an event loop is running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def fetch_cluster_metadata(
    bootstrap_servers: str, *, timeout: float, client_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Ask the cluster for its metadata with a real Kafka client (aiokafka's admin client).

    Returns ``describe_cluster()``'s answer (``brokers``, ``controller_id``, ``cluster_id``).
    ``client_options``: aiokafka's security arguments for a secured broker.
    Raises whatever aiokafka raises when nobody answers within ``timeout`` seconds.
    """
    from aiokafka.admin import AIOKafkaAdminClient  # heavy import, only when used

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        request_timeout_ms=max(1000, int(timeout * 1000)),
        client_id="berth-devstack-probe",
        **(client_options or {}),
    )
    try:
        await asyncio.wait_for(admin.start(), timeout)
        return await asyncio.wait_for(admin.describe_cluster(), timeout)
    finally:
        await admin.close()


def kafka_answers(
    bootstrap_servers: str, *, timeout: float = 5.0, client_options: Mapping[str, Any] | None = None
) -> bool:
    """True if a broker at ``bootstrap_servers`` returns metadata listing at least one broker."""
    try:
        with _quiet_logger("aiokafka"):
            metadata = _run_sync(
                fetch_cluster_metadata(bootstrap_servers, timeout=timeout, client_options=client_options)
            )
    except Exception:
        return False
    return bool(metadata.get("brokers"))


class KafkaProcess:
    """One Kafka 3.9 broker (KRaft, single node) on free ports of 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`::

        with KafkaProcess() as kafka:
            produce_to(kafka.bootstrap_servers)

    Contract:

    * :meth:`start` returns only once a Kafka client got cluster metadata listing the broker, or
      raises :class:`DevStackError` (with the tail of the broker's log) and leaves nothing behind.
    * ``detached=False`` (default): the JVM is killed with this Python process, whatever the
      cause of death; an un-stopped broker is stopped at interpreter exit.
    * ``detached=True``: the JVM outlives this process (``berth dev up``). Save
      :meth:`to_state` and later call ``KafkaProcess.from_state(...).stop()``.
    * :meth:`stop` is idempotent: SIGTERM (Kafka's controlled shutdown), SIGKILL after
      ``stop_grace`` seconds, then the temporary directory is removed.
    """

    def __init__(
        self,
        *,
        version: str = KAFKA_VERSION,
        heap_options: Sequence[str] = DEFAULT_HEAP_OPTIONS,
        extra_jvm_options: Sequence[str] = (),
        startup_timeout: float = 90.0,
        stop_grace: float = 20.0,
        detached: bool = False,
        node_id: int = 1,
        cluster_id: str | None = None,
        port: int | None = None,
        controller_port: int | None = None,
        quorum_voters: str | None = None,
        cluster_size: int = 1,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.version = version
        self.heap_options = tuple(heap_options)
        self.extra_jvm_options = tuple(extra_jvm_options)
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.detached = detached
        # Members of a KafkaCluster get these from it; a lone broker picks its own.
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.quorum_voters = quorum_voters
        self.cluster_size = cluster_size
        self.security = security
        self.tls_port: int | None = None
        """The SSL listener's port of a secured broker (``port`` is then its SASL_SSL listener's)."""
        self.port: int | None = port
        self.controller_port: int | None = controller_port
        self.data_dir: Path | None = None
        self.pid: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    # -- endpoints ------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``, for Kafka clients' ``bootstrap_servers``."""
        if self.port is None:
            raise DevStackError("Kafka is not started: call start() first")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The broker's log4j log (where to look when something goes wrong)."""
        return self.data_dir / "logs" / "server.log" if self.data_dir else None

    @property
    def stdout_path(self) -> Path | None:
        """The JVM's own stdout/stderr (crashes before log4j is set up land here)."""
        return self.data_dir / "kafka.out" if self.data_dir else None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> KafkaProcess:
        """Launch the broker and wait until it answers; see the class contract."""
        self.launch()
        self.wait_until_ready()
        return self

    def launch(self) -> None:
        """Format storage and spawn the broker without waiting for it (pair with wait_until_ready).

        Split from :meth:`start` so :class:`~berth_dev.devstack.stack.DevStack` can boot Postgres
        while the JVM warms up. On failure everything created so far is removed.
        """
        if self.pid is not None:
            raise DevStackError(f"this KafkaProcess is already running (pid {self.pid})")
        java = find_java()
        libs = ensure_kafka_jars(self.version)
        procs.sweep_stale_dirs()
        self.data_dir = procs.make_temp_dir("kafka")
        try:
            self._launch(java, libs, self.data_dir)
        except BaseException:
            self.stop()
            raise
        if not self.detached:
            procs.register_for_exit(self)

    def _launch(self, java: str, libs: Path, data_dir: Path) -> None:
        # Ports are chosen together: chosen one call at a time, two listeners could get the same.
        if self.port is None or self.controller_port is None:
            ports = procs.free_ports(3 if self.security is not None else 2)
            self.port, self.controller_port = ports[:2]
            if self.security is not None:
                self.tls_port = ports[2]
        elif self.security is not None and self.tls_port is None:
            taken = (self.port, self.controller_port)
            self.tls_port = next(port for port in procs.free_ports(3) if port not in taken)
        config = data_dir / "server.properties"
        config.write_text(
            server_properties(
                port=self.port,
                controller_port=self.controller_port,
                log_dirs=data_dir / "data",
                node_id=self.node_id,
                quorum_voters=self.quorum_voters,
                cluster_size=self.cluster_size,
                security=self.security,
                tls_port=self.tls_port,
            )
        )
        (data_dir / "logs").mkdir()
        log4j = data_dir / "log4j.properties"
        log4j.write_text(log4j_properties(data_dir / "logs" / "server.log"))
        storage_tool_log4j = data_dir / "log4j-storage-tool.properties"
        storage_tool_log4j.write_text(_STORAGE_TOOL_LOG4J)
        classpath = f"{libs}/*"
        common = [f"-Dkafka.logs.dir={data_dir / 'logs'}", "-Djava.awt.headless=true"]
        format_storage = [
            java,
            *_SHORT_RUN_JVM_OPTIONS,
            *common,
            f"-Dlog4j.configuration=file:{storage_tool_log4j}",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id or new_cluster_id(),
            "-c",
            str(config),
            *(self.security.scram_arguments() if self.security is not None else ()),
        ]
        try:
            procs.run_checked(
                format_storage,
                what="format Kafka storage",
                hint=f"Is the jar cache complete? Delete {libs.parent} to fetch it again.",
                cwd=data_dir,
            )
        except DevStackError as exc:
            if self.security is None:
                raise
            raise DevStackError(self.security.redact(str(exc))) from None  # the command line holds the passwords
        self._spawn(java, libs, data_dir)

    def _spawn(self, java: str, libs: Path, data_dir: Path) -> None:
        """Start the JVM on the formatted storage and configuration in ``data_dir``."""
        common = [f"-Dkafka.logs.dir={data_dir / 'logs'}", "-Djava.awt.headless=true"]
        self._popen = procs.spawn(
            [
                java,
                *self.heap_options,
                *BROKER_JIT_OPTIONS,
                *common,
                f"-Dlog4j.configuration=file:{data_dir / 'log4j.properties'}",
                *self.extra_jvm_options,
                "-cp",
                f"{libs}/*",
                "kafka.Kafka",
                str(data_dir / "server.properties"),
            ],
            log_path=data_dir / "kafka.out",
            cwd=data_dir,
            detached=self.detached,
        )
        self.pid = self._popen.pid
        procs.write_owner(data_dir, owner_pid=None if self.detached else os.getpid(), service_pid=self.pid)

    # -- faults (the data directory stays: the broker comes back on its own log) ------------------

    def kill(self) -> None:
        """SIGKILL the broker (kill -9: no controlled shutdown, nothing flushed); keep its data."""
        if self.pid is not None:
            procs.terminate(
                self.pid,
                popen=self._popen,
                cmdline_contains=str(self.data_dir),
                grace=10.0,
                first_signal=signal.SIGKILL,
            )
        self.pid = None
        self._popen = None

    def shutdown(self) -> None:
        """Controlled shutdown (SIGTERM: leadership moves away first); keep its data."""
        if self.pid is not None:
            procs.terminate(self.pid, popen=self._popen, cmdline_contains=str(self.data_dir), grace=self.stop_grace)
        self.pid = None
        self._popen = None

    def restart(self, *, wait: bool = True) -> None:
        """Start a broker stopped by :meth:`kill` or :meth:`shutdown` again, on the same ports and
        data; with ``wait``, return once it answers metadata requests."""
        if self.pid is not None:
            raise DevStackError(f"broker {self.node_id} is still running (pid {self.pid})")
        if self.data_dir is None:
            raise DevStackError("this broker was never started (or was stopped for good): nothing to restart")
        self._spawn(find_java(), ensure_kafka_jars(self.version), self.data_dir)
        if wait:
            self.wait_until_ready()

    def wait_until_ready(self) -> None:
        """Block until a Kafka client gets metadata listing the broker.

        Raises :class:`DevStackError` (after stopping the broker) if the JVM exits or
        ``startup_timeout`` passes first; the message carries the end of the broker's log.
        """
        if self.pid is None:
            raise DevStackError("Kafka was not launched: call launch() or start()")
        deadline = time.monotonic() + self.startup_timeout
        try:
            while True:
                if not self.is_alive():
                    raise DevStackError(self._failure("the Kafka JVM exited during startup"))
                patience = min(5.0, max(1.0, deadline - time.monotonic()))
                if kafka_answers(self.bootstrap_servers, timeout=patience, client_options=self._probe_options()):
                    return
                if time.monotonic() >= deadline:
                    raise DevStackError(
                        self._failure(f"Kafka did not answer metadata requests within {self.startup_timeout:.0f} s")
                    )
                time.sleep(0.25)  # poll interval between probes, not a guess at readiness
        except BaseException:
            self.stop()
            raise

    def _failure(self, headline: str) -> str:
        exit_code = self._popen.poll() if self._popen else None
        parts = [f"{headline} (bootstrap {self.bootstrap_servers}, exit code {exit_code})."]
        # JVM-level failures (bad options, out of memory) only show in the JVM's own output.
        for path in (self.stdout_path, self.log_path):
            if path is not None:
                parts.append(f"--- last lines of {path} ---\n{procs.tail_file(path, 30)}")
        if any("Address already in use" in part for part in parts):
            parts.append("Another program took one of the ports chosen for Kafka; starting again picks new ones.")
        return "\n".join(parts)

    def is_alive(self) -> bool:
        """True while the broker's JVM runs (works for detached brokers read from a state file)."""
        if self.pid is None:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        return procs.is_running(self.pid, cmdline_contains=str(self.data_dir))

    def is_answering(self, timeout: float = 5.0) -> bool:
        """True if the broker answers a metadata request now."""
        return self.port is not None and kafka_answers(
            self.bootstrap_servers, timeout=timeout, client_options=self._probe_options()
        )

    def _probe_options(self) -> dict[str, Any] | None:
        return self.security.client_options() if self.security is not None else None

    @property
    def tls_bootstrap_servers(self) -> str:
        """``127.0.0.1:<tls_port>``: a secured broker's SSL (TLS without SASL) listener."""
        if self.tls_port is None:
            raise DevStackError("this broker has no SSL listener (not started, or not secured)")
        return f"127.0.0.1:{self.tls_port}"

    def stop(self) -> None:
        """Shut the broker down and delete its directory. Safe to call at any time, repeatedly."""
        procs.unregister_for_exit(self)
        if self.pid is not None:
            procs.terminate(self.pid, popen=self._popen, cmdline_contains=str(self.data_dir), grace=self.stop_grace)
        self.pid = None
        self._popen = None
        if self.data_dir is not None:
            procs.remove_dir(self.data_dir)
            self.data_dir = None

    # -- detached mode --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """What ``berth dev up`` records so another process can find and stop this broker."""
        return {
            "version": self.version,
            "pid": self.pid,
            "port": self.port,
            "controller_port": self.controller_port,
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "bootstrap_servers": self.bootstrap_servers if self.port else None,
            "log": str(self.log_path) if self.log_path else None,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> KafkaProcess:
        """A handle on a broker another process started (it is not our child)."""
        kafka = cls(version=state.get("version", KAFKA_VERSION), detached=True)
        kafka.pid = state.get("pid")
        kafka.port = state.get("port")
        kafka.controller_port = state.get("controller_port")
        kafka.data_dir = Path(state["data_dir"]) if state.get("data_dir") else None
        return kafka

    def __enter__(self) -> KafkaProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaProcess(pid={self.pid}, port={self.port}, data_dir={self.data_dir})"


#: A cluster member's heap: three JVMs share a small machine (a lone broker gets 768 MB).
CLUSTER_HEAP_OPTIONS: tuple[str, ...] = ("-Xms128m", "-Xmx512m")


class KafkaCluster:
    """Three Kafka 3.9 brokers forming one KRaft quorum (each is broker and controller).

    Topics get replication factor 3 and ``min.insync.replicas=2`` by default (also the internal
    offsets and transaction-state topics), so the cluster keeps taking ``acks=all`` writes with
    any one broker down. Use as a context manager, or :meth:`start` / :meth:`stop`::

        with KafkaCluster() as cluster:
            os.environ["BERTH_KAFKA_BOOTSTRAP"] = cluster.bootstrap_servers
            cluster.kill(cluster.busiest_leader(["berth.scheduler.inputs.v1"]))

    Contract: :meth:`start` returns once every broker answers and the metadata lists all of them;
    on failure every broker is stopped. The fault helpers (:meth:`kill`, :meth:`restart`,
    :meth:`rolling_restart`) keep each broker's data directory, as a real restart would;
    :meth:`stop` removes everything. Never detached: the JVMs die with this process.
    """

    def __init__(
        self,
        *,
        size: int = 3,
        heap_options: Sequence[str] = CLUSTER_HEAP_OPTIONS,
        startup_timeout: float = 120.0,
        stop_grace: float = 30.0,
    ) -> None:
        if size < 1:
            raise DevStackError("a Kafka cluster needs at least one broker")
        self.size = size
        self.heap_options = tuple(heap_options)
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.brokers: dict[int, KafkaProcess] = {}

    @property
    def bootstrap_servers(self) -> str:
        """Every broker, comma-separated: clients find the cluster while any one of them is up."""
        if not self.brokers:
            raise DevStackError("the Kafka cluster is not started: call start() first")
        return ",".join(broker.bootstrap_servers for broker in self.brokers.values())

    def start(self) -> KafkaCluster:
        self.launch()
        self.wait_until_ready()
        return self

    def launch(self) -> None:
        """Format and spawn every broker without waiting (pair with :meth:`wait_until_ready`)."""
        if self.brokers:
            raise DevStackError("this Kafka cluster is already started")
        ports = procs.free_ports(2 * self.size)
        voters = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size))
        cluster_id = new_cluster_id()
        self.brokers = {
            i + 1: KafkaProcess(
                node_id=i + 1,
                cluster_id=cluster_id,
                port=ports[2 * i],
                controller_port=ports[2 * i + 1],
                quorum_voters=voters,
                cluster_size=self.size,
                heap_options=self.heap_options,
                startup_timeout=self.startup_timeout,
                stop_grace=self.stop_grace,
            )
            for i in range(self.size)
        }
        try:
            # All at once: a controller quorum forms only when a majority of the voters runs.
            for broker in self.brokers.values():
                broker.launch()
        except BaseException:
            self.stop()
            raise

    def wait_until_ready(self) -> None:
        """Block until every broker answers and the metadata lists all of them (else stop all)."""
        try:
            for broker in self.brokers.values():
                broker.wait_until_ready()
            self.wait_for_brokers(timeout=self.startup_timeout)
        except BaseException:
            self.stop()
            raise

    def is_alive(self) -> bool:
        return bool(self.brokers) and all(broker.is_alive() for broker in self.brokers.values())

    def to_state(self) -> dict[str, Any]:
        """What the cluster runs (for reports; a cluster is never detached)."""
        return {
            "bootstrap_servers": self.bootstrap_servers if self.brokers else None,
            "brokers": {node_id: broker.to_state() for node_id, broker in self.brokers.items()},
        }

    def stop(self) -> None:
        """Stop every broker and delete their directories (each stop is attempted). The data is
        thrown away, so the brokers are killed: a controlled shutdown of the last members waits
        for a quorum that is already gone."""
        errors: list[BaseException] = []
        for broker in self.brokers.values():
            try:
                broker.kill()
                broker.stop()
            except Exception as exc:
                errors.append(exc)
        self.brokers = {}
        if errors:
            raise errors[0]

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what the cluster looks like --------------------------------------------------------------

    def _live_bootstrap(self) -> str:
        live = [broker.bootstrap_servers for broker in self.brokers.values() if broker.is_alive()]
        if not live:
            raise DevStackError("no broker of the cluster is running")
        return ",".join(live)

    def metadata(self, topics: Sequence[str] | None = None, *, timeout: float = 10.0) -> dict[str, Any]:
        """``{"brokers": [node ids], "partitions": {(topic, partition): {"leader", "replicas", "isr"}}}``
        from a live broker's metadata (``topics`` None: every topic)."""
        return _run_sync(_cluster_metadata(self._live_bootstrap(), list(topics) if topics else None, timeout))

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """Node id of the broker leading ``topic``/``partition`` now (-1 while none does)."""
        return self.metadata([topic])["partitions"][(topic, partition)]["leader"]

    def busiest_leader(self, topics: Sequence[str]) -> int:
        """Node id of the broker leading the most records of ``topics`` (end offsets summed over
        the partitions it leads): the one whose loss hurts the running pipeline most."""
        return _run_sync(_busiest_leader(self._live_bootstrap(), list(topics)))

    def under_replicated(self, topics: Sequence[str] | None = None) -> list[tuple[str, int]]:
        """Partitions whose in-sync replicas are fewer than their replicas."""
        partitions = self.metadata(topics)["partitions"]
        return sorted(tp for tp, info in partitions.items() if len(info["isr"]) < len(info["replicas"]))

    def wait_for_brokers(self, *, timeout: float = 60.0) -> None:
        """Until the metadata lists every broker (a restarted one has registered again)."""
        self._wait(lambda: len(self.metadata()["brokers"]) == self.size, "every broker registered", timeout)

    def wait_in_sync(self, topics: Sequence[str] | None = None, *, timeout: float = 120.0) -> None:
        """Until no partition is under-replicated (a restarted broker has caught up)."""
        self._wait(lambda: not self.under_replicated(topics), "every partition's replicas in sync", timeout)

    def _wait(self, check: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                with _quiet_logger("aiokafka"):
                    if check():
                        return
            except Exception as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise DevStackError(
                    f"Kafka cluster: {what} not within {timeout:.0f} s (last error: {last!r}; "
                    f"under-replicated: {self._safe_under_replicated()})"
                )
            time.sleep(0.5)  # poll interval

    def _safe_under_replicated(self) -> object:
        try:
            return self.under_replicated()
        except Exception as exc:
            return repr(exc)

    # -- faults ------------------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """kill -9 broker ``node_id`` (its data stays for :meth:`restart`)."""
        self.brokers[node_id].kill()

    def restart(self, node_id: int, *, timeout: float = 120.0) -> None:
        """Start a killed or shut-down broker again; return once it is registered in the cluster."""
        self.brokers[node_id].restart()
        self.wait_for_brokers(timeout=timeout)

    def rolling_restart(self, *, in_sync_timeout: float = 120.0, on_restarted: Any = None) -> list[int]:
        """Restart each broker in turn, as an operator would: controlled shutdown, start, wait until
        every partition is in sync again before the next one. ``on_restarted(node_id)`` runs after
        each. Returns the order."""
        order = sorted(self.brokers)
        for node_id in order:
            self.wait_in_sync(timeout=in_sync_timeout)
            self.brokers[node_id].shutdown()
            self.restart(node_id)
            if on_restarted is not None:
                on_restarted(node_id)
        self.wait_in_sync(timeout=in_sync_timeout)
        return order


async def _cluster_metadata(bootstrap: str, topics: list[str] | None, timeout: float) -> dict[str, Any]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), client_id="berth-devstack-cluster"
    )
    try:
        await asyncio.wait_for(admin.start(), timeout)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout)
        described = await asyncio.wait_for(admin.describe_topics(topics), timeout)
    finally:
        await admin.close()
    partitions = {
        (entry["topic"], part["partition"]): {
            "leader": part["leader"],
            "replicas": list(part["replicas"]),
            "isr": list(part["isr"]),
        }
        for entry in described
        for part in entry["partitions"]
    }
    return {"brokers": sorted(broker["node_id"] for broker in cluster["brokers"]), "partitions": partitions}


async def _busiest_leader(bootstrap: str, topics: list[str]) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    metadata = await _cluster_metadata(bootstrap, topics, 10.0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, client_id="berth-devstack-cluster", enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, partition) for topic, partition in metadata["partitions"]]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    load: dict[int, int] = {}
    for (topic, partition), info in metadata["partitions"].items():
        load[info["leader"]] = load.get(info["leader"], 0) + ends.get(TopicPartition(topic, partition), 0)
    load.pop(-1, None)
    if not load:
        raise DevStackError(f"no partition of {topics} has a leader")
    return max(sorted(load), key=lambda node: load[node])
