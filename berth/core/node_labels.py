"""The per-node label index and taint table of a :class:`~berth.core.state.ClusterState`.

Both are indexed by node slot, like every array of the state, and both are owned by the state:
only it calls the mutations (``index``, ``unindex``, ``grow``), so that node versions and the
snapshot hash stay consistent with them. Plugins read them through ``state.labels`` and
``state.taints``; every other method is a pure query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from berth.schemas.cluster import Taint

__all__ = ["LabelIndex", "TaintIndex", "grow_rows"]


def grow_rows(array: npt.NDArray[Any], rows: int, fill: Any) -> npt.NDArray[Any]:
    """A copy of a slot-indexed ``array`` with ``rows`` rows (new rows ``fill``), keeping the
    array's memory order: column-major arrays stay column-major."""
    order: Literal["F", "C"] = "F" if array.flags.f_contiguous and array.ndim > 1 else "C"
    grown: npt.NDArray[Any] = np.full((rows, *array.shape[1:]), fill, dtype=array.dtype, order=order)
    grown[: array.shape[0]] = array
    return grown


class LabelIndex:
    """Node labels as arrays: per label key, an int32 code per slot (0 = the node lacks the key),
    with the value ↔ code tables, so that label selectors are array comparisons.

    Codes of a key are handed out in first-seen order starting at 1 and never reused, so they
    mean nothing but equality; a key never seen reads as all zeros.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._codes: dict[str, npt.NDArray[np.int32]] = {}
        self._value_code: dict[str, dict[str, int]] = {}
        self._values: dict[str, list[str]] = {}
        self._ints: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]] = {}
        self._absent = self._absent_codes(capacity)

    @staticmethod
    def _absent_codes(capacity: int) -> npt.NDArray[np.int32]:
        absent = np.zeros(capacity, dtype=np.int32)
        absent.flags.writeable = False
        return absent

    def codes(self, key: str) -> npt.NDArray[np.int32]:
        """Per slot, the code of the node's value for ``key`` (0: the node lacks the key).
        Read-only view; codes are only compared for equality."""
        return self._codes.get(key, self._absent)

    def value_code(self, key: str, value: str) -> int:
        """The code of ``value`` under ``key``; -1 (never a node's code) when no node has it."""
        return self._value_code.get(key, {}).get(value, -1)

    def value_codes(self, key: str, values: Iterable[str]) -> npt.NDArray[np.int32]:
        """The codes of those of ``values`` some node has had under ``key``, sorted."""
        table = self._value_code.get(key, {})
        return np.array(sorted({table[v] for v in values if v in table}), dtype=np.int32)

    def value(self, key: str, code: int) -> str | None:
        """Inverse of the code table (None for code 0)."""
        return None if code <= 0 else self._values[key][code - 1]

    def domain_count(self, key: str) -> int:
        """Number of codes in use so far for ``key`` (an upper bound of distinct values + 1)."""
        return len(self._values.get(key, ())) + 1

    def int_values(self, key: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """For ``Gt``/``Lt``: per code, the value parsed as int64 and whether it parsed."""
        values = self._values.get(key, [])
        cached = self._ints.get(key)
        if cached is not None and cached[0].shape[0] == len(values) + 1:
            return cached
        numbers = np.zeros(len(values) + 1, dtype=np.int64)
        valid = np.zeros(len(values) + 1, dtype=bool)
        for code, text in enumerate(values, start=1):
            parsed = _parse_int64(text)
            if parsed is not None:
                numbers[code], valid[code] = parsed, True
        self._ints[key] = (numbers, valid)
        return numbers, valid

    def grow(self, capacity: int) -> None:
        """Make every code array ``capacity`` rows long (new rows: key absent)."""
        for key, codes in self._codes.items():
            self._codes[key] = grow_rows(codes, capacity, 0)
        self._absent = self._absent_codes(capacity)
        self._capacity = capacity

    def index(self, slot: int, labels: Mapping[str, str]) -> None:
        """Record the labels of the node in ``slot`` (its previous labels unindexed first)."""
        for key, value in labels.items():
            table = self._value_code.get(key)
            if table is None:
                table = self._value_code[key] = {}
                self._values[key] = []
                self._codes[key] = np.zeros(self._capacity, dtype=np.int32)
            code = table.get(value)
            if code is None:
                self._values[key].append(value)
                code = table[value] = len(self._values[key])
            self._codes[key][slot] = code

    def unindex(self, slot: int, labels: Iterable[str]) -> None:
        """The node in ``slot`` no longer has the label keys ``labels``."""
        for key in labels:
            self._codes[key][slot] = 0


class TaintIndex:
    """Node taints as a table: per slot the ids of the node's taints in the node's own order
    (-1 padded), ids indexing :attr:`distinct`; with counts of live nodes per kind of taint so
    that a pod's toleration checks can be skipped when no node has such a taint."""

    def __init__(self, capacity: int) -> None:
        self._id: dict[tuple[str, str, str], int] = {}
        self._distinct: list[Taint] = []
        self.table = np.full((capacity, 0), -1, dtype=np.int32)
        """``[capacity, widest taint list]`` taint ids per slot, -1 padded."""
        self.hard_nodes = 0
        """How many live nodes have a NoSchedule/NoExecute taint (0: TaintToleration's Filter
        has nothing to do)."""
        self.soft_nodes = 0
        """How many live nodes have a PreferNoSchedule taint."""

    @property
    def distinct(self) -> Sequence[Taint]:
        """Distinct taints seen so far; :attr:`table` holds indices into this sequence."""
        return tuple(self._distinct)

    def grow(self, capacity: int) -> None:
        """Make the table ``capacity`` rows long (new rows: no taints)."""
        self.table = grow_rows(self.table, capacity, -1)

    def index(self, slot: int, taints: Sequence[Taint]) -> None:
        """Record the taints of the node in ``slot`` (its previous taints unindexed first)."""
        ids = [self._id_for(t) for t in taints]
        if len(ids) > self.table.shape[1]:
            extra = np.full((self.table.shape[0], len(ids) - self.table.shape[1]), -1, dtype=np.int32)
            self.table = np.hstack([self.table, extra])
        self.table[slot] = -1
        self.table[slot, : len(ids)] = ids
        if any(_is_hard(t) for t in taints):
            self.hard_nodes += 1
        if any(t.effect == "PreferNoSchedule" for t in taints):
            self.soft_nodes += 1

    def unindex(self, slot: int, taints: Sequence[Taint]) -> None:
        """The node in ``slot``, which had ``taints``, has none now."""
        self.table[slot] = -1
        if any(_is_hard(t) for t in taints):
            self.hard_nodes -= 1
        if any(t.effect == "PreferNoSchedule" for t in taints):
            self.soft_nodes -= 1

    def _id_for(self, taint: Taint) -> int:
        key = (taint.key, taint.value, taint.effect)
        taint_id = self._id.get(key)
        if taint_id is None:
            taint_id = self._id[key] = len(self._distinct)
            self._distinct.append(taint)
        return taint_id


def _is_hard(taint: Taint) -> bool:
    return taint.effect in ("NoSchedule", "NoExecute")


def _parse_int64(text: str) -> int | None:
    # Go's strconv.ParseInt(s, 10, 64): optional sign, decimal digits, no spaces or underscores.
    body = text[1:] if text[:1] in "+-" else text
    if not body.isdigit() or not body.isascii():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None
