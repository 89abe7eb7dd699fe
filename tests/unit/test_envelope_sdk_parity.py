"""The envelope's own reading and writing of CloudEvents headers agree with the CloudEvents SDK's.

``encode`` writes the headers ``to_binary`` would write, and ``decode`` reads headers of that form
itself, leaving anything else to ``from_binary``: here the SDK is the reference. Whatever the
envelope's reading accepts, the SDK accepts with the same attributes (hypothesis mutates valid
headers: values, names, encodings, times, keys).
"""

from __future__ import annotations

from typing import Any

import pytest
from berth.schemas import samples
from berth.schemas._base import event_time
from berth.schemas.compat import dataschema_uri
from berth.schemas.envelope import (
    _FORMAT,
    EnvelopeError,
    _attributes_by_sdk,
    _plain_attributes,
    decode,
    encode,
)
from berth.schemas.topics import ALL_TOPICS
from cloudevents.core.bindings.kafka import to_binary
from cloudevents.core.v1.event import CloudEvent
from hypothesis import given, settings
from hypothesis import strategies as st

EVENTS = samples.one_of_each()


def _by_sdk(event: Any, event_id: str) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    attributes: dict[str, Any] = {
        "id": event_id,
        "source": "berth/test",
        "type": event.type,
        "specversion": "1.0",
        "datacontenttype": "application/json",
        "partitionkey": event.partition_key,
        "dataschema": dataschema_uri(event),
    }
    if getattr(event, "subject", None):
        attributes["subject"] = event.subject
    if event_time(event) is not None:
        attributes["time"] = event_time(event)
    attributes.update(getattr(event, "cloudevent_extensions", {}))
    message = to_binary(CloudEvent(attributes=attributes, data=event.model_dump_json().encode()), _FORMAT)
    key = message.key.encode() if isinstance(message.key, str) else (message.key or b"")
    return key, message.value, sorted(message.headers.items())


@pytest.mark.parametrize("event", EVENTS, ids=[type(e).__name__ for e in EVENTS])
def test_encode_writes_what_the_sdk_writes(event: Any) -> None:
    record = encode(event, source="berth/test", event_id="id-1")
    assert (record.key, record.value, record.headers) == _by_sdk(event, "id-1")


def _topic_of(event: Any) -> Any:
    return next(t for t in ALL_TOPICS if event.type in t.event_types)


@pytest.mark.parametrize("event", EVENTS, ids=[type(e).__name__ for e in EVENTS])
def test_decode_reads_its_own_records_without_the_sdk_and_as_the_sdk(event: Any) -> None:
    record = encode(event, source="berth/test", event_id="id-2")
    headers = dict(record.headers)
    plain = _plain_attributes(headers, record.key)
    assert plain is not None  # the fast path is the path for Berth's own records
    by_sdk = _attributes_by_sdk(headers, record.key, record.value)
    assert {k: plain.get(k) for k in by_sdk} == {k: (str(v) if v is not None else None) for k, v in by_sdk.items()}
    decoded = decode(_topic_of(event), record.key, record.value, record.headers)
    assert decoded.event == event and decoded.id == "id-2" and decoded.partition_key == event.partition_key


_VALUES = st.one_of(
    st.sampled_from([b"", b"1.0", b"0.3", b"2026-01-05T09:00:00Z", b"2026-01-05T09:00:00", b"not a time", b"\xff\xfe"]),
    st.binary(max_size=12),
    st.text(max_size=12).map(str.encode),
)
_NAMES = st.sampled_from(
    ["ce_id", "ce_source", "ce_type", "ce_specversion", "ce_subject", "ce_time", "ce_dataschema", "ce_partitionkey"]
    + ["ce_outcome", "content-type", "CE_ID", "ce_Data", "ce_x-y", "ce_extra", "traceparent", "Content-Type"]
)


@settings(max_examples=400, deadline=None)
@given(
    event=st.sampled_from(EVENTS),
    changes=st.dictionaries(_NAMES, st.one_of(st.none(), _VALUES), max_size=4),
    key=st.one_of(st.none(), st.just(b"k"), st.binary(max_size=4)),
)
def test_whatever_the_plain_reading_accepts_the_sdk_accepts_alike(event: Any, changes: dict, key: bytes | None) -> None:
    record = encode(event, source="berth/test", event_id="id-3")
    headers = dict(record.headers)
    for name, value in changes.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    plain = _plain_attributes(headers, key)
    if plain is None:
        return  # the SDK reads it (and may refuse it): decode's behaviour as before
    try:
        by_sdk = _attributes_by_sdk(headers, key, record.value)
    except EnvelopeError as exc:
        raise AssertionError(f"accepted without the SDK but refused by it: {headers!r} {key!r}") from exc
    assert {k: plain.get(k) for k in by_sdk} == {k: (str(v) if v is not None else None) for k, v in by_sdk.items()}


def test_headers_the_sdk_would_read_differently_go_to_the_sdk() -> None:
    record = encode(EVENTS[0], source="berth/test", event_id="id-4")
    headers = dict(record.headers)
    assert _plain_attributes({**headers, "CE_ID": b"other"}, record.key) is None
    assert _plain_attributes({**headers, "ce_custom": b"x"}, record.key) is None
    assert _plain_attributes({**headers, "ce_time": b"2026-01-05T09:00:00"}, record.key) is None  # no zone
    assert _plain_attributes({**headers, "ce_specversion": b"0.3"}, record.key) is None
    assert _plain_attributes({**headers, "traceparent": b"00-abc"}, record.key) is not None  # not CloudEvents'
    with pytest.raises(EnvelopeError, match="invalid CloudEvent attributes"):  # the SDK's refusal
        decode(_topic_of(EVENTS[0]), record.key, record.value, [*record.headers, ("ce_time", b"2026-01-05T09:00")])


def test_what_only_the_sdk_reads_is_still_read() -> None:
    headers = {"ce_id": b"1", "ce_source": b"s", "ce_type": b"t", "ce_specversion": b"0.3"}  # CloudEvents 0.3
    assert _plain_attributes(headers, None) is None
    assert _attributes_by_sdk(headers, None, b"{}")["type"] == "t"
