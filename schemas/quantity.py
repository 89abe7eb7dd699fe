"""Kubernetes resource quantities, parsed into the contract's canonical integer units.

Canonical units: ``cpu`` in millicores, ``memory`` and ``ephemeral-storage`` in bytes, every
other resource (``pods``, ``nvidia.com/gpu``, ``nvidia.com/mig-1g.5gb`` ...) as a plain count.
Integers keep decisions exact and hashable; Kubernetes itself compares quantities exactly.
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity (e.g. ``"2 cores"``)."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity such as ``"500Mi"``, ``"100m"``, ``"1.5"`` or ``2``."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (expected e.g. '500m', '2', '16Gi', '1e3')")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise QuantityError(f"{value!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY_SUFFIX:
        return amount * _BINARY_SUFFIX[suffix]
    return amount * _DECIMAL_SUFFIX[suffix]


def to_canonical(resource: str, value: str | int | float) -> int:
    """Convert one resource amount to its canonical integer unit (rounding up, as kube does)."""
    if isinstance(value, bool):  # before the cache: True and 1 are the same key there
        raise QuantityError(f"{value!r} is not a quantity")
    return _canonical(resource, value)


@functools.lru_cache(maxsize=4096)
def _canonical(resource: str, value: str | int | float) -> int:
    # Remembered for the last few thousand (resource, value) pairs: a cluster's pods ask for a
    # handful of distinct amounts, and parsing them again and again was 15 % of ingest's time.
    amount = parse_quantity(value)
    if amount < 0:
        raise QuantityError(f"{resource}: quantity {value!r} is negative")
    if resource in MILLI_RESOURCES:
        amount = amount * 1000
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def resource_list(raw: dict[str, str | int | float] | None) -> dict[str, int]:
    """Convert a Kubernetes ResourceList (``{"cpu": "100m", ...}``) to canonical units."""
    return {name: to_canonical(name, amount) for name, amount in sorted((raw or {}).items())}


def format_canonical(resource: str, amount: int) -> str:
    """Render a canonical amount back as a Kubernetes quantity (for messages and manifests)."""
    if resource in MILLI_RESOURCES:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in {"memory", "ephemeral-storage"}:
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)
