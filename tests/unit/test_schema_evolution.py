"""Schema evolution, both ways (README, "Topics and events"; :mod:`berth.schemas.compat`).

The "newer" schema is built here by subclassing a released model and adding a field, the way a
producer upgraded before its consumers would; the registry's models are the released ones.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

import pytest
from berth.schemas import PodInfo, PodObserved, SpotInterruptionNotice
from berth.schemas.compat import SchemaVersion, check, compare, dataschema_uri, parse_dataschema, prune_unknown
from berth.schemas.envelope import EnvelopeError, decode, encode
from berth.schemas.export import committed_schemas, event_schemas
from berth.schemas.samples import T0, training_pod
from berth.schemas.topics import PODS, SPOT, Topic
from typer.testing import CliRunner

POD_TYPE = "io.berth.cluster.pod-observed.v1"


class PodInfoV1_1(PodInfo):
    queue: str | None = None  # a field the released PodInfo does not have


class PodObservedV1_1(PodObserved):
    """pod-observed 1.1: the pod gains an optional ``queue`` (nested), the event a ``cluster``."""

    schema_minor = 1
    pod: PodInfoV1_1
    cluster: str = ""


PODS_V1_1 = Topic(PODS.name, PODS.key, PODS.partitions, PodObservedV1_1)
"""The pod topic as a consumer built from the newer schema reads it."""


def _released_pod_event() -> PodObserved:
    return PodObserved(pod=training_pod("train-7"), observed_at=T0)


def _newer_pod_event() -> PodObservedV1_1:
    pod = PodInfoV1_1(**training_pod("train-7").model_dump(), queue="batch")
    return PodObservedV1_1(pod=pod, observed_at=T0, cluster="eu-1")


def _with(record: Any, *, body: dict[str, Any] | None = None, dataschema: str | None = "keep") -> tuple:
    headers = [(k, v) for k, v in record.headers if k != "ce_dataschema" or dataschema == "keep"]
    if dataschema not in ("keep", None):
        headers.append(("ce_dataschema", dataschema.encode()))
    value = json.dumps(body).encode() if body is not None else record.value
    return record.key, value, headers


# --- on the wire ----------------------------------------------------------------------------------


def test_producers_declare_the_version_in_dataschema():
    record = encode(_newer_pod_event(), source="tests")
    assert dict(record.headers)["ce_dataschema"] == f"https://berth.io/schemas/{POD_TYPE}.json?version=1.1".encode()
    assert dataschema_uri(PodObserved) == f"https://berth.io/schemas/{POD_TYPE}.json?version=1.0"
    assert parse_dataschema(dataschema_uri(PodObservedV1_1), POD_TYPE) == SchemaVersion(1, 1)
    assert parse_dataschema(f"https://berth.io/schemas/{POD_TYPE}.json", POD_TYPE) == SchemaVersion(1, 0)


def test_an_event_of_the_newer_minor_is_read_by_the_released_consumer():
    newer = _newer_pod_event()
    record = encode(newer, source="tests")
    decoded = decode(PODS, record.key, record.value, record.headers)
    assert type(decoded.event) is PodObserved
    assert decoded.event == _released_pod_event()
    assert decoded.schema_version == SchemaVersion(1, 1)
    assert sorted(decoded.ignored_fields) == ["cluster", "pod.queue"]


def test_an_event_of_the_released_version_is_read_by_the_newer_consumer():
    record = encode(_released_pod_event(), source="tests")
    decoded = decode(PODS_V1_1, record.key, record.value, record.headers)
    assert type(decoded.event) is PodObservedV1_1
    assert decoded.event.cluster == "" and decoded.event.pod.queue is None
    assert decoded.event.pod == PodInfoV1_1(**_released_pod_event().pod.model_dump())
    assert decoded.ignored_fields == ()


def test_unknown_fields_of_the_consumers_own_or_an_older_version_are_refused():
    # A typo'd producer must still be caught: the consumer knows every field of its own and of
    # older versions (fields are never removed within a major), so an unknown one is a mistake.
    record = encode(_released_pod_event(), source="tests")
    typo = json.loads(record.value) | {"observed_att": "2026-01-01T00:00:00Z"}
    for dataschema in ("keep", None):  # declared 1.0 (its own), or nothing declared
        with pytest.raises(EnvelopeError, match="observed_att: Extra inputs are not permitted"):
            decode(PODS, *_with(record, body=typo, dataschema=dataschema))
    # The newer consumer reading a 1.0 event with a field 1.0 never had: refused too.
    older = json.loads(record.value)
    older["pod"]["queu"] = "batch"
    with pytest.raises(EnvelopeError, match=r"pod.queu: Extra inputs are not permitted"):
        decode(PODS_V1_1, *_with(record, body=older))


def test_a_newer_minor_is_no_licence_for_bad_values_of_known_fields():
    record = encode(_newer_pod_event(), source="tests")
    body = json.loads(record.value)
    body["pod"]["requests"]["nvidia.com/gpu"] = -1
    with pytest.raises(EnvelopeError, match=r"nvidia.com/gpu: Input should be greater than or equal to 0"):
        decode(PODS, *_with(record, body=body))
    body = json.loads(record.value)
    del body["observed_at"]
    with pytest.raises(EnvelopeError, match="observed_at: Field required"):
        decode(PODS, *_with(record, body=body))


@pytest.mark.parametrize(
    "dataschema",
    [
        f"https://berth.io/schemas/{POD_TYPE}.json?version=2.0",
        "https://berth.io/schemas/io.berth.cluster.pod-deleted.v1.json?version=1.1",
        f"https://example.com/schemas/{POD_TYPE}.json?version=1.1",
        f"https://berth.io/schemas/{POD_TYPE}.json?version=latest",
    ],
)
def test_a_dataschema_that_is_not_this_types_is_refused(dataschema: str):
    record = encode(_newer_pod_event(), source="tests")
    with pytest.raises(EnvelopeError, match="dataschema"):
        decode(PODS, *_with(record, dataschema=dataschema))


def test_pruning_follows_nested_models_lists_and_maps():
    schema = PodObserved.model_json_schema()
    body = json.loads(encode(_newer_pod_event(), source="t").value)
    body["pod"]["tolerations"] = [{"key": "k", "operator": "Exists", "new": 1}]
    body["pod"]["labels"] = {"free": "form"}  # a map: its keys are data, never dropped
    pruned, dropped = prune_unknown(body, schema)
    assert sorted(dropped) == ["cluster", "pod.queue", "pod.tolerations[0].new"]
    assert pruned["pod"]["labels"] == {"free": "form"} and "new" not in pruned["pod"]["tolerations"][0]


# --- releasing: `berth schemas export --check` -----------------------------------------------------


def _released_form(model: Any, topic: Topic) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    event_type = model.model_fields["type"].default
    schema["$id"] = f"https://berth.io/schemas/{event_type}.json"
    schema["x-berth-topic"] = topic.name
    return schema


def _generated_with(model: Any, topic: Topic = PODS) -> dict[str, dict[str, Any]]:
    generated = event_schemas()
    generated[model.model_fields["type"].default] = _released_form(model, topic)
    return generated


def test_the_committed_schemas_are_releasable():
    assert check(committed_schemas(), event_schemas()) == []


def test_adding_optional_fields_under_a_raised_minor_is_releasable():
    assert check(committed_schemas(), _generated_with(PodObservedV1_1)) == []
    found = compare(committed_schemas()[POD_TYPE], _released_form(PodObservedV1_1, PODS))
    assert found.breaking == [] and sorted(found.added_optional) == ["cluster", "pod.queue"]


def test_adding_optional_fields_without_raising_the_minor_is_refused():
    class Forgotten(PodObservedV1_1):
        schema_minor = 0

    [problem] = check(committed_schemas(), _generated_with(Forgotten))
    assert "adds optional field(s) pod.queue, cluster but still declares version 1.0" in problem
    assert "schema_minor to 1" in problem


def test_a_new_required_field_is_refused():
    class Required(PodObserved):
        schema_minor = 1
        cluster: str

    problems = check(committed_schemas(), _generated_with(Required))
    assert problems == [f"{POD_TYPE}: cluster: new required field: older producers' events lack it and are refused"]


def _edited(change: Any) -> list[str]:
    committed = committed_schemas()
    generated = event_schemas()
    generated[POD_TYPE] = copy.deepcopy(generated[POD_TYPE])
    change(generated[POD_TYPE])
    return check(committed, generated)


def test_a_removed_or_renamed_field_is_refused():
    def rename(schema: dict[str, Any]) -> None:
        schema["properties"]["seen_at"] = schema["properties"].pop("observed_at")
        schema["required"] = ["seen_at" if r == "observed_at" else r for r in schema["required"]]

    found = "\n".join(_edited(rename))
    assert "observed_at: field removed (or renamed)" in found and "seen_at: new required field" in found
    found = "\n".join(_edited(lambda s: s["properties"].pop("resource_version")))
    assert "resource_version: field removed (or renamed)" in found


def test_narrowed_and_widened_types_are_refused():
    def narrow(schema: dict[str, Any]) -> None:
        schema["$defs"]["PodInfo"]["properties"]["gpu_memory_mib"] = {"type": "integer", "minimum": 1}

    assert any("pod.gpu_memory_mib" in p and "anyOf changed" in p for p in _edited(narrow))

    def widen_enum(schema: dict[str, Any]) -> None:
        schema["$defs"]["PodInfo"]["properties"]["phase"]["enum"].append("Evicted")

    [widened] = _edited(widen_enum)
    assert "pod.phase: enum now accepts ['Evicted'] (widened: older consumers refuse the new values)" in widened

    def lower_bound(schema: dict[str, Any]) -> None:
        schema["$defs"]["PodInfo"]["properties"]["uid"]["minLength"] = 3

    [raised] = _edited(lower_bound)
    assert "pod.uid: minLength changed from 1 to 3 (narrowed" in raised


def test_a_renamed_or_removed_event_type_is_refused():
    committed = committed_schemas()
    generated = event_schemas()
    generated["io.berth.cluster.pod-observed.v2"] = generated.pop(POD_TYPE)
    problems = check(committed, generated)
    assert f"{POD_TYPE}: event type removed or renamed" in problems[0]
    assert "io.berth.cluster.pod-observed.v2: a new event type on berth.cluster.pods.v1" in problems[1]


def test_a_renamed_definition_of_the_same_shape_is_fine():
    # The wire carries no type names below the event: renaming a nested model changes nothing.
    def rename_def(schema: dict[str, Any]) -> None:
        schema["$defs"]["PodSpecInfo"] = schema["$defs"].pop("PodInfo")
        schema["properties"]["pod"]["$ref"] = "#/$defs/PodSpecInfo"

    assert _edited(rename_def) == []


def test_an_event_moved_to_another_topic_is_refused():
    generated = event_schemas()
    generated["io.berth.cloud.spot-interruption.v1"] = _released_form(SpotInterruptionNotice, PODS)
    [problem] = check(committed_schemas(), generated)
    assert f"moved from topic {SPOT.name} to {PODS.name}" in problem


def test_the_cli_check_refuses_what_an_older_consumer_cannot_read(monkeypatch: pytest.MonkeyPatch):
    from berth.schemas import export

    from berth.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["schemas", "export", "--check"])
    assert done.exit_code == 0, done.output

    class Forgotten(PodObservedV1_1):
        schema_minor = 0

    class Typed(PodObserved):
        resource_version: Literal["x"] = "x"  # narrowed: a str became one value

    for model, expected in ((Forgotten, "raise the model's schema_minor"), (Typed, "resource_version: const")):
        monkeypatch.setattr(export, "event_schemas", lambda model=model: _generated_with(model))
        done = runner.invoke(app, ["schemas", "export", "--check"])
        assert done.exit_code == 1 and expected in " ".join(done.output.split()), done.output
    # Releasing under the raised minor: --check reports the files as stale (nothing written).
    monkeypatch.setattr(export, "event_schemas", lambda: _generated_with(PodObservedV1_1))
    done = runner.invoke(app, ["schemas", "export", "--check"])
    assert done.exit_code == 1 and "differ from the models" in done.output and POD_TYPE in done.output
