"""JSON Schema for every event type, committed under ``schemas/jsonschema/``.

Non-Python producers validate against these files; the tests fail when they are stale.
``berth schemas export`` rewrites them after :mod:`.compat` has checked that the change is one
that deployed consumers can read (``--check`` only checks).
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
