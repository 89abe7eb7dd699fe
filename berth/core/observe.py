"""Timing the scheduling cycle without reading a clock: an observer port.

The core is pure (no clock), yet operators want kube-scheduler's latency metrics per pod, per
extension point and per plugin. The engine therefore takes an optional :class:`CycleObserver`
from the service that runs it: the observer supplies ``clock()`` and receives the durations.
Without one (replay, simulation, tests, a cell being rebuilt) nothing is timed and the cycle
costs nothing extra. What is observed never changes a decision.

Labels follow kube-scheduler v1.34: ``status`` is the name of a framework status code
(``Success``, ``Unschedulable``, ``UnschedulableAndUnresolvable``, ``Error``, ``Skip``,
``Wait``); extension points are named as in its metrics (``PreFilter``, ``Filter``,
``PostFilter``, ``PreScore``, ``Score``, ``Reserve``, ``Unreserve``, ``Permit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from berth.core.framework import Code, Status

__all__ = ["NOT_TIMED", "CycleObserver", "CycleTimer", "status_name"]


class CycleObserver(Protocol):
    """What a service gives the engine to learn how long scheduling takes.

    Contract: ``clock`` is monotonic, in seconds; the callbacks do not raise and do not call
    back into the engine. ``sample_plugins`` is asked once per cycle: per-plugin durations are
    recorded only for cycles it approves (kube-scheduler samples 10 % of cycles).
    """

    def clock(self) -> float: ...

    def sample_plugins(self) -> bool: ...

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None: ...

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None: ...

    def attempt(self, pod_uid: str, result: str, profile: str, seconds: float) -> None:
        """One scheduling attempt of one pod ended: ``result`` is ``scheduled``,
        ``unschedulable`` or ``error``; ``seconds`` covers filtering to the committed (or
        refused) placement, preemption included."""

    def preemption_attempt(self) -> None:
        """The preemption PostFilter ran for a pod (kube counts every run)."""

    def preemption_victims(self, victims: int) -> None:
        """A preemption evicts ``victims`` pods to place its preemptor."""


_STATUS_NAMES = {
    0: "Success",
    1: "Error",
    2: "Unschedulable",
    3: "UnschedulableAndUnresolvable",
    4: "Wait",
    5: "Skip",
    6: "Pending",
}


def status_name(code: Code | int) -> str:
    """kube's ``Code.String()`` for a framework status code."""
    return _STATUS_NAMES.get(int(code), "Error")


class CycleTimer:
    """The observer as one cycle uses it. Without an observer (:data:`NOT_TIMED`) every method
    does nothing, so the cycle's code calls them unconditionally."""

    __slots__ = ("observer", "profile", "sampled")

    def __init__(self, observer: CycleObserver | None, profile: str) -> None:
        self.observer = observer
        self.profile = profile
        self.sampled = observer is not None and observer.sample_plugins()
        """Whether this cycle records per-plugin durations."""

    def start(self) -> float:
        """Now, for :meth:`point` (0.0 when not timed)."""
        return self.observer.clock() if self.observer is not None else 0.0

    def plugin_start(self) -> float | None:
        """Now, for :meth:`plugin`, when this cycle's plugins are sampled; else None."""
        observer = self.observer
        return observer.clock() if self.sampled and observer is not None else None

    def point(self, point: str, status: Status | None, started: float) -> None:
        """The extension point ``point`` ran from ``started`` until now (``None``: Success)."""
        if self.observer is not None:
            name = "Success" if status is None else status_name(status.code)
            self.observer.extension_point(point, name, self.profile, self.observer.clock() - started)

    def plugin(self, plugin: str, point: str, status: Status | str | None, started: float | None) -> None:
        """One plugin's call at ``point`` ran from ``started`` (from :meth:`plugin_start`) until
        now; nothing when ``started`` is None."""
        if started is not None and self.observer is not None:
            name = "Success" if status is None else status if isinstance(status, str) else status_name(status.code)
            self.observer.plugin(plugin, point, name, self.observer.clock() - started)

    def preemption_attempt(self) -> None:
        if self.observer is not None:
            self.observer.preemption_attempt()


NOT_TIMED = CycleTimer(None, "")
"""The timer of every cycle run without an observer."""
