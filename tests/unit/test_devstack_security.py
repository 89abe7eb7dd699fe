"""The secured dev stack's configuration: broker properties, SCRAM users, client settings (no
broker or database is started; the certificates are made with the openssl command line)."""

from __future__ import annotations

from pathlib import Path

import pytest
from berth_dev.devstack.kafka import KafkaSecurity, server_properties
from berth_dev.devstack.procs import DevStackError
from berth_dev.devstack.stack import DevStack
from berth_dev.devstack.tls import TlsFiles, make_tls_files

from berth.settings import BerthSettings


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_a_secured_broker_listens_for_sasl_ssl_and_ssl_only(tls: TlsFiles):
    security = KafkaSecurity(tls, {"berth": "pw-1"})
    props = _properties(
        server_properties(port=9001, controller_port=9002, log_dirs=Path("/x"), security=security, tls_port=9003)
    )
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9001,SSL://127.0.0.1:9003,CONTROLLER://127.0.0.1:9002"
    assert "PLAINTEXT://" not in props["advertised.listeners"]
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["ssl.keystore.location"] == str(tls.server_keystore)
    assert props["ssl.truststore.location"] == str(tls.ca_cert)
    assert "pw-1" not in "".join(props.values())  # users come from the storage, not the config
    with pytest.raises(DevStackError):
        server_properties(port=1, controller_port=2, log_dirs=Path("/x"), security=security)


def test_the_keystore_holds_the_key_then_the_certificate(tls: TlsFiles):
    text = tls.server_keystore.read_text()
    assert text.index("BEGIN PRIVATE KEY") < text.index("BEGIN CERTIFICATE")
    assert oct(tls.server_key.stat().st_mode & 0o777) == "0o600"


def test_scram_users_are_formatted_in_and_redacted_from_errors(tls: TlsFiles):
    security = KafkaSecurity(tls, {"berth": "pw-1", "ops": "pw-2"})
    assert security.scram_arguments() == [
        "--add-scram",
        'SCRAM-SHA-512=[name=berth,password="pw-1"]',
        "--add-scram",
        'SCRAM-SHA-512=[name=ops,password="pw-2"]',
    ]
    assert security.redact("format failed: pw-1, pw-2") == "format failed: ***, ***"


def test_client_settings_are_valid_berth_settings(tls: TlsFiles, monkeypatch: pytest.MonkeyPatch):
    security = KafkaSecurity(tls, {"berth": "pw-1"})
    for key, value in security.client_settings().items():
        monkeypatch.setenv(key, value)
    kafka = BerthSettings().kafka
    assert (kafka.security_protocol, kafka.sasl_mechanism, kafka.sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "berth",
    )
    assert kafka.ssl_cafile == tls.ca_cert and kafka.sasl_password.get_secret_value() == "pw-1"
    assert security.client_settings("SSL") == {
        "BERTH_KAFKA__SECURITY_PROTOCOL": "SSL",
        "BERTH_KAFKA__SSL_CAFILE": str(tls.ca_cert),
    }


def test_a_secured_dev_stack_runs_in_process_only(tmp_path: Path):
    with pytest.raises(DevStackError, match="in-process"):
        DevStack(secured_in=tmp_path, detached=True)
    with pytest.raises(DevStackError, match="in-process"):
        DevStack(secured_in=tmp_path, kafka_brokers=3)
