"""Kafka TLS/SASL and Postgres TLS settings, and the one-line failures that name the setting to
fix (no broker or database: the errors are the ones aiokafka and libpq raise)."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path

import pytest
import structlog
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed
from pydantic import ValidationError

from berth import logs
from berth.cli import EXIT_NOPERM, EXIT_SETTINGS, EXIT_UNAVAILABLE, _database_tls_problem, describe_failure
from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings

CA = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture
def secured_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "BERTH_KAFKA_BOOTSTRAP": "127.0.0.1:1",
        "BERTH_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "BERTH_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "BERTH_KAFKA__SASL_USERNAME": "scheduler",
        "BERTH_KAFKA__SASL_PASSWORD": "hunter2-kafka",
        "BERTH_KAFKA__SSL_CAFILE": str(CA),
        "BERTH_DATABASE_URL": "postgresql+psycopg://berth:hunter2-pg@db:5432/berth",
        "BERTH_DATABASE__SSLMODE": "verify-full",
        "BERTH_DATABASE__SSLROOTCERT": str(CA),
    }.items():
        monkeypatch.setenv(key, value)


def test_tls_options_verify_the_broker_and_its_name_unless_told_not_to():
    kafka = KafkaSettings(security_protocol="SSL", ssl_cafile=CA)
    context = kafka.client_options()["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    relaxed = KafkaSettings(security_protocol="SSL", ssl_cafile=CA, ssl_check_hostname=False)
    context = relaxed.client_options()["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and not context.check_hostname


def test_tls_files_must_exist(tmp_path: Path):
    with pytest.raises(ValidationError, match="ssl_cafile"):
        KafkaSettings(security_protocol="SSL", ssl_cafile=tmp_path / "missing.pem")
    with pytest.raises(ValidationError, match="sslrootcert"):
        DatabaseSettings(sslmode="verify-full", sslrootcert=tmp_path / "missing.pem")


def test_secured_settings_from_the_environment_keep_the_passwords_out_of_reprs(secured_env: None):
    settings = BerthSettings()
    assert settings.kafka.client_options()["sasl_plain_password"] == "hunter2-kafka"
    assert settings.database.connect_args() == {"sslmode": "verify-full", "sslrootcert": str(CA)}
    shown = repr(settings) + settings.model_dump_json()
    assert "hunter2-kafka" not in shown and "hunter2-pg" not in shown


def test_a_missing_ca_file_is_a_settings_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("BERTH_KAFKA__SSL_CAFILE", str(tmp_path / "nope.pem"))
    with pytest.raises(ValidationError) as caught:
        BerthSettings()
    code, message = describe_failure(caught.value)
    assert code == EXIT_SETTINGS
    assert "BERTH_KAFKA__SSL_CAFILE" in message and "\n" not in message


def test_sasl_refusal_names_the_password_setting_not_the_password(secured_env: None):
    try:
        raise KafkaConnectionError("Unable to bootstrap") from SaslAuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        )
    except KafkaConnectionError as exc:
        code, message = describe_failure(exc)
    assert code == EXIT_NOPERM
    assert message.startswith("kafka: authentication failed (SASL SCRAM-SHA-512) for user scheduler")
    assert "BERTH_KAFKA__SASL_PASSWORD" in message and "hunter2" not in message and "\n" not in message


def _verification_error(code: int, text: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {text}")
    error.verify_code, error.verify_message = code, text
    return error


def test_an_untrusted_broker_certificate_names_the_ca_setting(secured_env: None):
    try:
        raise KafkaConnectionError("Unable to bootstrap") from _verification_error(20, "unable to get local issuer")
    except KafkaConnectionError as exc:
        code, message = describe_failure(exc)
    assert code == EXIT_UNAVAILABLE
    assert "BERTH_KAFKA__SSL_CAFILE" in message and str(CA) in message and "\n" not in message


def test_a_certificate_for_another_host_names_the_hostname_check(secured_env: None):
    try:
        raise KafkaConnectionError("Unable to bootstrap") from _verification_error(62, "Hostname mismatch")
    except KafkaConnectionError as exc:
        code, message = describe_failure(exc)
    assert code == EXIT_UNAVAILABLE and "BERTH_KAFKA__SSL_CHECK_HOSTNAME" in message


@pytest.mark.parametrize(
    ("libpq", "code", "setting"),
    [
        ('connection to server at "db" failed: SSL error: certificate verify failed', EXIT_UNAVAILABLE, "SSLROOTCERT"),
        (
            'server certificate for "other" does not match host name "db"',
            EXIT_UNAVAILABLE,
            "BERTH_DATABASE__SSLMODE=verify-ca",
        ),
        ('root certificate file "/root/.postgresql/root.crt" does not exist', EXIT_SETTINGS, "SSLROOTCERT"),
        (
            'FATAL:  no pg_hba.conf entry for host "10.0.0.1", user "berth", database "berth", no encryption',
            EXIT_NOPERM,
            "BERTH_DATABASE__SSLMODE=verify-full",
        ),
    ],
)
def test_postgres_tls_refusals_name_the_setting(secured_env: None, libpq: str, code: int, setting: str):
    found = _database_tls_problem(libpq, "postgresql+psycopg://berth:***@db:5432/berth")
    assert found is not None
    assert found[0] == code and setting in found[1] and "\n" not in found[1]


def test_a_wrong_database_password_is_not_taken_for_a_tls_problem(secured_env: None):
    text = 'connection to server at "db" failed: FATAL:  password authentication failed for user "berth"'
    assert _database_tls_problem(text, "postgresql+psycopg://berth:***@db:5432/berth") is None


def test_passwords_handed_to_clients_are_masked_in_every_log_record(capsys: pytest.CaptureFixture[str]):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        logs.configure_logging("debug", "json")
        kafka = KafkaSettings(
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="hunter2-kafka"
        )
        database = DatabaseSettings(url="postgresql://berth:hunter2%40pg@db:5432/berth")
        kafka.client_options(), database.sqlalchemy_url()
        # What aiokafka logs at debug level for SASL PLAIN: the request, password inside.
        logging.getLogger("aiokafka.conn").debug("Request 3: %s", "SaslAuthenticate(b'\\x00u\\x00hunter2-kafka')")
        try:
            raise RuntimeError("login as berth with hunter2@pg refused")
        except RuntimeError:
            logging.getLogger("psycopg").exception("connect failed")
        logs.get_logger("berth.x").info("ready", note="berth topics are named berth.*")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()
        logs._hidden.difference_update({"hunter2-kafka", "hunter2%40pg", "hunter2@pg"})
    text = json.dumps(lines)
    assert "hunter2" not in text and text.count("***") >= 2
    assert lines[-1]["note"] == "berth topics are named berth.*"  # short or common words are left alone
