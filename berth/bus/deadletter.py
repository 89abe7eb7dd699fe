"""The one way a Berth consumer refuses a record: it becomes a :class:`DeadLetter` with the reason.

Both the aiokafka consumers and the faust agents call :func:`decode_or_dead_letter`, so every
consumer rejects bad input the same way and nothing after a bad record is lost.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime, timezone

from berth.schemas import DeadLetter, Topic
from berth.schemas.envelope import DecodedEvent, EnvelopeError, decode


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


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
    """Wrap a refused record, whole, with why it was refused and where it came from."""
    return DeadLetter(
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        consumer=consumer,
        reason=reason[:4000],
        key_b64=_b64(key),
        value_b64=_b64(value) or "",
        headers_b64={name: _b64(data) or "" for name, data in headers},
        failed_at=failed_at or datetime.now(timezone.utc),
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
) -> DecodedEvent | DeadLetter:
    """Decode a record of ``topic``; a record that is not a valid event comes back as a DeadLetter."""
    try:
        return decode(topic, key, value, headers)
    except EnvelopeError as exc:
        return dead_letter_for(
            topic=topic.name, partition=partition, offset=offset, key=key, value=value,
            headers=headers, consumer=consumer, reason=str(exc),
        )


def original_value(letter: DeadLetter) -> bytes:
    """The refused record's value bytes, for inspection or re-publishing after a fix."""
    return base64.b64decode(letter.value_b64)
