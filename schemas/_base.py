"""Building blocks shared by every event model.

Every model is frozen (events are facts; nobody edits a fact after it happened) and forbids
unknown fields at the top level of our own types, so that a typo in a producer is a validation
error that sends the record to the dead-letter topic instead of a silently dropped setting. The
one exception is an event of a newer minor version than the consumer's (see :mod:`.compat`): the
envelope drops the fields this consumer does not know before validating it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema

from .compat import VERSION_KEY, major_of


def _version_in_schema(schema: dict[str, Any], model: type) -> None:
    # An event model's JSON Schema says which version of the event it describes (MAJOR.MINOR).
    type_field = getattr(model, "model_fields", {}).get("type")
    event_type = getattr(type_field, "default", None)
    if isinstance(event_type, str) and _EVENT_TYPE.search(event_type):
        schema[VERSION_KEY] = f"{major_of(event_type)}.{getattr(model, 'schema_minor', 0)}"


_EVENT_TYPE = re.compile(r"^io\.berth\..+\.v\d+$")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int64_bounds(node: Any, seen: set[int]) -> None:
    # Every integer of the contract is a signed 64-bit one: Postgres BIGINT, numpy's int64, Java
    # and Go producers. Python's are unbounded, and an event with 10**30 GPUs used to pass
    # validation and then fail in the middle of a consumer's fold (found by fuzzing).
    if isinstance(node, dict):
        if id(node) in seen:
            return
        seen.add(id(node))
        if node.get("type") == "int":
            if "ge" not in node and "gt" not in node:
                node["ge"] = INT64_MIN
            if "le" not in node and "lt" not in node:
                node["le"] = INT64_MAX
        for value in node.values():
            _int64_bounds(value, seen)
    elif isinstance(node, list):
        for value in node:
            _int64_bounds(value, seen)


class FrozenModel(BaseModel):
    """Base of all contract models: immutable, strict about unknown fields, JSON friendly.

    ``schema_minor`` is an event model's minor version (its major is the ``.vN`` of its type):
    raise it when the event gains optional fields, the only change a minor may make
    (``berth schemas export --check`` says so when it is forgotten).
    """

    schema_minor: ClassVar[int] = 0

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        ser_json_timedelta="float",
        # NaN and ±Infinity are not JSON numbers, and no count, rate or price is one: refuse them
        # (Python's json writes them, pydantic's parser reads them, 1e400 reads as infinity).
        allow_inf_nan=False,
        json_schema_extra=_version_in_schema,
    )

    @classmethod
    def __get_pydantic_core_schema__(cls, source: type[BaseModel], handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = handler(source)
        _int64_bounds(schema, set())
        return schema


def _require_tz(value: datetime) -> datetime:
    # Naive datetimes are ambiguous across hosts; the contract speaks UTC only.
    if value.tzinfo is None:
        raise ValueError("timestamp must carry a timezone (use UTC, e.g. 2026-01-01T00:00:00Z)")
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_require_tz)]
"""A timezone-aware timestamp, normalised to UTC."""

_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_NAME = re.compile(_NAME_PATTERN)


def _kubernetes_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"{value!r} is not a valid Kubernetes name: use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


DnsLabel = Annotated[
    str,
    Field(min_length=1, max_length=253, json_schema_extra={"pattern": _NAME_PATTERN}),
    AfterValidator(_kubernetes_name),
]
"""A Kubernetes object name (RFC 1123 subdomain)."""

NonNegativeInt = Annotated[int, Field(ge=0)]
Milli = Annotated[int, Field(ge=0, le=1000)]
"""Thousandths of one GPU: 1000 is a whole device."""


def _sorted_keys(value: dict[str, Any]) -> dict[str, Any]:
    # JSON objects are unordered: Postgres JSONB, for one, gives keys back in its own order. A
    # model must not depend on the order a producer wrote them in, or a decision replayed from
    # the audit store could differ from the one made live (it did, before this).
    if len(value) < 2:
        return value
    keys = list(value)
    # Most maps arrive sorted (Berth writes them so): checking costs a third of re-building.
    return value if keys == sorted(keys) else dict(sorted(value.items()))


StrMap = Annotated[dict[str, str], AfterValidator(_sorted_keys)]
"""Labels, annotations, selectors: a mapping whose keys are kept sorted."""

Quantities = Annotated[dict[str, NonNegativeInt], AfterValidator(_sorted_keys)]
"""Resource amounts in canonical units, keys sorted."""

IntMap = Annotated[dict[str, int], AfterValidator(_sorted_keys)]


def utc_now() -> datetime:
    """The current time in UTC. For producers only: the decision core never reads a clock."""
    return datetime.now(UTC)


def event_time(event: Any) -> Any:
    """The time an event speaks of (observed, sampled, issued ...); None if it has none."""
    for field in (
        "observed_at",
        "sampled_at",
        "issued_at",
        "applied_at",
        "event_time",
        "failed_at",
        "announced_at",
        "updated_at",
    ):
        value = getattr(event, field, None)
        if value is not None:
            return value
    return None
