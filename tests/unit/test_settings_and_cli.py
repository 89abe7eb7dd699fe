"""Settings, secret redaction and the CLI's input validation (no broker needed)."""

from __future__ import annotations

import pytest
import structlog
from pydantic import ValidationError
from typer.testing import CliRunner

from berth.cli import app, parse_duration
from berth.logs import _redact
from berth.settings import BerthSettings, KafkaSettings, redact_url

runner = CliRunner()


def test_short_environment_forms_and_nested_ones(monkeypatch):
    monkeypatch.setenv("BERTH_KAFKA_BOOTSTRAP", "broker:9093")
    monkeypatch.setenv("BERTH_DATABASE_URL", "postgresql://u:s3cret@db:5432/berth")
    monkeypatch.setenv("BERTH_KAFKA__CLIENT_ID", "decision-0")
    settings = BerthSettings()
    assert settings.kafka.bootstrap == "broker:9093"
    assert settings.kafka.client_id == "decision-0"
    assert settings.database.sqlalchemy_url() == "postgresql+psycopg://u:s3cret@db:5432/berth"
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.model_dump_json()
    assert settings.database.redacted_url() == "postgresql://u:***@db:5432/berth"


def test_yaml_file_is_read_and_environment_wins(monkeypatch, tmp_path):
    config = tmp_path / "berth.yaml"
    config.write_text("log_level: debug\nkafka:\n  bootstrap: from-yaml:9092\n  client_id: yaml\n")
    monkeypatch.setenv("BERTH_CONFIG", str(config))
    monkeypatch.setenv("BERTH_KAFKA__CLIENT_ID", "env")
    settings = BerthSettings()
    assert settings.log_level == "debug"
    assert settings.kafka.bootstrap == "from-yaml:9092"
    assert settings.kafka.client_id == "env"


def test_sasl_needs_credentials_and_never_shows_the_password():
    with pytest.raises(ValidationError, match="SASL_USERNAME"):
        KafkaSettings(security_protocol="SASL_PLAINTEXT")
    kafka = KafkaSettings(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="berth",
        sasl_password="hunter2",
    )
    assert "hunter2" not in repr(kafka)
    assert kafka.client_options()["sasl_plain_password"] == "hunter2"


def test_log_redaction_masks_secret_fields_and_url_passwords():
    out = _redact(None, "info", {"password": "p", "url": "postgresql://u:pw@h/db", "n": 1})
    assert out == {"password": "***", "url": "postgresql://u:***@h/db", "n": 1}
    assert redact_url("kafka://plain:9092") == "kafka://plain:9092"
    structlog.reset_defaults()


def test_durations():
    assert parse_duration("120s") == 120 and parse_duration("2m") == 120 and parse_duration("90") == 90
    with pytest.raises(Exception, match="not a duration"):
        parse_duration("soon")


def test_publish_refuses_bad_values_before_touching_kafka():
    result = runner.invoke(
        app,
        ["publish", "queue-lag", "--pool", "llama-70b", "--tokens", "-5", "--rate", "4000", "--kafka", "127.0.0.1:1"],
    )
    assert result.exit_code == 2
    assert "tokens_in_queue" in result.output and "greater than or equal to 0" in result.output
    result = runner.invoke(app, ["publish", "spot-notice", "--node", "gpu-17", "--in", "soon"])
    assert result.exit_code == 2 and "not a duration" in result.output


def test_help_lists_every_command_group():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for group in ("dev", "publish", "db", "schemas", "topics", "tail"):
        assert group in result.output


def test_topics_list_names_every_topic():
    result = runner.invoke(app, ["topics", "list"])
    assert result.exit_code == 0 and "berth.scheduler.commands.v1" in result.output


def test_cells_setting_sizes_only_the_cells_input_log(monkeypatch):
    from berth.schemas.topics import ALL_TOPICS, DECISION_INPUTS

    default = KafkaSettings()
    assert default.cells == DECISION_INPUTS.partitions
    monkeypatch.setenv("BERTH_KAFKA__CELLS", "4")
    kafka = BerthSettings().kafka
    assert kafka.partitions(DECISION_INPUTS) == 4
    assert all(kafka.partitions(t) == t.partitions for t in ALL_TOPICS if t is not DECISION_INPUTS)
    listed = CliRunner().invoke(app, ["topics", "list"], terminal_width=300)
    assert listed.exit_code == 0
    row = next(line for line in listed.output.splitlines() if DECISION_INPUTS.name in line)
    assert [cell.strip() for cell in row.split("│")][3] == "4"  # topic, key, partitions
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        KafkaSettings(cells=0)
