"""The contract between the simulator and a placement policy.

A policy is three small decisions, mirroring kube-scheduler's score / select-host / reserve:

* ``score_rows(state, rows, shape, request)`` scores feasible nodes ``rows`` for a pod shape:
  an int64 score per row (higher is better) and, for fractional pods, the device the policy
  would use on that node (-1 otherwise).  It must depend only on each row's own node state
  and the shape - the simulator caches it until that node changes.
* ``select(state, candidates, scores, event)`` picks one node among the feasible
  ``candidates`` given their cached scores.  Reference policies break ties the way the
  artifact's scheduler does (see :meth:`Policy.select`); Berth's policy has its own rule.
* ``devices(state, node, request, cached_device)`` names the devices to bind.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt

from bench.gpu_trace.simulator import ClusterState, Event, SimContext
from berth.core.gpu.fragmentation import MILLI_PER_GPU, PodRequest, exclusive_devices

IntArray = npt.NDArray[np.int64]


def best_fit_device(free_rows: IntArray, share: int) -> IntArray:
    """Per row: the device with the least free milli that still holds ``share``; lowest index
    on ties (the artifact's "best" GPU selection).  -1 where no device fits."""
    key = np.where(free_rows >= share, free_rows, MILLI_PER_GPU + 1)
    choice = np.argmin(key, axis=1)
    return np.where(key.min(axis=1) <= MILLI_PER_GPU, choice, -1).astype(np.int64)


def splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A fast, well-mixing 64-bit hash (SplitMix64 finaliser) over uint64 arrays."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class Policy:
    """Base class; subclasses set ``name`` and implement ``score_rows``."""

    name: ClassVar[str] = "abstract"

    def setup(self, ctx: SimContext) -> None:
        """Called once per run before the first pod; keeps the context.

        Draws the run's node ranking used to break ties (see :meth:`select`).
        """
        self.ctx = ctx
        self.node_rank = ctx.rng.permutation(len(ctx.nodes)).astype(np.int64)

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        raise NotImplementedError

    def select(self, state: ClusterState, candidates: IntArray, scores: IntArray, event: Event) -> int:
        """Highest score; ties to the node ranked first in this run's random node ranking.

        The artifact does not draw per decision: its kube-scheduler fork
        (github.com/mental2008/kubernetes v1.20.5-minor, ``selectHost``) picks the
        lexicographically smallest node name among the best, and the simulator prefixes node
        names with a seeded random permutation ("%04d-").  So ties always go the same way
        within a run, which packs pods onto the same nodes instead of spreading them - it is
        worth several points of allocation for tie-heavy scores (FGD, GpuPacking).
        """
        best = candidates[scores == scores.max()]
        if best.size == 1:
            return int(best[0])
        return int(best[np.argmin(self.node_rank[best])])

    def devices(self, state: ClusterState, node: int, request: PodRequest, cached_device: int) -> tuple[int, ...]:
        """Fractional pods use the scored device; whole-GPU pods the lowest idle devices."""
        if request.num_gpu == 0:
            return ()
        if request.is_fractional:
            return (cached_device,)
        return exclusive_devices(state.free_gpu[node], request.num_gpu)


class BestFitDevicePolicy(Policy):
    """Policies whose device choice is the artifact's default "best" GPU selection."""

    def best_devices(self, state: ClusterState, rows: IntArray, request: PodRequest) -> IntArray:
        if not request.is_fractional:
            return np.full(rows.size, -1, dtype=np.int64)
        return best_fit_device(state.free_gpu[rows], request.gpu_milli)
