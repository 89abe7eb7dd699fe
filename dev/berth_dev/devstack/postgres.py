"""A throwaway PostgreSQL 15 server from the installed binaries (no cluster, no systemd, no Docker).

``initdb`` and the postmaster refuse to run as root, so when we are root both run as the
``postgres`` system account: the child switches user between fork and exec (see
:func:`berth_dev.devstack.procs.spawn`), which keeps the postmaster *our* child so that the
parent-death signal applies to it. ``pg_ctl start`` or ``runuser`` would put another process in
between and break that.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from berth_dev.devstack import procs
from berth_dev.devstack.procs import DevStackError, RunAs
from berth_dev.devstack.tls import TlsFiles

DEFAULT_PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_BIN_HINT = (
    "Install the PostgreSQL 15 server (apt-get install postgresql-15) or point BERTH_PG_BIN at a "
    "directory holding initdb, postgres and pg_ctl."
)

#: Durability off: a dev/test database is thrown away anyway, and these make it several times
#: faster on slow disks. Never copy these to a real deployment.
DEV_SERVER_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}

console = Console(stderr=True)
log = logging.getLogger(__name__)


def find_pg_bin() -> Path:
    """Directory of the Postgres server binaries: ``$BERTH_PG_BIN`` or /usr/lib/postgresql/15/bin."""
    override = os.environ.get("BERTH_PG_BIN")
    pg_bin = Path(override) if override else DEFAULT_PG_BIN
    missing = [name for name in ("initdb", "postgres", "pg_ctl") if not (pg_bin / name).is_file()]
    if missing:
        source = "BERTH_PG_BIN" if override else "the default location"
        raise DevStackError(f"PostgreSQL binaries {', '.join(missing)} not found in {pg_bin} ({source}). {PG_BIN_HINT}")
    return pg_bin


def server_account() -> RunAs | None:
    """The account Postgres runs under: ``postgres`` when we are root, else ourselves (None).

    Creates the ``postgres`` system account if it is missing, since a root-only machine (a CI
    container) may have the binaries without it.
    """
    if os.geteuid() != 0:
        return None
    try:
        return RunAs.lookup("postgres")
    except KeyError:
        pass
    console.print("[yellow]Creating the 'postgres' system user: PostgreSQL refuses to run as root.[/yellow]")
    procs.run_checked(
        ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"],
        what="create the 'postgres' system user",
        hint="Create it yourself (useradd --system postgres) or run as a non-root user.",
    )
    return RunAs.lookup("postgres")


#: Client authentication of a server with TLS: over TCP only TLS connections, and those prove the
#: password with SCRAM; the Unix socket (in the server's own directory) stays open to the
#: server's administrator, for creating the role and database.
TLS_PG_HBA = """\
local all all trust
hostssl all all 127.0.0.1/32 scram-sha-256
"""


def sqlalchemy_url(*, user: str, password: str, host: str, port: int, database: str) -> str:
    return f"postgresql+psycopg://{user}:{password}@{host}:{port}/{database}"


class PostgresProcess:
    """One PostgreSQL 15 server on a free port of 127.0.0.1 with a database and role ``berth``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`::

        with PostgresProcess() as pg:
            engine = sqlalchemy.create_engine(pg.url)

    Contract:

    * :meth:`start` returns once a psycopg connection as ``berth`` to database ``berth`` works,
      or raises :class:`DevStackError` (with the server log's tail) and leaves nothing behind.
    * Authentication is ``trust`` for local and 127.0.0.1 connections; the password in
      :attr:`url` is there so the URL looks like a real one, it is not checked.
    * With ``tls``: ``ssl=on`` with the server certificate of ``tls``, and TCP connections must use
      TLS and the role's password (SCRAM-SHA-256; see :data:`TLS_PG_HBA`); clients connect with
      :meth:`client_settings` (``sslmode=verify-full`` against ``tls.ca_cert``).
    * The server has fsync off: data survives a clean stop but not a machine crash. Test use only.
    * ``detached`` and :meth:`stop` behave as for :class:`~berth_dev.devstack.kafka.KafkaProcess`;
      stopping uses ``pg_ctl stop -m fast``.
    """

    def __init__(
        self,
        *,
        database: str = "berth",
        user: str = "berth",
        password: str = "berth",
        server_settings: Mapping[str, str] = DEV_SERVER_SETTINGS,
        startup_timeout: float = 60.0,
        stop_grace: float = 20.0,
        detached: bool = False,
        tls: TlsFiles | None = None,
    ) -> None:
        self.database = database
        self.user = user
        self.password = password
        self.server_settings = dict(server_settings)
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.detached = detached
        self.tls = tls
        self.port: int | None = None
        self.base_dir: Path | None = None
        self.pid: int | None = None
        self.pg_bin: Path | None = None
        self._run_as: RunAs | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    # -- endpoints ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """SQLAlchemy URL: ``postgresql+psycopg://berth:berth@127.0.0.1:<port>/berth``."""
        if self.port is None:
            raise DevStackError("Postgres is not started: call start() first")
        return sqlalchemy_url(
            user=self.user, password=self.password, host="127.0.0.1", port=self.port, database=self.database
        )

    @property
    def conninfo(self) -> str:
        """libpq connection string for ``psycopg.connect`` (no SQLAlchemy driver prefix)."""
        if self.port is None:
            raise DevStackError("Postgres is not started: call start() first")
        conninfo = f"host=127.0.0.1 port={self.port} dbname={self.database} user={self.user} password={self.password}"
        if self.tls is not None:
            conninfo += f" sslmode=verify-full sslrootcert={self.tls.ca_cert}"
        return conninfo

    def client_settings(self) -> dict[str, str]:
        """``BERTH_DATABASE__*`` TLS variables a Berth process needs beside :attr:`url` (none
        without ``tls``)."""
        if self.tls is None:
            return {}
        return {"BERTH_DATABASE__SSLMODE": "verify-full", "BERTH_DATABASE__SSLROOTCERT": str(self.tls.ca_cert)}

    @property
    def data_dir(self) -> Path | None:
        return self.base_dir / "data" if self.base_dir else None

    @property
    def log_path(self) -> Path | None:
        return self.base_dir / "postgres.log" if self.base_dir else None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> PostgresProcess:
        """Create a cluster, start it and wait until it accepts connections; see the class contract."""
        self.launch()
        self.wait_until_ready()
        return self

    def launch(self) -> None:
        """Run initdb and spawn the postmaster without waiting for it (pair with wait_until_ready)."""
        if self.pid is not None:
            raise DevStackError(f"this PostgresProcess is already running (pid {self.pid})")
        self.pg_bin = find_pg_bin()
        self._run_as = server_account()
        procs.sweep_stale_dirs()
        self.base_dir = procs.make_temp_dir("postgres")
        try:
            self._launch()
        except BaseException:
            self.stop()
            raise
        if not self.detached:
            procs.register_for_exit(self)

    def _launch(self) -> None:
        assert self.base_dir is not None and self.pg_bin is not None
        if self._run_as is not None:
            # mkdtemp made the directory 0700 for root; the server account must own it. Its
            # parent (/tmp or $TMPDIR) must be traversable by that account too.
            self._run_as.chown(self.base_dir)
        procs.run_checked(
            [
                str(self.pg_bin / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
                "--no-instructions",
            ],
            what="initialise a Postgres cluster",
            hint=(
                f"The '{self._run_as.name}' account must be able to reach {self.base_dir}; set TMPDIR "
                "to a directory it can traverse."
                if self._run_as
                else PG_BIN_HINT
            ),
            run_as=self._run_as,
            cwd=self.base_dir,
        )
        if self.tls is not None:
            self._install_tls(self.tls)
        (self.port,) = procs.free_ports(1)
        self._spawn()

    def _install_tls(self, tls: TlsFiles) -> None:
        """Copy the server certificate and key into the data directory (Postgres wants its key
        owned by the server account, mode 0600), turn TLS on and allow only TLS over TCP."""
        assert self.data_dir is not None
        for source, name in ((tls.server_cert, "server.crt"), (tls.server_key, "server.key")):
            target = self.data_dir / name
            target.write_bytes(source.read_bytes())
            target.chmod(0o600)
            if self._run_as is not None:
                self._run_as.chown(target)
        (self.data_dir / "pg_hba.conf").write_text(TLS_PG_HBA)
        self.server_settings |= {
            "ssl": "on",
            "ssl_cert_file": "server.crt",
            "ssl_key_file": "server.key",
            "password_encryption": "scram-sha-256",
        }

    def _spawn(self) -> None:
        """Start the postmaster on the initialised cluster, on :attr:`port`."""
        assert self.base_dir is not None and self.pg_bin is not None
        settings = [arg for key, value in self.server_settings.items() for arg in ("-c", f"{key}={value}")]
        self._popen = procs.spawn(
            [
                str(self.pg_bin / "postgres"),
                "-D",
                str(self.data_dir),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.base_dir),
                *settings,
            ],
            log_path=self.base_dir / "postgres.log",
            cwd=self.base_dir,
            detached=self.detached,
            run_as=self._run_as,
        )
        self.pid = self._popen.pid
        procs.write_owner(self.base_dir, owner_pid=None if self.detached else os.getpid(), service_pid=self.pid)

    def wait_until_ready(self) -> None:
        """Block until the server accepts connections, then create the role and database.

        Raises :class:`DevStackError` (after stopping the server) if the postmaster exits or
        ``startup_timeout`` passes first.
        """
        import psycopg

        if self.pid is None or self.port is None:
            raise DevStackError("Postgres was not launched: call launch() or start()")
        deadline = time.monotonic() + self.startup_timeout
        try:
            while True:
                if not self.is_alive():
                    raise DevStackError(self._failure("the postmaster exited during startup"))
                try:
                    with psycopg.connect(
                        # A server with TLS trusts only its Unix socket without a password.
                        host=str(self.base_dir) if self.tls is not None else "127.0.0.1",
                        port=self.port,
                        user="postgres",
                        dbname="postgres",
                        connect_timeout=2,
                        autocommit=True,
                    ) as admin:
                        self._create_role_and_database(admin)
                    return
                except psycopg.OperationalError as exc:
                    last_error = exc
                if time.monotonic() >= deadline:
                    raise DevStackError(
                        self._failure(
                            f"Postgres did not accept connections within {self.startup_timeout:.0f} s ({last_error})"
                        )
                    )
                time.sleep(0.1)  # poll interval between connection attempts
        except BaseException:
            self.stop()
            raise

    def _create_role_and_database(self, admin: Any) -> None:
        from psycopg import sql

        role_exists = admin.execute("select 1 from pg_roles where rolname = %s", (self.user,)).fetchone()
        if not role_exists:
            # CREATEDB so tests may make scratch databases of their own.
            admin.execute(
                sql.SQL("create role {} login createdb password {}").format(
                    sql.Identifier(self.user), sql.Literal(self.password)
                )
            )
        db_exists = admin.execute("select 1 from pg_database where datname = %s", (self.database,)).fetchone()
        if not db_exists:
            admin.execute(
                sql.SQL("create database {} owner {}").format(sql.Identifier(self.database), sql.Identifier(self.user))
            )

    def _failure(self, headline: str) -> str:
        exit_code = self._popen.poll() if self._popen else None
        log = procs.tail_file(self.log_path, 30) if self.log_path else "(no log)"
        return f"{headline} (port {self.port}, exit code {exit_code}).\n--- last lines of {self.log_path} ---\n{log}"

    def is_alive(self) -> bool:
        """True while the postmaster runs (works for detached servers read from a state file)."""
        if self.pid is None:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        return procs.is_running(self.pid, cmdline_contains=str(self.data_dir))

    def is_answering(self, timeout: float = 3.0) -> bool:
        """True if a connection as the ``berth`` role succeeds now."""
        import psycopg

        if self.port is None:
            return False
        try:
            with psycopg.connect(self.conninfo, connect_timeout=max(1, int(timeout))) as conn:
                conn.execute("select 1")
            return True
        except psycopg.Error:
            return False

    def stop(self) -> None:
        """Fast shutdown (``pg_ctl stop -m fast``), SIGKILL as a fallback, then delete the cluster.

        Safe to call at any time, repeatedly.
        """
        procs.unregister_for_exit(self)
        if self.pid is not None and self.is_alive():
            self._pg_ctl_stop()
            # Reap our child, or SIGKILL it if pg_ctl could not stop it.
            procs.terminate(
                self.pid, popen=self._popen, cmdline_contains=str(self.data_dir), grace=2.0, first_signal=signal.SIGINT
            )  # SIGINT = fast shutdown
        self.pid = None
        self._popen = None
        if self.base_dir is not None:
            procs.remove_dir(self.base_dir)
            self.base_dir = None

    # -- faults (the cluster, its data and its port stay) ------------------------------------------

    def stop_server(self) -> None:
        """Stop the server as an outage would (fast shutdown: clients' connections are cut) but keep
        its data and port; :meth:`start_server` brings the same database back."""
        if self.pid is not None and self.is_alive():
            self._pg_ctl_stop()
            procs.terminate(
                self.pid, popen=self._popen, cmdline_contains=str(self.data_dir), grace=2.0, first_signal=signal.SIGINT
            )
        self.pid = None
        self._popen = None

    def start_server(self) -> None:
        """Start a server stopped by :meth:`stop_server` again, on the same port; return once it
        accepts connections."""
        if self.pid is not None:
            raise DevStackError(f"Postgres is still running (pid {self.pid})")
        if self.base_dir is None or self.port is None:
            raise DevStackError("this Postgres was never started (or was stopped for good): nothing to start")
        self._run_as = self._run_as or server_account()
        self.pg_bin = self.pg_bin or find_pg_bin()
        self._spawn()
        self.wait_until_ready()

    def _pg_ctl_stop(self) -> None:
        pg_bin = self.pg_bin or find_pg_bin()
        run_as = self._run_as or server_account()
        try:
            procs.run_checked(
                [
                    str(pg_bin / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.data_dir),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    str(int(self.stop_grace)),
                ],
                what="stop Postgres",
                hint="",
                run_as=run_as,
                timeout=self.stop_grace + 5,
            )
        except DevStackError as exc:
            log.warning("%s; falling back to signals", exc)

    # -- detached mode --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """What ``berth dev up`` records so another process can find and stop this server."""
        return {
            "pid": self.pid,
            "port": self.port,
            "base_dir": str(self.base_dir) if self.base_dir else None,
            "pg_bin": str(self.pg_bin) if self.pg_bin else None,
            "database": self.database,
            "user": self.user,
            "password": self.password,
            "url": self.url if self.port else None,
            "log": str(self.log_path) if self.log_path else None,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PostgresProcess:
        """A handle on a server another process started (it is not our child)."""
        pg = cls(
            database=state.get("database", "berth"),
            user=state.get("user", "berth"),
            password=state.get("password", "berth"),
            detached=True,
        )
        pg.pid = state.get("pid")
        pg.port = state.get("port")
        pg.base_dir = Path(state["base_dir"]) if state.get("base_dir") else None
        pg.pg_bin = Path(state["pg_bin"]) if state.get("pg_bin") else None
        return pg

    def __enter__(self) -> PostgresProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PostgresProcess(pid={self.pid}, port={self.port}, base_dir={self.base_dir})"
