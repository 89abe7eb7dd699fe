"""The one way a Berth consumer refuses a record: it becomes a :class:`DeadLetter` with the reason.

Both the aiokafka consumers and the faust agents call :func:`decode_or_dead_letter`, so every
consumer rejects bad input the same way and nothing after a bad record is lost.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import UTC, datetime

from berth.schemas import DeadLetter, Topic
from berth.schemas.envelope import DecodedEvent, EnvelopeError, decode

MAX_RECORD_BYTES = 1_000_000
"""What a dead-letter record (value and headers) may weigh: Kafka refuses records over
``max.message.bytes`` (1 MiB by default), and base64 makes a refused record a third heavier, so a
record that just fitted its own topic would not fit the dead-letter topic, and the consumer's
attempt to dead-letter it would fail instead."""

_MAX_VALUE_BYTES = 600_000  # 800 kB in base64
_MAX_KEY_BYTES = 16_384
_MAX_HEADER_BYTES = 4_096  # each header value
_MAX_HEADERS = 32


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _cut(data: bytes | None, limit: int, what: str, notes: list[str]) -> bytes | None:
    if data is None or len(data) <= limit:
        return data
    notes.append(f"{what} truncated to its first {limit} of {len(data)} bytes")
    return data[:limit]


def dead_letter_for(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    consumer: str,
    reason: str,
    failed_at: datetime | None = None,
) -> DeadLetter:
    """Wrap a refused record with why it was refused and where it came from: whole, unless it is
    too big for the dead-letter topic (see :data:`MAX_RECORD_BYTES`); then its key, value and
    headers are cut and the reason says so (the source offset still points at the whole record)."""
    notes: list[str] = []
    key = _cut(key, _MAX_KEY_BYTES, "key", notes)
    value = _cut(value, _MAX_VALUE_BYTES, "value", notes)
    carried: dict[str, str] = {}
    for name, data in headers:
        if len(carried) == _MAX_HEADERS:
            notes.append(f"headers after the first {_MAX_HEADERS} dropped")
            break
        name = str(name)[:256]
        carried[name] = (
            _b64(_cut(data if isinstance(data, bytes) else None, _MAX_HEADER_BYTES, f"header {name[:40]!r}", notes))
            or ""
        )
    note = f" [{'; '.join(notes)}]" if notes else ""
    return DeadLetter(
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        consumer=consumer,
        reason=reason[: 4000 - len(note)] + note,
        key_b64=_b64(key),
        value_b64=_b64(value) or "",
        headers_b64=carried,
        failed_at=failed_at or datetime.now(UTC),
    )


def decode_or_dead_letter(
    topic: Topic,
    *,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    consumer: str,
    topic_name: str | None = None,
) -> DecodedEvent | DeadLetter:
    """Decode a record of ``topic`` (read from ``topic_name`` on the brokers, by default the
    contract name); a record that is not a valid event comes back as a DeadLetter naming
    ``topic_name``."""
    try:
        return decode(topic, key, value, headers)
    except EnvelopeError as exc:
        return dead_letter_for(
            topic=topic_name or topic.name,
            partition=partition,
            offset=offset,
            key=key,
            value=value,
            headers=headers,
            consumer=consumer,
            reason=str(exc),
        )


def original_value(letter: DeadLetter) -> bytes:
    """The refused record's value bytes, for inspection or re-publishing after a fix."""
    return base64.b64decode(letter.value_b64)
