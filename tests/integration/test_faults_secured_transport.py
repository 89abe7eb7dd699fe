"""Secured transport: Berth over a SASL_SSL/TLS-only Kafka and a TLS-only Postgres, configured with
the README's settings; wrong credentials fail in one line naming the setting; no secret is logged
(issue 15, item 4; docs/reliability.md).

The stack, one per module (``DevStack(secured_in=...)``), with certificates made for it
(:mod:`berth_dev.devstack.tls`: a CA and a server certificate for 127.0.0.1; the test adds an
impostor CA): a Kafka broker whose client listeners are SASL_SSL (SCRAM-SHA-512, user ``berth``
with a random password) and SSL only, and a Postgres with ``ssl=on`` whose pg_hba admits TCP
clients only over TLS with a SCRAM password.

* Every refusal — wrong Kafka password, CA that did not sign the broker, wrong database
  password, CA that did not sign the server, TLS turned off — fails the real ``berth`` command
  (``topics create``, ``db current``) and a service's start (``decision run``, ``inventory run``,
  ``audit run``) with a non-zero exit and one line naming the setting, never a traceback.
* The simulated pipeline of :mod:`tests.faults_kit` (audit, inventory, token-lag, decision,
  binder, cluster-sim, every one a process with only the ``BERTH_*`` settings) and a bench run
  (``python -m bench.recovery --kafka-from-environment``, on topics of its own prefix) work over
  it; the invariants of the fault kit hold, and every connection Postgres sees uses TLS.
* No password and no line of a private key appears in any log of any service, of the broker or
  of Postgres, or in any command's output.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from berth.services.audit import db
from berth_dev.devstack.kafka import KafkaProcess, find_java
from berth_dev.devstack.postgres import PostgresProcess, find_pg_bin
from berth_dev.devstack.procs import DevStackError
from berth_dev.devstack.stack import DevStack
from berth_dev.devstack.tls import TlsFiles, make_certificate_authority
from berth_dev.supervisor import Supervisor

from berth.bus import ensure_topics
from berth.cli import EXIT_NOPERM, EXIT_UNAVAILABLE
from berth.settings import BerthSettings
from tests.conftest import fail_or_skip
from tests.faults_kit import drain_and_check, start_sim_pipeline, summary

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]

MAX_PODS = 40
STREAM_S = 10.0
BERTH = str(Path(sys.executable).with_name("berth"))
REPO = Path(__file__).resolve().parents[2]


@dataclass
class SecuredStack:
    """The broker and the database of this module, the settings that reach them, and every
    string that must never be logged."""

    kafka: KafkaProcess
    postgres: PostgresProcess
    tls: TlsFiles
    impostor_ca: Path
    env: dict[str, str]
    secrets: list[str]
    outputs: list[str] = field(default_factory=list)
    """What every command run here printed (stdout and stderr), for the final check."""

    def run(self, *argv: str, timeout: float = 120.0, **overrides: str) -> subprocess.CompletedProcess[str]:
        """``argv`` (``berth ...`` or ``python -m ...``) with this stack's settings, ``overrides``
        on top; the output is kept for :meth:`leaks`."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("BERTH_")}
        env |= {**self.env, **overrides}
        result = subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO
        )
        self.outputs.append(result.stdout + result.stderr)
        return result

    def leaks(self, texts: dict[str, str]) -> dict[str, list[str]]:
        """For each text (by name) that holds a secret, the lines holding one."""
        found: dict[str, list[str]] = {}
        for name, text in texts.items():
            lines = [line[:200] for line in text.splitlines() if any(secret in line for secret in self.secrets)]
            if lines:
                found[name] = lines
        return found


def _key_lines(*pems: Path) -> list[str]:
    """The base64 lines of PEM private keys: any one of them in a log is key material leaked."""
    return [line for pem in pems for line in pem.read_text().splitlines() if line and not line.startswith("-----")]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredStack]:
    try:
        find_java(), find_pg_bin()
    except DevStackError as exc:
        fail_or_skip(str(exc))
    if shutil.which("openssl") is None:
        fail_or_skip("the openssl command line is needed to make the test's certificates")
    certs = tmp_path_factory.mktemp("certs")
    impostor_ca, _ = make_certificate_authority(certs / "impostor", name="Impostor CA")
    with DevStack(secured_in=certs) as stack:
        assert stack.security is not None and isinstance(stack.kafka, KafkaProcess)
        tls = stack.security.tls
        yield SecuredStack(
            stack.kafka,
            stack.postgres,
            tls,
            impostor_ca,
            stack.env(),
            [*stack.security.users.values(), stack.postgres.password, *_key_lines(tls.server_key, tls.ca_key)],
        )


def _assert_one_line_failure(result: subprocess.CompletedProcess[str], code: int, *names: str) -> str:
    """The command failed with ``code`` and its last stderr line is the error, naming ``names``,
    with no traceback anywhere; returns that line."""
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr[-2000:]
    for name in names:
        assert name in last, last
    return last


@dataclass(frozen=True)
class Refusal:
    """A command run with one setting wrong: the exit status it must end with and what its one
    line must say."""

    argv: tuple[str, ...]
    wrong: dict[str, str]
    code: int
    says: tuple[str, ...]


def test_refusals_fail_in_one_line_naming_the_setting(secured: SecuredStack, tmp_path: Path):
    wrong_password = {"BERTH_KAFKA__SASL_PASSWORD": "not-the-password"}
    wrong_ca = {"BERTH_KAFKA__SSL_CAFILE": str(secured.impostor_ca)}
    wrong_database_password = {"BERTH_DATABASE_URL": secured.postgres.url.replace(secured.postgres.password, "nope")}
    wrong_database_ca = {"BERTH_DATABASE__SSLROOTCERT": str(secured.impostor_ca)}
    sasl_refused = ("authentication failed (SASL SCRAM-SHA-512) for user berth", "BERTH_KAFKA__SASL_PASSWORD")
    refusals = [
        # The CLI.
        Refusal(("topics", "create"), wrong_password, EXIT_NOPERM, sasl_refused),
        Refusal(("topics", "create"), wrong_ca, EXIT_UNAVAILABLE, ("not trusted", "BERTH_KAFKA__SSL_CAFILE")),
        Refusal(
            ("db", "current"),
            wrong_database_password,
            EXIT_NOPERM,
            ("password authentication failed", "BERTH_DATABASE_URL"),
        ),
        Refusal(("db", "current"), wrong_database_ca, EXIT_UNAVAILABLE, ("not trusted", "BERTH_DATABASE__SSLROOTCERT")),
        Refusal(
            ("db", "current"),
            {"BERTH_DATABASE__SSLMODE": "disable"},
            EXIT_NOPERM,
            ("accepts only TLS", "BERTH_DATABASE__SSLMODE"),
        ),
        # Services at start: a plain aiokafka one, a faust one, the audit's database.
        Refusal(("decision", "run"), wrong_password, EXIT_NOPERM, sasl_refused),
        Refusal(
            ("inventory", "run", "--data-dir", str(tmp_path / "inventory")),
            wrong_ca,
            EXIT_UNAVAILABLE,
            ("not trusted", "BERTH_KAFKA__SSL_CAFILE"),
        ),
        Refusal(("audit", "run"), wrong_database_ca, EXIT_UNAVAILABLE, ("not trusted", "BERTH_DATABASE__SSLROOTCERT")),
    ]
    # Each command is a process of its own that mostly waits for Python's imports: run them side by side.
    with ThreadPoolExecutor(max_workers=4) as pool:
        ran = list(pool.map(lambda refusal: secured.run(BERTH, *refusal.argv, **refusal.wrong), refusals))
        # The right settings work, on both Kafka listeners and on Postgres.
        topics = pool.submit(secured.run, BERTH, "topics", "create")
        tls_only = pool.submit(
            secured.run,
            BERTH,
            "topics",
            "create",
            BERTH_KAFKA_BOOTSTRAP=secured.kafka.tls_bootstrap_servers,
            BERTH_KAFKA__SECURITY_PROTOCOL="SSL",
        )
        upgrade = secured.run(BERTH, "db", "upgrade")
        current = secured.run(BERTH, "db", "current")
    for refusal, result in zip(refusals, ran, strict=True):
        line = _assert_one_line_failure(result, refusal.code, *refusal.says)
        assert "not-the-password" not in line and ":nope@" not in line, line
    assert topics.result().returncode == 0, topics.result().stderr
    assert tls_only.result().returncode == 0, tls_only.result().stderr
    assert upgrade.returncode == 0 and "berth:***@" in upgrade.stdout + upgrade.stderr, upgrade.stderr
    assert current.returncode == 0 and current.stdout.strip(), current.stderr
    assert secured.leaks({f"command {n}": text for n, text in enumerate(secured.outputs)}) == {}


def _tls_sessions(settings: BerthSettings) -> tuple[int, bool]:
    """(connections of role berth, whether every one of them uses TLS) as Postgres sees them."""
    engine = db.make_engine(settings.database)
    try:
        with engine.connect() as connection:
            row = connection.execute(
                sa.text(
                    "SELECT count(*), bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                    "WHERE a.usename = 'berth'"
                )
            ).one()
    finally:
        engine.dispose()
    return int(row[0]), bool(row[1])


def test_the_pipeline_and_a_bench_run_over_tls_and_no_secret_in_any_log(
    secured: SecuredStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for key, value in {**secured.env, "BERTH_LOG_LEVEL": "info", "BERTH_LOG_FORMAT": "json"}.items():
        monkeypatch.setenv(key, value)
    settings = BerthSettings()
    assert settings.kafka.security_protocol == "SASL_SSL" and settings.database.sslmode == "verify-full"
    db.upgrade(settings.database)
    asyncio.run(ensure_topics(settings.kafka))

    with Supervisor(tmp_path / "logs", {}) as services:
        pipeline = start_sim_pipeline(services, settings, tmp_path, max_pods=MAX_PODS, stream_s=STREAM_S)
        pipeline.wait_all_decided(timeout_s=150)
        sessions, all_tls = _tls_sessions(settings)
        verdict = drain_and_check(pipeline, min_bound=MAX_PODS // 2)
    assert sessions >= 2 and all_tls, (sessions, all_tls)  # the audit's and ours, at least

    # The bench's topics and groups get a prefix: the pipeline's inputs are on the unprefixed ones.
    bench = secured.run(
        sys.executable, "-m", "bench.recovery", "--events", "1000", "--every", "400", "--kafka-from-environment",
        timeout=300, BERTH_KAFKA__TOPIC_PREFIX="bench.", BERTH_KAFKA__GROUP_PREFIX="bench.",
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert '"same_state": true' in bench.stdout.strip().splitlines()[-1], bench.stdout[-2000:]

    logs = {str(path): path.read_text(errors="replace") for path in sorted((tmp_path / "logs").glob("*.log"))}
    assert {Path(name).stem for name in logs} >= {
        "audit",
        "inventory",
        "token-lag",
        "decision",
        "binder",
        "cluster-sim",
    }
    for path in (secured.kafka.log_path, secured.kafka.stdout_path, secured.postgres.log_path):
        assert path is not None and path.exists(), path
        logs[str(path)] = path.read_text(errors="replace")
    logs |= {f"command {n}": text for n, text in enumerate(secured.outputs)}
    assert secured.leaks(logs) == {}
    assert all(secured.leaks({"control": f"a line with {secret} in it"}) for secret in secured.secrets)
    print("\n" + summary(verdict, log_files=len(logs), tls_sessions=sessions))
