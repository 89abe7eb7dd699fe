"""Canonical JSON and the digests built on it.

- :func:`canonical_json`: sorted keys, no insignificant whitespace, UTF-8 — equal values give
  equal bytes whatever the insertion order of their dicts.
- :func:`object_digest`: a 256-bit integer per cluster object; the snapshot hash is the sum of
  these modulo 2**256, which is order-independent and updatable in O(1) per mutation (add the
  digest of what arrives, subtract the digest of what leaves).
- :func:`tie_break_keys`: the stable tie-breaker between equally scored nodes, a hash of
  (pod UID, node name) computed for all nodes at once from two precomputed 64-bit halves.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

__all__ = [
    "DIGEST_MODULUS",
    "canonical_json",
    "digest_hex",
    "name_hash64",
    "object_digest",
    "object_digest_of_bytes",
    "sha256_hex",
    "tie_break_keys",
]

DIGEST_MODULUS = 1 << 256


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_plain
)
"""One encoder for every call: ``json.dumps`` with options builds a new one each time, which
costs a third of encoding a pod. Encoding keeps no state in the encoder (thread-safe)."""


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes of plain data and pydantic models (dict keys sorted)."""
    return _CANONICAL.encode(value).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def object_digest(kind: str, value: Any) -> int:
    """256-bit digest of one object of the snapshot; ``kind`` separates domains (a node and a
    pod with equal JSON must not cancel out)."""
    return object_digest_of_bytes(kind, canonical_json(value))


def object_digest_of_bytes(kind: str, data: bytes) -> int:
    """:func:`object_digest` of an object whose canonical JSON is ``data``."""
    h = hashlib.blake2b(kind.encode(), digest_size=32)
    h.update(b"\0")
    h.update(data)
    return int.from_bytes(h.digest(), "big")


def digest_hex(total: int) -> str:
    return f"{total % DIGEST_MODULUS:064x}"


def name_hash64(text: str) -> int:
    """A 64-bit hash of a name (blake2b), the per-node/per-pod half of the tie-breaker."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def tie_break_keys(
    pod_uid: str, node_hashes: npt.NDArray[np.uint64], *, overwrite: bool = False
) -> npt.NDArray[np.uint64]:
    """Per-node tie-break keys for this pod: ``(blake2b64(node name) XOR blake2b64(pod uid))``
    times the 64-bit golden-ratio constant (Fibonacci hashing; the high bits depend on every bit
    of the XOR). Deterministic, well spread, a different node order for every pod (so equal
    nodes are not filled in name order), no randomness. Lower key wins a tie; callers may use
    only the high bits. ``overwrite``: compute in ``node_hashes`` itself (a temporary array of
    the caller's) and return it, saving two allocations."""
    keys = node_hashes if overwrite else node_hashes.copy()
    keys ^= np.uint64(name_hash64(pod_uid))
    # Wrapping multiplication is the point (mod 2**64); numpy warns of it only for scalars.
    with np.errstate(over="ignore"):
        keys *= _GOLDEN
    return keys
