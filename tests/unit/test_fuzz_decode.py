"""Bad input, fuzzed at the decoder: every topic's records, mangled by hypothesis.

Whatever arrives, :func:`berth.schemas.envelope.decode` either returns an event that satisfies its
model (finite numbers, integers in int64, re-validates from its own JSON, has its partition key) or
raises :class:`EnvelopeError` — never anything else; and
:func:`berth.bus.deadletter.decode_or_dead_letter` turns every refusal into a dead letter that can
itself be published (fits a Kafka record) and read back from the dead-letter topic.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from berth.schemas import ALL_TOPICS, DeadLetter, Topic
from berth.schemas.envelope import DecodedEvent, EnvelopeError, decode, encode
from berth.schemas.samples import one_of_each
from berth.schemas.topics import DEAD_LETTER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.bus.deadletter import MAX_RECORD_BYTES, decode_or_dead_letter, original_value

pytestmark = pytest.mark.faults

INT64 = (-(2**63), 2**63 - 1)
SAMPLES = {event.type: event for event in one_of_each()}
TOPIC_IDS = [topic.name for topic in ALL_TOPICS]
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _samples_of(topic: Topic) -> list[Any]:
    return [SAMPLES[name] for name in sorted(topic.event_types) if name in SAMPLES]


def test_every_topic_has_samples_to_mutate():
    assert all(_samples_of(topic) for topic in ALL_TOPICS)


# --- strategies ---------------------------------------------------------------------------------

HUGE_INTS = st.integers(min_value=19, max_value=400).flatmap(
    lambda digits: st.sampled_from([10**digits, -(10**digits), 2**63, -(2**63) - 1])
)
ADVERSARIAL = st.one_of(
    st.none(),
    st.booleans(),
    HUGE_INTS,
    st.integers(min_value=-(10**6), max_value=-1),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0]),
    st.text(max_size=40),
    st.sampled_from(["x" * 300_000, "\u0000", "\ud800", "../../etc/passwd", "1e400"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.sampled_from(["io.berth.unknown.v1", "io.berth.cluster.pod-observed.v2", "Unknown", ""]),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _mutate(tree: Any, path: tuple[Any, ...], action: str, payload: Any) -> Any:
    if not path:
        return payload if action == "replace" else tree
    parent = tree
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "replace":
        parent[last] = payload
    elif action == "delete":
        del parent[last]
    elif action == "unknown-field" and isinstance(parent[last], dict):
        parent[last]["unexpected_field"] = payload
    return tree


@st.composite
def mangled_bodies(draw: st.DrawFn, topic: Topic) -> tuple[Any, bytes, list[tuple[str, bytes]], bytes]:
    event = draw(st.sampled_from(_samples_of(topic)))
    record = encode(event, source="fuzz")
    tree = json.loads(record.value)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(tree)))
        action = draw(st.sampled_from(["replace", "replace", "delete", "unknown-field"]))
        tree = _mutate(tree, path, action, draw(ADVERSARIAL))
    body = json.dumps(tree, allow_nan=True, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    return event, record.key, record.headers, body


@st.composite
def mangled_headers(draw: st.DrawFn, topic: Topic) -> tuple[bytes | None, list[tuple[str, Any]], bytes]:
    event = draw(st.sampled_from(_samples_of(topic)))
    record = encode(event, source="fuzz")
    headers: list[tuple[str, Any]] = list(record.headers)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        action = draw(st.sampled_from(["drop", "garble", "none", "add", "dataschema"]))
        index = draw(st.integers(min_value=0, max_value=len(headers) - 1)) if headers else 0
        if action == "drop" and headers:
            headers.pop(index)
        elif action == "garble" and headers:
            headers[index] = (headers[index][0], draw(st.binary(max_size=30) | st.just(b"\xff\xfe")))
        elif action == "none" and headers:
            headers[index] = (headers[index][0], None)
        elif action == "add":
            headers.append(
                (
                    draw(st.sampled_from(["ce_type", "ce_time", "ce_specversion", "CE_ID", "x"])),
                    draw(st.binary(max_size=30)),
                )
            )
        elif action == "dataschema":
            headers = [h for h in headers if h[0] != "ce_dataschema"]
            headers.append(
                (
                    "ce_dataschema",
                    draw(
                        st.sampled_from(
                            [
                                b"",
                                b"not a uri",
                                b"https://berth.io/schemas/io.berth.other.v1.json?version=1.0",
                                f"https://berth.io/schemas/{event.type}.json?version=2.0".encode(),
                                f"https://berth.io/schemas/{event.type}.json?version=1.99999".encode(),
                                f"https://berth.io/schemas/{event.type}.json?version=1.x".encode(),
                                f"https://berth.io/schemas/{event.type}.json".encode(),
                            ]
                        )
                    ),
                )
            )
    key = draw(st.sampled_from([record.key, None, b"\xff\xfe", b""]))
    return key, headers, record.value


# --- invariants ---------------------------------------------------------------------------------


def _numbers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [n for item in value.values() for n in _numbers(item)]
    if isinstance(value, (list, tuple)):
        return [n for item in value for n in _numbers(item)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def assert_sound(topic: Topic, decoded: DecodedEvent) -> None:
    """An accepted event is one the model's constraints allow, that every consumer can use."""
    event = decoded.event
    model = topic.event_types[decoded.type]
    assert type(event) is model
    for number in _numbers(event.model_dump(mode="python")):
        if isinstance(number, float):
            assert math.isfinite(number), event
        else:
            assert INT64[0] <= number <= INT64[1], event
    assert model.model_validate_json(event.model_dump_json()) == event
    assert isinstance(event.partition_key, str)
    getattr(event, "subject", None)
    encode(event, source="fuzz")


def decode_soundly(topic: Topic, key: bytes | None, value: bytes | None, headers: Any) -> DecodedEvent | None:
    try:
        decoded = decode(topic, key, value, headers)
    except EnvelopeError as exc:
        assert str(exc)
        return None
    assert_sound(topic, decoded)
    return decoded


def assert_dead_letter_publishable(topic: Topic, key: bytes | None, value: bytes | None, headers: Any) -> None:
    outcome = decode_or_dead_letter(
        topic, partition=0, offset=7, key=key, value=value, headers=headers, consumer="fuzz"
    )
    if isinstance(outcome, DecodedEvent):
        assert_sound(topic, outcome)
        return
    assert isinstance(outcome, DeadLetter) and outcome.reason and outcome.source_topic == topic.name
    record = encode(outcome, source="berth/fuzz")
    assert len(record.value) + sum(len(n) + len(v) for n, v in record.headers) <= MAX_RECORD_BYTES
    back = decode(DEAD_LETTER, record.key, record.value, record.headers).event
    assert back == outcome
    assert value is None or value.startswith(original_value(back))


# --- the properties, for every topic ------------------------------------------------------------


@pytest.mark.parametrize("topic", ALL_TOPICS, ids=TOPIC_IDS)
@FUZZ
@given(data=st.data())
def test_mangled_bodies_are_refused_or_sound(topic: Topic, data: st.DataObject):
    _, key, headers, body = data.draw(mangled_bodies(topic))
    decode_soundly(topic, key, body, headers)
    assert_dead_letter_publishable(topic, key, body, headers)


@pytest.mark.parametrize("topic", ALL_TOPICS, ids=TOPIC_IDS)
@FUZZ
@given(data=st.data())
def test_mangled_headers_are_refused_or_sound(topic: Topic, data: st.DataObject):
    key, headers, body = data.draw(mangled_headers(topic))
    decode_soundly(topic, key, body, headers)
    assert_dead_letter_publishable(topic, key, body, headers)


@pytest.mark.parametrize("topic", ALL_TOPICS, ids=TOPIC_IDS)
@settings(max_examples=60, deadline=None)
@given(
    value=st.one_of(
        st.none(),
        st.binary(max_size=200),
        st.just(b"{"),
        st.just(b"[]" * 1000),
        st.just(b"[" * 5000 + b"]" * 5000),
        st.just(b'{"a":' * 3000 + b"1" + b"}" * 3000),
        st.text(max_size=100).map(str.encode),
    ),
    headers=st.lists(
        st.tuples(st.sampled_from(["ce_id", "ce_source", "ce_type", "ce_specversion", "junk"]), st.binary(max_size=20)),
        max_size=6,
    ),
)
def test_arbitrary_bytes_and_headers_are_refused(topic: Topic, value: bytes | None, headers: list[tuple[str, bytes]]):
    assert decode_soundly(topic, b"k", value, headers) is None or value
    assert_dead_letter_publishable(topic, b"k", value, headers)


@pytest.mark.parametrize("topic", ALL_TOPICS, ids=TOPIC_IDS)
def test_a_body_of_every_json_shape_is_refused(topic: Topic):
    record = encode(_samples_of(topic)[0], source="fuzz")
    for body in (b"null", b"true", b"1", b'"text"', b"[]", b"{}", b"NaN", b"[1,2,3]", b'{"type": null}'):
        with pytest.raises(EnvelopeError):
            decode(topic, record.key, body, record.headers)


def test_a_huge_bad_record_still_fits_the_dead_letter_topic():
    event = SAMPLES["io.berth.cluster.pod-observed.v1"]
    topic = next(t for t in ALL_TOPICS if event.type in t.event_types)
    record = encode(event, source="fuzz")
    body = json.loads(record.value)
    body["pod"]["uid"] = ["x" * 999_000]
    value = json.dumps(body).encode()
    assert_dead_letter_publishable(topic, record.key, value, record.headers)
    letter = decode_or_dead_letter(
        topic, partition=0, offset=1, key=record.key, value=value, headers=record.headers, consumer="fuzz"
    )
    assert isinstance(letter, DeadLetter) and "truncated" in letter.reason


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tokens_in_queue", -1),
        ("tokens_in_queue", 10**30),
        ("tokens_in_queue", 2**63),
        ("token_rate", "NaN"),
        ("token_rate", "Infinity"),
        ("token_rate", "-Infinity"),
        ("token_rate", "1e400"),
        ("observed_ttft_ms", "NaN"),
        ("active_sessions", 10**19),
    ],
)
def test_impossible_numbers_are_refused(field: str, value: Any):
    event = SAMPLES["io.berth.inference.queue-lag.v1"]
    record = encode(event, source="fuzz")
    text = record.value.decode()
    body = json.loads(text)
    body[field] = "@@"
    mangled = json.dumps(body).replace('"@@"', str(value)).encode()
    topic = next(t for t in ALL_TOPICS if event.type in t.event_types)
    with pytest.raises(EnvelopeError, match=field):
        decode(topic, record.key, mangled, record.headers)


def test_negative_gpus_are_refused():
    event = SAMPLES["io.berth.cluster.pod-observed.v1"]
    record = encode(event, source="fuzz")
    body = json.loads(record.value)
    body["pod"]["requests"]["nvidia.com/gpu"] = -2
    topic = next(t for t in ALL_TOPICS if event.type in t.event_types)
    with pytest.raises(EnvelopeError, match="nvidia.com/gpu"):
        decode(topic, record.key, json.dumps(body).encode(), record.headers)
