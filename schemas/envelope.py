"""CloudEvents binary mode on Kafka: attributes in ``ce_*`` headers, the JSON event as the value.

The ``partitionkey`` extension is the Kafka key. The JSON body carries the event's ``type`` too,
so a body read from Postgres or a dead-letter record is self-describing; the decoder checks that
header and body agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cloudevents.core.bindings.kafka import KafkaMessage, from_binary, to_binary
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from pydantic import ValidationError

from ._base import event_time
from .topics import Topic

CONTENT_TYPE = "application/json"


class _RawJsonFormat(JSONFormat):
    """Leaves the body as bytes so pydantic parses (and validates) it exactly once."""

    def read_data(self, body: bytes, datacontenttype: str | None) -> bytes:  # type: ignore[override]
        return body


_FORMAT = _RawJsonFormat()


class EnvelopeError(ValueError):
    """A Kafka record that is not a valid Berth event; the message says what is wrong."""


@dataclass(frozen=True)
class EncodedRecord:
    """What goes to Kafka: key, value and headers (as aiokafka wants them)."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def encode(event: Any, *, source: str, event_id: str | None = None) -> EncodedRecord:
    """Wrap an event in a CloudEvent (binary mode) ready for ``producer.send``.

    ``event_id`` defaults to a random UUID; pass a deterministic one (e.g. a command id) when a
    re-sent event must be recognisable as the same event.
    """
    attributes: dict[str, Any] = {
        "id": event_id or str(uuid.uuid4()),
        "source": source,
        "type": event.type,
        "specversion": "1.0",
        "datacontenttype": CONTENT_TYPE,
        "partitionkey": event.partition_key,
    }
    subject = getattr(event, "subject", None)
    if subject:
        attributes["subject"] = subject
    time = event_time(event)
    if time is not None:
        attributes["time"] = time
    cloud_event = CloudEvent(attributes=attributes, data=event.model_dump_json().encode())
    message = to_binary(cloud_event, _FORMAT)
    key = message.key.encode() if isinstance(message.key, str) else (message.key or b"")
    return EncodedRecord(key=key, value=message.value, headers=sorted(message.headers.items()))


@dataclass(frozen=True)
class DecodedEvent:
    event: Any
    id: str
    source: str
    type: str
    subject: str | None
    partition_key: str | None


def decode(
    topic: Topic,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]] | Iterable[tuple[str, bytes]],
) -> DecodedEvent:
    """Turn a Kafka record into a validated event of ``topic``, or raise :class:`EnvelopeError`."""
    header_map = {name: data for name, data in headers}
    missing = [h for h in ("ce_id", "ce_source", "ce_type", "ce_specversion") if h not in header_map]
    if missing:
        raise EnvelopeError(
            f"not a CloudEvent in Kafka binary mode: missing header(s) {', '.join(missing)}"
        )
    try:
        cloud_event = from_binary(KafkaMessage(headers=header_map, key=key, value=value or b""), _FORMAT)
    except Exception as exc:  # the SDK raises several types for bad attributes
        raise EnvelopeError(f"invalid CloudEvent attributes: {exc}") from exc
    event_type = cloud_event.get_type()
    model = topic.event_types.get(event_type)
    if model is None:
        known = ", ".join(sorted(topic.event_types))
        raise EnvelopeError(f"event type {event_type!r} does not belong on {topic.name} (expected {known})")
    if not value:
        raise EnvelopeError(f"{event_type}: empty body")
    try:
        event = model.model_validate_json(value)
    except ValidationError as exc:
        raise EnvelopeError(f"{event_type}: {_describe(exc)}") from exc
    return DecodedEvent(
        event=event,
        id=cloud_event.get_id(),
        source=cloud_event.get_source(),
        type=event_type,
        subject=cloud_event.get_subject(),
        partition_key=cloud_event.get_extension("partitionkey"),
    )


def _describe(exc: ValidationError) -> str:
    """One line per problem, naming the field path: what a producer needs to fix it."""
    parts = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(part) for part in error["loc"]) or "(body)"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)
