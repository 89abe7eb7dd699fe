"""Score normalisation helpers shared by plugins (kube's ``helper.DefaultNormalizeScore``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.framework import MAX_NODE_SCORE

__all__ = ["default_normalize", "go_div"]


def go_div(numerator: npt.NDArray[np.int64], denominator: npt.NDArray[np.int64] | int) -> npt.NDArray[np.int64]:
    """Integer division truncating toward zero, as Go's ``/`` on int64 (numpy's ``//`` floors)."""
    quotient = np.abs(numerator) // np.abs(denominator)
    return np.where((numerator < 0) ^ (np.asarray(denominator) < 0), -quotient, quotient)


def default_normalize(scores: npt.NDArray[np.int64], *, reverse: bool) -> npt.NDArray[np.int64]:
    """Scale raw scores so the largest becomes MAX_NODE_SCORE (``score * 100 / max``, integer);
    with ``reverse``, ``100 - that``. All-zero scores stay 0 (or all become 100 with
    ``reverse``)."""
    top = int(scores.max()) if scores.size else 0
    if top == 0:
        return np.full(scores.shape, MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    scaled = go_div(scores.astype(np.int64) * MAX_NODE_SCORE, top)
    return MAX_NODE_SCORE - scaled if reverse else scaled
