"""The scheduling framework: extension points, plugin contracts and the values they exchange.

Shaped after kube-scheduler's framework (``pkg/scheduler/framework/interface.go``), with one
deliberate difference: a plugin sees **all candidate nodes at once** as a numpy array of node
slots (see :class:`berth.core.state.ClusterState`) instead of being called once per node. The
semantics stay per node — a Filter plugin still says, for every node, "passes" or "fails with
these reasons" — but the work is done over arrays.

One scheduling attempt of one pod (a *cycle*) runs the extension points in this order::

    PreFilter → Filter → (PostFilter, only when no node passed) → PreScore → Score
      → NormalizeScore → select → Reserve → Permit

Contracts every plugin obeys:

- **Pure and deterministic.** A plugin reads only its arguments (the pod, the
  :class:`~berth.core.state.ClusterState`, its validated args, the cycle data); no clock, no I/O,
  no randomness, no mutable module globals. Equal inputs give equal outputs, whatever the order in
  which nodes and pods were added to the state.
- **Stateless across cycles.** One plugin instance serves every cycle of its profile; anything a
  plugin computes for one cycle goes into :attr:`CycleContext.data` under its own key (by
  convention its ``NAME`` or ``NAME + "/suffix"``). State that must outlive a cycle and follow
  the cluster (e.g. per-device GPU allocation) lives in a :class:`~berth.core.state.StateExtension`
  attached to the ClusterState, which the state keeps current on every mutation (the contract is
  the state's, since the state calls it; it is re-exported here with the plugin contracts).
- **Read-only state.** No extension point may mutate the ClusterState. The caller commits a
  decision with :meth:`ClusterState.assume` after :meth:`Framework.schedule` returns.
- **Misfits are values.** Plugins return :class:`Status` / :class:`FilterResult` values; raising
  is reserved for programming errors (the framework does not catch them).
- **Node order.** Candidate arrays are given in ascending node-name order; plugins must keep the
  alignment (result ``i`` belongs to ``nodes[i]``) and must not depend on slot numbers themselves.
- **Scores** are integers; after NormalizeScore every score lies in ``0..MAX_NODE_SCORE``.

How a GPU device plugin plugs in (as :mod:`berth.core.plugins.gpu_devices` does):

1. It declares ``STATE_EXTENSIONS = (GpuDeviceExtension,)``; :class:`Framework` attaches one
   instance of each to the ClusterState (replaying existing nodes and pods once) before the first
   cycle. The extension keeps plugin-owned arrays indexed by node *slot* (e.g. free milli-GPU per
   device ``[capacity, max_devices]``), grown in :meth:`StateExtension.grow` and kept current by
   the ``node_*``/``pod_*`` hooks, which receive the device indices of every placed pod.
2. PreFilter parses the pod's GPU demand (whole / fraction / MIG) into cycle data and returns
   ``Status.skip()`` when there is none, so non-GPU pods pay nothing.
3. Filter compares the demand against the extension's arrays over all candidates at once and
   returns a :class:`FilterResult` (e.g. "Insufficient nvidia.com/gpu").
4. Score ranks nodes (locality, fragmentation) as integers.
5. Reserve picks the concrete devices on the chosen node and returns
   ``ReserveResult(gpu_devices=(...))``; the framework puts them into the :class:`Decision`, and
   the caller passes them to :meth:`ClusterState.assume`, which hands them to the extension.

Plugins whose verdict or raw score for a node depends only on the pod and that node's row may
opt into the framework's per-node memo (:meth:`FilterPlugin.filter_signature`,
:meth:`ScorePlugin.score_signature`, :mod:`berth.core.memo`): between two cycles usually one node
changed, and only that node is recomputed. A plugin that needs the framework itself (preemption
re-running the filters on a what-if state) receives it through :meth:`Plugin.bind_framework`
and :attr:`CycleContext.framework` — kube's ``Handle``.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from berth.core.observe import NOT_TIMED, CycleTimer
from berth.core.state import ClusterState, StateExtension
from berth.schemas.cluster import PodInfo

__all__ = [
    "MAX_NODE_SCORE",
    "Code",
    "CycleContext",
    "Diagnosis",
    "FilterPlugin",
    "FilterResult",
    "NoArgs",
    "NodeArray",
    "PermitPlugin",
    "PermitResult",
    "Plugin",
    "PluginArgs",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "ReservePlugin",
    "ReserveResult",
    "ScorePlugin",
    "StateExtension",
    "Status",
    "EXTENSION_POINTS",
]

MAX_NODE_SCORE = 100
"""The largest score a Score plugin may give after normalisation (kube's MaxNodeScore)."""

NodeArray = npt.NDArray[np.intp]
"""Node slots (row indices into the ClusterState arrays), in ascending node-name order."""


class Code(enum.IntEnum):
    """kube-scheduler's status codes, with the same meanings."""

    SUCCESS = 0
    ERROR = 1
    """A bug or an inconsistent input; the pod is not placed and the decision says why."""
    UNSCHEDULABLE = 2
    """Does not fit now, but removing pods (preemption) might make it fit."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    """Does not fit and preemption cannot help (taints, selectors, missing labels...)."""
    WAIT = 4
    """Permit only: hold the pod (e.g. its gang is not complete yet)."""
    SKIP = 5
    """PreFilter/PreScore only: this plugin has nothing to say for this pod; skip its
    Filter/Score for this cycle."""


@dataclass(frozen=True, slots=True)
class Status:
    """The outcome of one plugin call. ``reasons`` are user-visible strings from
    :mod:`berth.core.messages`; ``plugin`` names the plugin that produced the status."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def message(self) -> str:
        """kube's ``Status.Message()``: the reasons joined by ", "."""
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin == plugin else Status(self.code, self.reasons, plugin)

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def skip(cls) -> Status:
        return _SKIP

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, reasons, plugin)

    @classmethod
    def wait(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.WAIT, reasons, plugin)


_SUCCESS = Status()
_SKIP = Status(Code.SKIP)


@dataclass(frozen=True, slots=True)
class FilterResult:
    """One Filter plugin's verdicts over the candidate nodes it was given.

    ``codes[i] == -1`` means ``nodes[i]`` passes; otherwise ``codes[i]`` indexes ``statuses``,
    the (few, distinct) rejections this plugin produced. ``codes is None`` means every candidate
    passes. Statuses must be rejections (UNSCHEDULABLE or UNSCHEDULABLE_AND_UNRESOLVABLE) or
    ERROR; a plugin that needs several reasons for one node puts them all into one Status, as
    kube's NodeResourcesFit does ("Insufficient cpu" and "Insufficient memory").
    """

    codes: npt.NDArray[np.int32] | None = None
    statuses: tuple[Status, ...] = ()

    @classmethod
    def all_pass(cls) -> FilterResult:
        return _ALL_PASS

    @classmethod
    def from_mask(cls, passed: npt.NDArray[np.bool_], status: Status) -> FilterResult:
        """Nodes where ``passed`` is False fail with ``status``."""
        if passed.all():
            return _ALL_PASS
        return cls(np.where(passed, -1, 0).astype(np.int32), (status,))

    @classmethod
    def from_codes(cls, codes: npt.NDArray[np.integer[Any]], statuses: tuple[Status, ...]) -> FilterResult:
        return cls(np.asarray(codes, dtype=np.int32), statuses)

    def passed(self, count: int) -> npt.NDArray[np.bool_]:
        if self.codes is None:
            return np.ones(count, dtype=bool)
        return self.codes < 0


_ALL_PASS = FilterResult()


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """What a PreFilter plugin may return besides a Status.

    ``node_names`` restricts the candidates to these nodes (kube's ``PreFilterResult.NodeNames``,
    e.g. NodeAffinity with ``matchFields metadata.name``); None means no restriction. Results of
    several plugins are intersected. Nodes left out are reported with kube's
    "node(s) didn't satisfy plugin(s) [...]" reason.
    """

    node_names: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why nodes were rejected in this cycle: the input of PostFilter and of the message.

    ``node_codes`` is aligned with ``nodes`` (all nodes of the cluster, in name order): -1 for a
    node that passed every filter, else an index into ``statuses``. ``prefilter_status`` is set
    when a PreFilter rejected the pod for all nodes (kube's ``PreFilterMsg``).
    """

    nodes: NodeArray
    node_codes: npt.NDArray[np.int32]
    statuses: tuple[Status, ...]
    prefilter_status: Status | None = None

    def rejected(self, *, resolvable_only: bool = False) -> NodeArray:
        """Slots of rejected nodes; with ``resolvable_only``, only those whose status is
        UNSCHEDULABLE (the ones preemption might help), as kube's preemption selects them."""
        failing = self.node_codes >= 0
        if resolvable_only:
            resolvable = np.array([s.code is Code.UNSCHEDULABLE for s in self.statuses] + [False])
            failing &= resolvable[self.node_codes]
        return self.nodes[failing]


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """PostFilter's answer (e.g. preemption's). ``nominated_node``: where the pod will fit once
    ``victims`` (placed pods, by UID) are gone. ``message`` is appended to the FitError message
    (kube: ``" preemption: ..."``; give the text after the separator, e.g.
    ``"preemption: 0/5 nodes are available: ..."``)."""

    status: Status
    nominated_node: str | None = None
    victims: tuple[str, ...] = ()
    message: str = ""


@dataclass(frozen=True, slots=True)
class ReserveResult:
    """Reserve's answer for the chosen node. ``gpu_devices``: device indices the pod gets there
    (empty for non-GPU plugins); ``gpu_milli``: the share of the one device for a fractional
    pod. A failing status aborts the cycle (already-reserved plugins get ``unreserve``)."""

    status: Status = field(default_factory=Status.success)
    gpu_devices: tuple[int, ...] = ()
    gpu_milli: int | None = None


@dataclass(frozen=True, slots=True)
class PermitResult:
    """Permit's answer: success (bind now), WAIT (hold: e.g. the gang is incomplete) or a
    rejection."""

    status: Status = field(default_factory=Status.success)


class PluginArgs(BaseModel):
    """Base of every plugin's ``pluginConfig[].args`` model. Validated once, when the
    configuration is loaded; camelCase keys as in KubeSchedulerConfiguration."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class NoArgs(PluginArgs):
    """For plugins without arguments."""


class CycleContext:
    """Everything one scheduling attempt of one pod shares between extension points.

    ``data`` is kube's CycleState: plugins write what PreFilter/PreScore computed for their own
    Filter/Score, keyed by plugin name. It lives for one cycle only.
    """

    __slots__ = ("pod", "state", "profile", "framework", "data", "skip_filter", "skip_score", "timer")

    def __init__(
        self, pod: PodInfo, state: ClusterState, profile: str, framework: Any = None, timer: CycleTimer = NOT_TIMED
    ) -> None:
        self.pod = pod
        self.state = state
        self.profile = profile
        self.framework = framework
        """The Framework running this cycle (kube's Handle), or None outside one."""
        self.data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        self.timer = timer
        """Times this cycle's extension points and plugins for the engine's observer, if any
        (:mod:`berth.core.observe`)."""


class Plugin:
    """Base of every plugin. Subclasses set ``NAME`` (the one name used in code, configuration,
    metrics labels and messages) and, if configurable, ``Args`` (a :class:`PluginArgs` model).

    The constructor receives validated args; it must not look at any cluster state.
    """

    NAME: ClassVar[str]
    Args: ClassVar[type[PluginArgs]] = NoArgs
    STATE_EXTENSIONS: ClassVar[tuple[type[StateExtension], ...]] = ()
    """Extensions this plugin needs attached to the ClusterState (see :class:`StateExtension`)."""

    def __init__(self, args: PluginArgs | None = None) -> None:
        self.args = args if args is not None else self.Args()

    def bind_framework(self, framework: Any) -> None:
        """Called once by the :class:`~berth.core.scheduler.Framework` that owns this instance,
        right after construction (kube passes its ``framework.Handle`` to the constructor).
        A plugin that needs to run the profile itself — e.g. preemption re-running the filters
        on a what-if state through ``framework.find_feasible`` — keeps this reference; it must
        not keep anything else across cycles. The same framework is also available per cycle as
        :attr:`CycleContext.framework`. Default: ignore it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args!r})"


class PreFilterPlugin(Plugin):
    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        """Run once per cycle before Filter. Return ``(Status.skip(), None)`` to skip this
        plugin's Filter for this pod (it has nothing to check); a rejection rejects the pod on
        every node (the reason becomes kube's PreFilter message); success with a
        :class:`PreFilterResult` may restrict the candidate nodes. Must be idempotent: the
        framework may run it again on a modified state (e.g. during preemption)."""
        return Status.success(), None


class FilterPlugin(Plugin):
    def filter_signature(self, cycle: CycleContext) -> Hashable | None:
        """Opt-in memoisation (see :mod:`berth.core.memo`): a hashable value such that this
        plugin's verdict on a node is a pure function of (signature, that node's state in the
        ClusterState). The framework then re-asks only about nodes that changed since the
        verdict was computed for an equal signature. Called after PreFilter. None (default):
        no memo, every candidate is judged every cycle."""
        return None

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        """Judge every node in ``nodes`` (the candidates that passed the previous filters, in
        name order). Plugins run in configured order and a node leaves the candidates at its
        first rejection, so — as in kube — a node's reasons come from the first plugin that
        rejected it. May read cycle data written by this plugin's PreFilter."""
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    def post_filter(self, cycle: CycleContext, diagnosis: Diagnosis) -> PostFilterResult:
        """Run only when no node passed the filters (e.g. preemption). May evaluate
        hypothetical states through ``Framework.find_feasible`` on a state with pods removed
        and added back (removal and re-adding restore the state and its hash exactly)."""
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        """Run once before Score with the feasible nodes. Return ``Status.skip()`` to skip this
        plugin's Score (it then contributes nothing to any node's total)."""
        return Status.success()


class ScorePlugin(Plugin):
    NORMALIZES_PER_NODE: ClassVar[bool | None] = None
    """True: :meth:`normalize_score` maps each node's raw score on its own (the result for a
    node depends only on its raw score and the cycle's score signature, never on the other
    nodes), so with a signature the framework memoises the normalised, weighted score and
    normalises only changed nodes. None (default): True exactly when ``normalize_score`` is
    not overridden (the identity)."""

    @classmethod
    def normalizes_per_node(cls) -> bool:
        if cls.NORMALIZES_PER_NODE is not None:
            return cls.NORMALIZES_PER_NODE
        return cls.normalize_score is ScorePlugin.normalize_score

    def score_signature(self, cycle: CycleContext) -> Hashable | None:
        """Opt-in memoisation of *raw* scores, with the same contract as
        :meth:`FilterPlugin.filter_signature` (the raw score of a node must depend on nothing
        but the signature and that node's state — not on the other feasible nodes; normalisation
        still sees all of them). Called after PreScore. None (default): no memo."""
        return None

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        """Raw integer scores aligned with ``nodes`` (the feasible nodes, in name order)."""
        raise NotImplementedError

    def normalize_score(
        self, cycle: CycleContext, nodes: NodeArray, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Map raw scores into ``0..MAX_NODE_SCORE`` (identity by default, for plugins whose
        raw scores already are in range). The framework multiplies the result by the plugin's
        configured weight."""
        return scores


class ReservePlugin(Plugin):
    def reserve(self, cycle: CycleContext, node: int) -> ReserveResult:
        """Claim what the pod needs on the chosen node (slot ``node``), e.g. GPU device indices.
        Must not mutate the ClusterState: the caller commits with ``ClusterState.assume``."""
        return ReserveResult()

    def unreserve(self, cycle: CycleContext, node: int) -> None:
        """Undo ``reserve`` when a later Reserve or Permit plugin failed. Idempotent."""


class PermitPlugin(Plugin):
    def permit(self, cycle: CycleContext, node: int) -> PermitResult:
        """Allow, hold (WAIT: the decision's status becomes ``held``) or reject the placement."""
        return PermitResult()


EXTENSION_POINTS: Mapping[str, type[Plugin]] = MappingProxyType(
    {
        "preFilter": PreFilterPlugin,
        "filter": FilterPlugin,
        "postFilter": PostFilterPlugin,
        "preScore": PreScorePlugin,
        "score": ScorePlugin,
        "reserve": ReservePlugin,
        "permit": PermitPlugin,
    }
)
"""Configuration key of each extension point → the base class a plugin must derive from to be
enabled there. Order = execution order within a cycle."""
