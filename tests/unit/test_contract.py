"""The event contract: CloudEvents round trips, validation errors, committed JSON Schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from berth.schemas import ALL_TOPICS, PodInfo, topic_for_event
from berth.schemas.compat import check, compare, version_of
from berth.schemas.envelope import EnvelopeError, decode, encode
from berth.schemas.export import SCHEMA_DIR, committed_schemas, event_schemas, render
from berth.schemas.quantity import QuantityError, format_canonical, resource_list, to_canonical
from berth.schemas.samples import T0, one_of_each

EXAMPLES = Path(SCHEMA_DIR).parent / "examples"


@pytest.mark.parametrize("event", one_of_each(), ids=lambda e: e.type)
def test_every_event_type_round_trips_through_cloudevents_binary_mode(event):
    record = encode(event, source="tests", event_id="id-1")
    headers = dict(record.headers)
    assert headers["ce_specversion"] == b"1.0"
    assert headers["ce_type"] == event.type.encode()
    assert headers["ce_id"] == b"id-1"
    assert headers["ce_source"] == b"tests"
    assert headers["ce_partitionkey"] == event.partition_key.encode()
    assert headers["content-type"] == b"application/json"
    version = version_of(type(event))  # the model's MAJOR.MINOR (schema_minor raised by additions)
    assert headers["ce_dataschema"] == f"https://berth.io/schemas/{event.type}.json?version={version}".encode()
    assert record.key == event.partition_key.encode()
    decoded = decode(topic_for_event(event), record.key, record.value, record.headers)
    assert decoded.event == event
    assert decoded.type == event.type
    assert decoded.partition_key == event.partition_key


def test_every_topic_follows_the_naming_rule_and_carries_events():
    for topic in ALL_TOPICS:
        domain, _, rest = topic.name.partition(".")
        assert domain == "berth" and rest.rsplit(".", 1)[1].startswith("v"), topic.name
        assert topic.event_types and topic.partitions >= 1


def _sample(type_name: str):
    return next(e for e in one_of_each() if e.type == type_name)


def test_decode_names_the_invalid_field():
    event = _sample("io.berth.inference.queue-lag.v1")
    record = encode(event, source="tests")
    body = json.loads(record.value)
    body["tokens_in_queue"] = -1
    with pytest.raises(EnvelopeError, match=r"tokens_in_queue: Input should be greater than or equal to 0"):
        decode(topic_for_event(event), record.key, json.dumps(body).encode(), record.headers)


def test_decode_rejects_records_that_are_not_cloudevents():
    topic = ALL_TOPICS[0]
    with pytest.raises(EnvelopeError, match="missing header"):
        decode(topic, b"k", b"{}", [])


def test_decode_rejects_an_event_on_the_wrong_topic():
    event = _sample("io.berth.inference.queue-lag.v1")
    record = encode(event, source="tests")
    pods = next(t for t in ALL_TOPICS if t.name == "berth.cluster.pods.v1")
    with pytest.raises(EnvelopeError, match="does not belong on berth.cluster.pods.v1"):
        decode(pods, record.key, record.value, record.headers)


def test_decode_rejects_malformed_json_and_unknown_fields():
    event = _sample("io.berth.cloud.spot-interruption.v1")
    record = encode(event, source="tests")
    with pytest.raises(EnvelopeError, match="Invalid JSON"):
        decode(topic_for_event(event), record.key, b"{not json", record.headers)
    body = json.loads(record.value) | {"deadlien": "typo"}
    with pytest.raises(EnvelopeError, match="deadlien: Extra inputs are not permitted"):
        decode(topic_for_event(event), record.key, json.dumps(body).encode(), record.headers)


def test_validation_rules_refuse_bad_values():
    with pytest.raises(ValueError, match="not a valid Kubernetes name"):
        PodInfo(uid="u", namespace="ML", name="x", creation_time=T0)
    with pytest.raises(ValueError, match="timezone"):
        PodInfo(uid="u", namespace="ml", name="x", creation_time="2026-01-01T00:00:00")
    with pytest.raises(ValueError, match="less than or equal to 1000"):
        PodInfo(uid="u", namespace="ml", name="x", creation_time=T0, gpu_fraction_milli=1500)


def test_committed_json_schemas_are_current():
    committed = committed_schemas()
    generated = event_schemas()
    missing = sorted(set(generated) - set(committed))
    assert not missing, f"no committed schema for {missing}: run `berth schemas export`"
    stale = sorted(name for name, schema in generated.items() if render(schema) != render(committed[name]))
    assert not stale, f"stale JSON Schema for {stale}: run `berth schemas export` and commit"


def test_no_change_breaks_the_committed_contract():
    # What `berth schemas export --check` enforces (see tests/unit/test_schema_evolution.py).
    assert check(committed_schemas(), event_schemas()) == []


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_payloads_written_by_earlier_versions_still_decode(path):
    body = path.read_bytes()
    topic = next(t for t in ALL_TOPICS if path.stem in t.event_types)
    event = topic.event_types[path.stem].model_validate_json(body)
    assert event.type == path.stem


def test_compatibility_checker_finds_each_kind_of_break():
    old = {
        "type": "object",
        "additionalProperties": False,
        "required": ["a"],
        "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"type": "string"}, "c": {"enum": ["x", "y"]}},
    }
    assert not compare(old, old).changed
    added = json.loads(json.dumps(old))
    added["properties"]["d"] = {"type": "string"}
    assert compare(old, added).breaking == [] and compare(old, added).added_optional == ["d"]
    # A widened enum is no longer "compatible": an older consumer refuses the new value.
    widened = json.loads(json.dumps(old))
    widened["properties"]["c"]["enum"].append("z")
    assert "c: enum now accepts ['z'] (widened" in compare(old, widened).breaking[0]
    broken = json.loads(json.dumps(old))
    del broken["properties"]["b"]
    broken["required"].append("c")
    broken["properties"]["a"] = {"type": "integer", "minimum": 1}
    broken["properties"]["c"] = {"enum": ["x"]}
    found = "\n".join(compare(old, broken).breaking)
    for expected in (
        "b: field removed",
        "c: newly required",
        "a: minimum changed from 0 to 1 (narrowed",
        "c: enum no longer accepts ['y']",
    ):
        assert expected in found


@pytest.mark.parametrize(
    ("resource", "text", "canonical"),
    [
        ("cpu", "100m", 100),
        ("cpu", "2", 2000),
        ("cpu", "1.5", 1500),
        ("cpu", "0.0001", 1),
        ("memory", "500Mi", 500 * 2**20),
        ("memory", "1Gi", 2**30),
        ("memory", "1G", 10**9),
        ("memory", "1e3", 1000),
        ("nvidia.com/gpu", "8", 8),
        ("ephemeral-storage", "10Gi", 10 * 2**30),
    ],
)
def test_quantities_convert_to_canonical_units(resource, text, canonical):
    assert to_canonical(resource, text) == canonical


def test_bad_quantities_say_what_is_expected():
    with pytest.raises(QuantityError, match="is not a Kubernetes quantity"):
        to_canonical("cpu", "2 cores")
    with pytest.raises(QuantityError, match="negative"):
        to_canonical("cpu", "-1")
    assert resource_list({"memory": "1Gi", "cpu": "250m"}) == {"cpu": 250, "memory": 2**30}
    assert format_canonical("cpu", 250) == "250m" and format_canonical("memory", 2**30) == "1Gi"


def test_a_quantity_remembered_for_1_still_refuses_true():
    from berth.schemas.quantity import QuantityError, to_canonical

    assert to_canonical("nvidia.com/gpu", 1) == 1
    assert to_canonical("cpu", "250m") == to_canonical("cpu", "250m") == 250
    with pytest.raises(QuantityError):
        to_canonical("nvidia.com/gpu", True)


def test_maps_come_out_sorted_by_key_whatever_order_they_were_written_in():
    """Postgres JSONB and other producers give keys back in their own order; a model must not."""
    from berth.schemas import NodeVerdict

    written = ({"b": 2, "a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3}, {"c": 3, "a": 1, "b": 2})
    for scores in written:
        verdict = NodeVerdict.model_validate_json(json.dumps({"node": "n", "scores": scores, "total": 6}))
        assert list(verdict.scores) == ["a", "b", "c"]
        assert verdict.scores == {"a": 1, "b": 2, "c": 3}
