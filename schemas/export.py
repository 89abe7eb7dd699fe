"""JSON Schema for every event type, committed under ``schemas/jsonschema/``.

Non-Python producers validate against these files; the tests fail when they are stale or when a
change would break consumers of the committed version. ``berth schemas export`` rewrites them.

Backward compatible here means: every payload valid under the committed schema is still valid
under the new one. The check is conservative (structural): no property removed, no property
newly required, no type narrowed, no enum value or const changed, nothing newly forbidden.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .topics import ALL_TOPICS

SCHEMA_DIR = Path(__file__).resolve().parent / "jsonschema"


def event_schemas() -> dict[str, dict[str, Any]]:
    """``{event type: JSON Schema}`` for every event of every topic, deterministic order."""
    schemas: dict[str, dict[str, Any]] = {}
    for topic in ALL_TOPICS:
        for event_type, model in sorted(topic.event_types.items()):
            if event_type in schemas:
                continue  # re-carried by a later topic (the decision inputs); keep its home topic
            schema = model.model_json_schema(mode="validation")
            schema["$id"] = f"https://berth.io/schemas/{event_type}.json"
            schema["x-berth-topic"] = topic.name
            schemas[event_type] = schema
    return schemas


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def committed_schemas(directory: Path = SCHEMA_DIR) -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema file; returns the paths written. Removes nothing (removal is breaking)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for event_type, schema in event_schemas().items():
        path = directory / f"{event_type}.json"
        text = render(schema)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def breaking_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why ``new`` would reject something ``old`` accepted; empty when compatible."""
    problems: list[str] = []
    _compare(old, new, old.get("$defs", {}), new.get("$defs", {}), "", problems)
    return problems


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"), {})
    return node


def _types(node: dict[str, Any]) -> set[str]:
    if "type" in node:
        kinds = node["type"]
        return set(kinds) if isinstance(kinds, list) else {kinds}
    if "anyOf" in node:
        found: set[str] = set()
        for option in node["anyOf"]:
            found |= _types(option) or {"$ref"}
        return found
    return set()


def _compare(
    old: dict[str, Any],
    new: dict[str, Any],
    old_defs: dict[str, Any],
    new_defs: dict[str, Any],
    path: str,
    problems: list[str],
    depth: int = 0,
) -> None:
    if depth > 12:
        return
    old, new = _resolve(old, old_defs), _resolve(new, new_defs)
    where = path or "(root)"
    old_types, new_types = _types(old), _types(new)
    if old_types and new_types and not old_types <= new_types and "$ref" not in new_types:
        problems.append(f"{where}: type narrowed from {sorted(old_types)} to {sorted(new_types)}")
    if "const" in old and new.get("const", old["const"]) != old["const"]:
        problems.append(f"{where}: const changed from {old['const']!r} to {new.get('const')!r}")
    if "enum" in new:
        lost = [value for value in old.get("enum", []) if value not in new["enum"]]
        if lost or "enum" not in old:
            problems.append(f"{where}: enum no longer accepts {lost or 'values it accepted'}")
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name in sorted(old_props):
        if name not in new_props and new.get("additionalProperties") is False:
            problems.append(f"{where}.{name}: property removed")
        elif name in new_props:
            _compare(old_props[name], new_props[name], old_defs, new_defs, f"{path}.{name}",
                     problems, depth + 1)
    newly_required = sorted(set(new.get("required", [])) - set(old.get("required", [])))
    for name in newly_required:
        problems.append(f"{where}.{name}: newly required")
    if old.get("additionalProperties") is not False and new.get("additionalProperties") is False:
        problems.append(f"{where}: additional properties newly forbidden")
    if "items" in old and "items" in new and isinstance(old["items"], dict):
        _compare(old["items"], new["items"], old_defs, new_defs, f"{path}[]", problems, depth + 1)
    for bound in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
        if bound in new and new[bound] > old.get(bound, float("-inf")):
            problems.append(f"{where}: {bound} raised to {new[bound]}")
    for bound in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
        if bound in new and new[bound] < old.get(bound, float("inf")):
            problems.append(f"{where}: {bound} lowered to {new[bound]}")
    if "pattern" in new and new["pattern"] != old.get("pattern"):
        problems.append(f"{where}: pattern changed to {new['pattern']!r}")
