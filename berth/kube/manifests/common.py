"""What every kind's converter shares: the annotation and label names, :class:`ManifestError`,
the field reader that names the object and path in its errors, and metadata/timestamp/uid helpers.

Conversion is deterministic: a missing ``creationTimestamp`` becomes :data:`EPOCH` and a missing
``uid`` is derived from the object's kind, namespace and name.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from berth.schemas.quantity import MILLI_RESOURCES, QuantityError, parse_quantity, to_canonical

ANNOTATION_GPU_FRACTION = "gpu-fraction"
ANNOTATION_GPU_MEMORY = "gpu-memory"
ANNOTATION_GPU_LOCALITY = "berth.io/gpu-locality"
ANNOTATION_GPU_DEVICES = "berth.io/gpu-devices"
ANNOTATION_GPU_TOPOLOGY = "berth.io/gpu-topology"
ANNOTATION_GPU_MIG = "berth.io/gpu-mig"
ANNOTATION_PRICE = "berth.io/price-per-hour"
ANNOTATION_CARBON = "berth.io/carbon-intensity"
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"

# A pod or node without a timestamp gets this one: a fixed value keeps conversion reproducible.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UID_NAMESPACE = uuid.UUID("6f1c3a52-2b7e-4c1e-9a43-5d0c1f1e7b10")
MIG_SLICES_PER_GPU = 7  # compute slices of an A100/H100; the "Ng" of a profile counts them
NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
DEFAULT_MAX_PODS = 110

M = TypeVar("M", bound=BaseModel)


class ManifestError(ValueError):
    """A manifest Berth cannot accept; ``str()`` is ``<Kind> <ns>/<name>: <field path>: <why>``."""

    def __init__(self, ref: str, path: str, detail: str) -> None:
        self.ref = ref
        self.path = path
        self.detail = detail
        super().__init__(f"{ref}: {path}: {detail}" if path else f"{ref}: {detail}")


class FieldReader:
    """Reads fields of one object and raises :class:`ManifestError` naming the object and path."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def fail(self, path: str, detail: str) -> ManifestError:
        return ManifestError(self.ref, path, detail)

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, got {type(value).__name__}")
        return value

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                raise self.fail(path, "is required")
            return None
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {value!r}")
        return value

    def integer(self, value: Any, path: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {value!r}")
        return value

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        return tuple(
            self.string(item, f"{path}[{i}]", required=True) or "" for i, item in enumerate(self.sequence(value, path))
        )

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        raw = self.mapping(value, path)
        out: dict[str, str] = {}
        for key in sorted(raw):
            item = raw[key]
            if not isinstance(item, str):
                # Kubernetes rejects non-string label/annotation values; YAML's `true` or `8`
                # unquoted are the usual culprits, so say how to fix it.
                raise self.fail(f"{path}.{key}", f"must be a string (quote it), got {item!r}")
            out[str(key)] = item
        return out

    def quantities(self, value: Any, path: str) -> dict[str, int]:
        raw = self.mapping(value, path)
        out: dict[str, int] = {}
        for name in sorted(raw):
            amount = raw[name]
            where = f"{path}.{name}"
            if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
                raise self.fail(where, f"{amount!r} is not a Kubernetes quantity")
            try:
                canonical = to_canonical(name, amount)
            except QuantityError:
                if (
                    isinstance(amount, str)
                    and amount.strip().startswith("-")
                    or (not isinstance(amount, str) and amount < 0)
                ):
                    raise self.fail(where, f"{amount!r} must be non-negative") from None
                raise self.fail(where, f"{amount!r} is not a Kubernetes quantity") from None
            if name not in NATIVE_RESOURCES and not name.startswith("hugepages-") and name not in MILLI_RESOURCES:
                # Extended resources are whole counts (kube: "must be an integer").
                if Decimal(str(canonical)) != _decimal(amount):
                    raise self.fail(where, f"{amount!r} must be an integer for extended resource {name}")
            out[name] = canonical
        return out

    def build(self, path: str, cls: Callable[..., M], /, **values: Any) -> M:
        """Construct a contract model, turning pydantic's complaint into one with a field path."""
        try:
            return cls(**values)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = ".".join(_camel(str(part)) for part in error["loc"])
            where = f"{path}.{loc}" if path and loc else (path or loc)
            raise self.fail(where, error["msg"].removeprefix("Value error, ")) from None


def _decimal(amount: str | int | float) -> Decimal:
    return parse_quantity(amount)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def parse_timestamp(reader: FieldReader, value: Any, path: str) -> datetime:
    if value is None:
        return EPOCH
    if isinstance(value, datetime):
        stamp = value
    else:
        text = reader.string(value, path) or ""
        try:
            stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise reader.fail(path, f"{text!r} is not an RFC 3339 timestamp") from None
    if stamp.tzinfo is None:
        raise reader.fail(path, "timestamp must carry a timezone (e.g. 2026-01-01T00:00:00Z)")
    return stamp.astimezone(UTC)


def object_meta(
    obj: Mapping[str, Any], kind: str, index: int | None, *, namespaced: bool, default_namespace: str = "default"
) -> tuple[FieldReader, dict[str, Any], str, str]:
    """Return a reader named after the object, its metadata, namespace and name."""
    where = f"document {index}" if index is not None else kind
    if not isinstance(obj, Mapping):
        raise ManifestError(where, "", f"must be an object, got {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ManifestError(f"{kind} ({where})", "metadata", "is required")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{kind} ({where})", "metadata.name", "is required")
    namespace = ""
    if namespaced:
        namespace = meta.get("namespace") or default_namespace
        if not isinstance(namespace, str):
            raise ManifestError(f"{kind} {name}", "metadata.namespace", "must be a string")
    ref = f"{kind} {namespace}/{name}" if namespaced else f"{kind} {name}"
    reader = FieldReader(ref)
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
        raise reader.fail(
            "metadata.name", f"{name!r} is not a valid Kubernetes object name (lowercase letters, digits, '-' and '.')"
        )
    return reader, dict(meta), namespace, name


def deterministic_uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}"))
