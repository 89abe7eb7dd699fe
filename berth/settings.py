"""Configuration from the environment and one YAML file (``BERTH_CONFIG``).

Precedence, highest first: explicit arguments, environment (``BERTH_KAFKA_*``,
``BERTH_DATABASE_*``, ``BERTH_*``), the YAML file, defaults. Secrets are ``SecretStr`` so that
they print as ``**********`` in logs, reprs and ``berth config show``.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import BaseModel, Field, FilePath, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from berth.kube.capacity import SpotLabel, parse_spot_labels, with_spot_labels
from berth.logs import hide_secret
from berth.schemas.topics import DECISION_INPUTS, KafkaNames, Topic, check_kafka_prefix


class KafkaSettings(BaseModel):
    """How to reach Kafka. SASL and TLS are optional and validated together."""

    bootstrap: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: FilePath | None = None
    """PEM file of the CA(s) that signed the brokers' certificates (None: the system's CAs)."""
    ssl_certfile: FilePath | None = None
    """Client certificate (PEM), for brokers that require one (``ssl.client.auth=required``)."""
    ssl_keyfile: FilePath | None = None
    ssl_check_hostname: bool = True
    """Whether a broker's certificate must name the host Berth connected to. Turn it off only
    for brokers reached by an address their certificate does not carry."""
    client_id: str = "berth"
    replication_factor: int = Field(default=1, ge=1)
    """Replication of topics Berth creates: 3 in production (with ``min.insync.replicas=2``).
    Capped at the number of brokers the cluster has, so 3 also works against a single dev broker
    (see :mod:`berth.bus.topics_admin`). faust's own assignor topic takes it as given."""
    topic_prefix: str = ""
    """Starts the name of every topic this installation uses (``BERTH_KAFKA__TOPIC_PREFIX``, e.g.
    ``team-a.``; empty: the contract names). Installations sharing a Kafka cluster need distinct
    prefixes. See :class:`berth.schemas.topics.KafkaNames`."""
    group_prefix: str = ""
    """Starts every consumer group, transactional id and faust app id of this installation
    (``BERTH_KAFKA__GROUP_PREFIX``)."""
    cells: int = Field(default=DECISION_INPUTS.partitions, ge=1, le=256)
    """Decision cells: the partitions ``berth.scheduler.inputs.v1`` is created with
    (``BERTH_KAFKA__CELLS``). Up to this many decision processes share the work, one cell each at
    most. Every service reads the count from the brokers, so it is chosen once, before the topics
    are first created: adding partitions later would move nodes and pods between cells."""

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL_"):
            if not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
                raise ValueError(
                    f"security_protocol {self.security_protocol} needs BERTH_KAFKA__SASL_MECHANISM, "
                    "BERTH_KAFKA__SASL_USERNAME and BERTH_KAFKA__SASL_PASSWORD"
                )
        return self

    @field_validator("topic_prefix", "group_prefix")
    @classmethod
    def _kafka_name_prefix(cls, value: str, info: ValidationInfo) -> str:
        return check_kafka_prefix(value, what=f"BERTH_KAFKA__{str(info.field_name).upper()}")

    @property
    def names(self) -> KafkaNames:
        """This installation's topic, group and transactional-id names on the brokers."""
        return KafkaNames(self.topic_prefix, self.group_prefix)

    def partitions(self, topic: Topic) -> int:
        """The partitions this installation creates ``topic`` with: the registry's count, except
        for the cells' input log, which has :attr:`cells`."""
        return self.cells if topic.name == DECISION_INPUTS.name else topic.partitions

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer, consumer and admin clients."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
            context.check_hostname = self.ssl_check_hostname
            if self.ssl_certfile:
                context.load_cert_chain(str(self.ssl_certfile), str(self.ssl_keyfile) if self.ssl_keyfile else None)
            options["ssl_context"] = context
        if self.security_protocol.startswith("SASL_"):
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password.get_secret_value() if self.sasl_password else None
            hide_secret(options["sasl_plain_password"])
        return options


class DatabaseSettings(BaseModel):
    """How to reach Postgres. The URL may hold a password, so it is a secret as a whole."""

    url: SecretStr = SecretStr("postgresql+psycopg://berth:berth@127.0.0.1:5432/berth")
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = None
    sslrootcert: FilePath | None = None
    """PEM file of the CA(s) that signed the server's certificate (``sslmode`` verify-ca or verify-full)."""
    sslcert: FilePath | None = None
    sslkey: FilePath | None = None
    pool_size: int = Field(default=5, ge=1)

    def sqlalchemy_url(self) -> str:
        url = self.url.get_secret_value()
        password = _url_password(url)
        hide_secret(password)
        hide_secret(unquote(password) if password else None)
        if url.startswith("postgresql://"):
            # The plain scheme means psycopg2 to SQLAlchemy; Berth ships psycopg 3.
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        return url

    def connect_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for name in ("sslmode", "sslrootcert", "sslcert", "sslkey"):
            value = getattr(self, name)
            if value is not None:
                args[name] = str(value)
        return args

    def redacted_url(self) -> str:
        """The URL with any password replaced, for logs and status output."""
        return redact_url(self.url.get_secret_value())


def _url_password(url: str) -> str | None:
    """The password part of ``scheme://user:password@host...`` (as written), if any."""
    _, sep, rest = url.partition("://")
    credentials, at, _ = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return None
    return credentials.split(":", 1)[1]


def redact_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


class BerthSettings(BaseSettings):
    """Everything a Berth process reads at start-up.

    Nested values come from ``BERTH_KAFKA__BOOTSTRAP`` style variables; the two most used ones
    also have short forms: ``BERTH_KAFKA_BOOTSTRAP`` and ``BERTH_DATABASE_URL``.
    """

    model_config = SettingsConfigDict(
        env_prefix="BERTH_",
        env_nested_delimiter="__",
        extra="ignore",
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    health_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve /livez and /readyz on this port, on the service's own event loop (``BERTH_HEALTH_PORT``;
    None: not served; 0: a free port, logged at start). See :mod:`berth.health`."""
    scheduler_config: Path | None = None
    """KubeSchedulerConfiguration-style profiles for the decision core; None = built-in default."""
    snapshot_every: int = Field(default=50_000, ge=0)
    """The decision service snapshots a cell every this many of its inputs (0: never), so that a
    cell taken over restores the snapshot and folds only the inputs after it instead of its whole
    log (``BERTH_SNAPSHOT_EVERY``; see ``services/decision/snapshots.py``)."""
    spot_labels: str = ""
    """Node labels that mark spot capacity beyond the providers' own (see
    :mod:`berth.kube.capacity`): ``KEY=VALUE[|VALUE],...``, e.g. ``example.com/lifecycle=spot``.
    Ingest and the decision service must be given the same."""

    @field_validator("spot_labels")
    @classmethod
    def _spot_labels_parse(cls, value: str) -> str:
        parse_spot_labels(value)
        return value

    @property
    def spot_label_table(self) -> tuple[SpotLabel, ...]:
        """The providers' spot labels and the configured ones."""
        return with_spot_labels(parse_spot_labels(self.spot_labels))

    @model_validator(mode="before")
    @classmethod
    def _short_env_forms(cls, data: Any) -> Any:
        if isinstance(data, dict):
            bootstrap = os.environ.get("BERTH_KAFKA_BOOTSTRAP")
            if bootstrap:
                kafka = dict(data.get("kafka") or {})
                kafka.setdefault("bootstrap", bootstrap)
                data["kafka"] = kafka
            url = os.environ.get("BERTH_DATABASE_URL")
            if url:
                database = dict(data.get("database") or {})
                database.setdefault("url", url)
                data["database"] = database
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("BERTH_CONFIG")
        if config_file:
            if not Path(config_file).is_file():
                raise FileNotFoundError(
                    f"BERTH_CONFIG={config_file}: no such file; unset it or point it at a YAML file"
                )
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        sources.append(file_secret_settings)
        return tuple(sources)


def load_settings(*, kafka: str | None = None, database_url: str | None = None) -> BerthSettings:
    """Settings from the environment and ``BERTH_CONFIG``, with command-line overrides on top."""
    settings = BerthSettings()
    overrides: dict[str, Any] = {}
    if kafka:
        overrides["kafka"] = settings.kafka.model_copy(update={"bootstrap": kafka})
    if database_url:
        overrides["database"] = settings.database.model_copy(update={"url": SecretStr(database_url)})
    return settings.model_copy(update=overrides) if overrides else settings
