"""Schema evolution: versions on the wire, what an older consumer can read, and the release check.

The rule (README, "Topics and events"):

* Every event type has a version ``MAJOR.MINOR``. ``MAJOR`` is the ``.vN`` of its type (and of
  its topic); ``MINOR`` is the model's ``schema_minor`` (0 unless raised). Producers put it in the
  CloudEvents ``dataschema`` attribute: ``https://berth.io/schemas/<type>.json?version=1.2``.
* Within a major, a new minor may only **add optional fields** (at any depth). Nothing else
  changes: no field removed or renamed, none newly required or made optional, no type, bound,
  enum, pattern, format or default changed in either direction (a narrowed one refuses what
  older producers send, a widened one sends what older consumers refuse), no event type removed,
  renamed, moved to another topic or added to a topic that older consumers read.
* A consumer reading an event whose declared minor is **newer** than its own ignores the fields
  it does not know (forward compatibility). At its **own or an older** minor — or when the record
  declares none — it still refuses unknown fields: it knows every field of those versions, so an
  unknown one is a producer's typo, and the record goes to the dead-letter topic.

``berth schemas export --check`` enforces the second point against the committed JSON Schemas
(the released versions, ``schemas/jsonschema``) with :func:`check`; :mod:`.envelope` applies the
third with :func:`prune_unknown`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

SCHEMA_BASE_URI = "https://berth.io/schemas/"
VERSION_KEY = "x-berth-version"
"""Where a committed JSON Schema records the version it describes (absent in files released
before versions were recorded: those are ``MAJOR.0``)."""

_MAJOR_OF_TYPE = re.compile(r"\.v(\d+)$")
_DATASCHEMA = re.compile(r"^(?P<type>[A-Za-z0-9.\-_]+)\.json(?:\?version=(?P<major>\d{1,4})\.(?P<minor>\d{1,6}))?$")


class SchemaVersion(NamedTuple):
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def major_of(event_type: str) -> int:
    """The major version an event type's name carries (``io.berth.x.v1`` → 1)."""
    match = _MAJOR_OF_TYPE.search(event_type)
    if not match:
        raise ValueError(f"event type {event_type!r} does not end in .v<major>")
    return int(match.group(1))


def _model_class(model: Any) -> Any:
    return model if isinstance(model, type) else type(model)


def version_of(model: Any) -> SchemaVersion:
    """The version an event model (class or instance) produces and reads."""
    model = _model_class(model)
    event_type = model.model_fields["type"].default
    return SchemaVersion(major_of(event_type), int(getattr(model, "schema_minor", 0)))


def dataschema_uri(model: Any) -> str:
    """The CloudEvents ``dataschema`` of an event model: its JSON Schema and version."""
    event_type = _model_class(model).model_fields["type"].default
    return f"{SCHEMA_BASE_URI}{event_type}.json?version={version_of(model)}"


def parse_dataschema(uri: str, event_type: str) -> SchemaVersion:
    """The version a record declares in ``dataschema``; ValueError when it is not Berth's schema
    of ``event_type`` or names another major than the type does."""
    rest = uri.removeprefix(SCHEMA_BASE_URI) if uri.startswith(SCHEMA_BASE_URI) else None
    match = _DATASCHEMA.match(rest) if rest is not None else None
    if match is None or match.group("type") != event_type:
        raise ValueError(f"dataschema {uri[:200]!r} is not {SCHEMA_BASE_URI}{event_type}.json?version=<major>.<minor>")
    major = major_of(event_type)
    if match.group("major") is None:
        return SchemaVersion(major, 0)
    declared = SchemaVersion(int(match.group("major")), int(match.group("minor")))
    if declared.major != major:
        raise ValueError(
            f"dataschema declares version {declared} but the type {event_type} is major {major} "
            "(another major is another event type, on another topic)"
        )
    return declared


def schema_version(schema: dict[str, Any], event_type: str) -> SchemaVersion:
    """The version a (committed or generated) JSON Schema describes."""
    text = schema.get(VERSION_KEY)
    if text is None:
        return SchemaVersion(major_of(event_type), 0)
    major, _, minor = str(text).partition(".")
    return SchemaVersion(int(major), int(minor or 0))


# --- reading a newer minor: drop what this consumer does not know -----------------------------------


def prune_unknown(value: Any, schema: dict[str, Any]) -> tuple[Any, list[str]]:
    """``value`` (parsed JSON) without the object members ``schema`` does not know, at any depth,
    and the paths of what was dropped. Members of closed objects (``additionalProperties: false``)
    only; everything the schema knows is left for validation to judge."""
    dropped: list[str] = []
    pruned = _prune(value, schema, schema.get("$defs", {}), "", dropped, 0)
    return pruned, dropped


def _resolve(node: Any, defs: dict[str, Any]) -> dict[str, Any]:
    for _ in range(32):
        if not isinstance(node, dict):
            return {}
        ref = node.get("$ref")
        if not (isinstance(ref, str) and ref.startswith("#/$defs/")):
            return node
        node = defs.get(ref.removeprefix("#/$defs/"), {})
    return {}


def _prune(value: Any, node: Any, defs: dict[str, Any], path: str, dropped: list[str], depth: int) -> Any:
    node = _resolve(node, defs)
    if depth > 64 or not node:
        return value
    if isinstance(value, dict):
        options = node.get("anyOf") or node.get("oneOf")
        if options:
            chosen = _choose(value, node, options, defs)
            return value if chosen is None else _prune(value, chosen, defs, path, dropped, depth + 1)
        properties = node.get("properties")
        if isinstance(properties, dict):
            extra = node.get("additionalProperties")
            out = {}
            for key, item in value.items():
                where = f"{path}.{key}" if path else key
                if key in properties:
                    out[key] = _prune(item, properties[key], defs, where, dropped, depth + 1)
                elif extra is False:
                    dropped.append(where)
                else:
                    out[key] = _prune(item, extra, defs, where, dropped, depth + 1) if isinstance(extra, dict) else item
            return out
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return {key: _prune(item, extra, defs, f"{path}.{key}", dropped, depth + 1) for key, item in value.items()}
        return value
    if isinstance(value, list):
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list):
            return [
                _prune(item, prefix[i] if i < len(prefix) else items, defs, f"{path}[{i}]", dropped, depth + 1)
                for i, item in enumerate(value)
            ]
        if isinstance(items, dict):
            return [_prune(item, items, defs, f"{path}[{i}]", dropped, depth + 1) for i, item in enumerate(value)]
        options = node.get("anyOf") or node.get("oneOf")
        if options:
            arrays = [o for o in (_resolve(o, defs) for o in options) if o.get("type") == "array"]
            if len(arrays) == 1:
                return _prune(value, arrays[0], defs, path, dropped, depth + 1)
    return value


def _choose(
    value: dict[str, Any], node: dict[str, Any], options: list[Any], defs: dict[str, Any]
) -> dict[str, Any] | None:
    """The member of a union an object belongs to: by the discriminator if there is one, else
    the only object member; None when that is ambiguous (then nothing is dropped)."""
    discriminator = node.get("discriminator")
    if isinstance(discriminator, dict):
        tag = value.get(discriminator.get("propertyName", ""))
        target = discriminator.get("mapping", {}).get(tag) if isinstance(tag, str) else None
        return _resolve({"$ref": target}, defs) if isinstance(target, str) else None
    objects = [o for o in (_resolve(o, defs) for o in options) if o.get("type") == "object" or "properties" in o]
    return objects[0] if len(objects) == 1 else None


# --- releasing a schema: what an older consumer (or an older producer's event) cannot survive --------


_DOCUMENTATION = frozenset({"title", "description", "examples", "$comment", "$id", VERSION_KEY, "x-berth-topic"})
_STRUCTURE = frozenset(
    {
        "$ref",
        "$defs",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "anyOf",
        "oneOf",
        "allOf",
        "discriminator",
    }
)
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


@dataclass
class Comparison:
    """How a new schema differs from a released one."""

    breaking: list[str] = field(default_factory=list)
    added_optional: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.breaking or self.added_optional)


def compare(old: dict[str, Any], new: dict[str, Any]) -> Comparison:
    """Compare a released schema ``old`` with ``new`` of the same event type (see the module rule)."""
    result = Comparison()
    _compare(old, new, old.get("$defs", {}), new.get("$defs", {}), "", result, set())
    return result


def _compare(
    old: Any,
    new: Any,
    old_defs: dict[str, Any],
    new_defs: dict[str, Any],
    path: str,
    result: Comparison,
    seen: set[tuple[str, str]],
) -> None:
    pair = (
        str(old.get("$ref")) if isinstance(old, dict) else "",
        str(new.get("$ref")) if isinstance(new, dict) else "",
    )
    if pair[0].startswith("#/") and pair[1].startswith("#/"):
        if pair in seen:
            return  # a recursive type, already being compared
        seen = seen | {pair}
    old, new = _resolve(old, old_defs), _resolve(new, new_defs)
    where = path or "(root)"
    breaking = result.breaking

    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    old_required, new_required = set(old.get("required", [])), set(new.get("required", []))
    for name in sorted(old_props):
        at = f"{path}.{name}" if path else name
        if name not in new_props:
            breaking.append(
                f"{at}: field removed (or renamed): older producers' events carry it and are refused; "
                + ("older consumers require it" if name in old_required else "its data is lost")
            )
            continue
        if name in old_required and name not in new_required:
            breaking.append(f"{at}: no longer required: older consumers refuse events without it")
        elif name in new_required and name not in old_required:
            breaking.append(f"{at}: newly required: older producers' events lack it and are refused")
        _compare(old_props[name], new_props[name], old_defs, new_defs, at, result, seen)
    for name in sorted(set(new_props) - set(old_props)):
        at = f"{path}.{name}" if path else name
        if name in new_required:
            breaking.append(f"{at}: new required field: older producers' events lack it and are refused")
        else:
            result.added_optional.append(at)

    old_extra, new_extra = old.get("additionalProperties"), new.get("additionalProperties")
    if isinstance(old_extra, dict) and isinstance(new_extra, dict):
        _compare(old_extra, new_extra, old_defs, new_defs, f"{path}{{}}", result, seen)
    elif old_extra != new_extra:
        breaking.append(f"{where}: additionalProperties changed from {old_extra!r} to {new_extra!r}")

    for key in ("items",):
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            _compare(old[key], new[key], old_defs, new_defs, f"{path}[]", result, seen)
        elif old.get(key) != new.get(key):
            breaking.append(f"{where}: {key} changed")
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        old_list, new_list = old.get(key), new.get(key)
        if old_list is None and new_list is None:
            continue
        if not isinstance(old_list, list) or not isinstance(new_list, list) or len(old_list) != len(new_list):
            breaking.append(
                f"{where}: {key} changed from {_count(old_list)} to {_count(new_list)} member(s): "
                "a value one side writes, the other refuses"
            )
            continue
        for index, (old_item, new_item) in enumerate(zip(old_list, new_list, strict=True)):
            _compare(old_item, new_item, old_defs, new_defs, f"{path}<{key}[{index}]>", result, seen)
    old_tags = sorted((old.get("discriminator") or {}).get("mapping", {}))
    new_tags = sorted((new.get("discriminator") or {}).get("mapping", {}))
    if old_tags != new_tags:
        breaking.append(f"{where}: union members changed from {old_tags} to {new_tags}")

    for key in sorted((set(old) | set(new)) - _DOCUMENTATION - _STRUCTURE):
        if key.startswith("x-"):
            continue
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if before != after:
            breaking.append(f"{where}: {key} {_describe(key, before, after)}")


class _Absent:
    def __repr__(self) -> str:
        return "(none)"


_ABSENT = _Absent()


def _count(members: Any) -> int:
    return len(members) if isinstance(members, list) else 0


def _describe(key: str, before: Any, after: Any) -> str:
    change = f"changed from {before!r} to {after!r}"
    narrowed = "narrowed: older producers' events are refused"
    widened = "widened: older consumers refuse the new values"
    if key == "enum" and isinstance(before, list) and isinstance(after, list):
        lost = [v for v in before if v not in after]
        gained = [v for v in after if v not in before]
        if lost:
            return f"no longer accepts {lost} ({narrowed})"
        return f"now accepts {gained} ({widened})"
    if key == "type":
        old_types = set(before) if isinstance(before, list) else {before}
        new_types = set(after) if isinstance(after, list) else {after}
        if new_types < old_types:
            return f"narrowed from {sorted(map(str, old_types))} to {sorted(map(str, new_types))} ({narrowed})"
        if old_types < new_types:
            return f"widened from {sorted(map(str, old_types))} to {sorted(map(str, new_types))} ({widened})"
        return change
    numeric = isinstance(before, (int, float)) and isinstance(after, (int, float))
    if key in _LOWER_BOUNDS or key in _UPPER_BOUNDS:
        if before is _ABSENT or (numeric and ((after > before) == (key in _LOWER_BOUNDS))):
            return f"{change} ({narrowed})"
        return f"{change} ({widened})"
    return change


def check(committed: dict[str, dict[str, Any]], generated: dict[str, dict[str, Any]]) -> list[str]:
    """Why releasing ``generated`` over the ``committed`` (released) schemas would break a deployed
    consumer or producer, or would ship a change under a version that already means something
    else; empty when the release is safe. One line per problem, prefixed with the event type."""
    problems: list[str] = []
    released_topics = {schema.get("x-berth-topic") for schema in committed.values()}
    for name in sorted(committed):
        old = committed[name]
        if name not in generated:
            problems.append(
                f"{name}: event type removed or renamed: older producers still send it and older "
                "consumers still expect it (a new major is a new event type on a new topic, beside it)"
            )
            continue
        new = generated[name]
        if old.get("x-berth-topic") != new.get("x-berth-topic"):
            problems.append(
                f"{name}: moved from topic {old.get('x-berth-topic')} to {new.get('x-berth-topic')}: "
                "its consumers no longer see it"
            )
        old_version, new_version = schema_version(old, name), schema_version(new, name)
        if new_version < old_version:
            problems.append(f"{name}: version {new_version} is older than the released {old_version}")
        result = compare(old, new)
        problems.extend(f"{name}: {problem}" for problem in result.breaking)
        if result.added_optional and new_version <= old_version:
            problems.append(
                f"{name}: adds optional field(s) {', '.join(result.added_optional)} but still declares version "
                f"{new_version}: raise the model's schema_minor to {old_version.minor + 1} (consumers of "
                f"{old_version} refuse unknown fields of their own version; they ignore those of a newer one)"
            )
    for name in sorted(set(generated) - set(committed)):
        topic = generated[name].get("x-berth-topic")
        if topic in released_topics:
            problems.append(
                f"{name}: a new event type on {topic}, which older consumers read: they refuse it "
                "(deploy consumers that know it first, then release with --allow-breaking)"
            )
    return problems
