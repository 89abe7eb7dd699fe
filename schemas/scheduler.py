"""What the scheduler says and what came of it: commands, results, decision records.

Every command names the decision that produced it (``decision_id``) and has a ``command_id``
derived from that decision, so that re-emitting a decision after a crash yields the same ids and
the binder can drop the duplicate.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Protocol

from pydantic import Field

from ._base import DnsLabel, FrozenModel, IntMap, Milli, NonNegativeInt, StrMap, UtcDatetime
from .cluster import AboutOnePod, PodInfo, Taint


class InputPosition(FrozenModel):
    """Where an input record sat in Kafka: the key of idempotent audit writes."""

    topic: str
    partition: NonNegativeInt
    offset: NonNegativeInt


class PodPlacement(FrozenModel):
    pod_uid: str = Field(min_length=1)
    namespace: DnsLabel
    name: DnsLabel
    node: DnsLabel
    gpu_devices: tuple[NonNegativeInt, ...] = ()
    gpu_milli: Milli | None = None
    """Share of the single device for a fractional pod; None for whole devices."""


class NamesOnePod:
    """Kafka key and CloudEvents subject of a command about one pod (its ``pod_uid``,
    ``namespace`` and ``name`` fields)."""

    if TYPE_CHECKING:  # the fields of the command model this is mixed into (none of its own)
        pod_uid: str
        namespace: str
        name: str

    @property
    def partition_key(self) -> str:
        return self.pod_uid

    @property
    def subject(self) -> str:
        return f"{self.namespace}/{self.name}"


class _Command(FrozenModel):
    command_id: str = Field(min_length=1)
    decision_id: str = Field(min_length=1)
    cell: NonNegativeInt = 0
    """The decision cell that issued it; the binder returns the result to that cell."""
    issued_at: UtcDatetime


class PlacePods(_Command):
    """Bind pods to nodes. A gang is one command: the binder applies all or reports failure."""

    type: Literal["io.berth.scheduler.place-pods.v1"] = "io.berth.scheduler.place-pods.v1"
    placements: tuple[PodPlacement, ...] = Field(min_length=1)
    pod_group: str | None = None
    victims: tuple[str, ...] = ()
    """Pods (``namespace/name``) preempted to make room; evicted before binding."""
    victim_uids: tuple[str, ...] = ()
    """The victims' UIDs, aligned with ``victims``: the eviction's precondition."""

    @property
    def partition_key(self) -> str:
        return self.placements[0].pod_uid

    @property
    def subject(self) -> str:
        first = self.placements[0]
        return f"{first.namespace}/{first.name}"


class ScalePool(_Command):
    """Set an inference pool's replica count (the scale subresource in Kubernetes)."""

    type: Literal["io.berth.scheduler.scale-pool.v1"] = "io.berth.scheduler.scale-pool.v1"
    pool: DnsLabel
    namespace: DnsLabel = "default"
    replicas: NonNegativeInt
    previous_replicas: NonNegativeInt
    reason: str = ""

    @property
    def partition_key(self) -> str:
        return self.pool

    @property
    def subject(self) -> str:
        return f"{self.namespace}/{self.pool}"


class CordonNode(_Command):
    type: Literal["io.berth.scheduler.cordon-node.v1"] = "io.berth.scheduler.cordon-node.v1"
    node: DnsLabel
    reason: str = ""

    @property
    def partition_key(self) -> str:
        return self.node

    @property
    def subject(self) -> str:
        return self.node


class EvictPod(NamesOnePod, _Command):
    schema_minor: ClassVar[int] = 1

    type: Literal["io.berth.scheduler.evict-pod.v1"] = "io.berth.scheduler.evict-pod.v1"
    pod_uid: str = Field(min_length=1)
    namespace: DnsLabel
    name: DnsLabel
    node: str | None = None
    reason: str = ""
    keep_with_local_storage: bool = False
    """Leave the pod if it has local storage (an ``emptyDir`` or ``hostPath`` volume): a
    descheduler policy's ``evictLocalStoragePods: false``. The binder checks the pod it reads from
    the cluster (the cells do not see volumes) and reports a conflict instead of evicting."""
    keep_with_pvc: bool = False
    """Leave the pod if it mounts a PersistentVolumeClaim: a policy's ``ignorePvcPods: true``."""


class RejectedNodes(FrozenModel):
    """How many nodes rejected a pod, and why: kube-scheduler's FitError histogram (a node counts
    once for each reason it gave)."""

    nodes: NonNegativeInt = 0
    reasons: IntMap = Field(default_factory=dict)
    preemption: IntMap | None = None
    """What kube's preemption (DefaultPreemption's PostFilter) said of the same nodes, reason →
    nodes (e.g. ``Preemption is not helpful for scheduling``), when it found no node to free
    there; None when unknown (it found one, the pod never preempts, or a part of the nodes did
    not say)."""

    def plus(self, other: RejectedNodes | None) -> RejectedNodes:
        if other is None:
            return self
        preemption = None
        if self.preemption is not None and other.preemption is not None:
            preemption = _summed(self.preemption, other.preemption)
        return RejectedNodes(
            nodes=self.nodes + other.nodes, reasons=_summed(self.reasons, other.reasons), preemption=preemption
        )


def _summed(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    total = dict(a)
    for key, count in b.items():
        total[key] = total.get(key, 0) + count
    return dict(sorted(total.items()))


class PodRouted(AboutOnePod, FrozenModel):
    """A pending pod the inventory routes to a cell that may pass it on (decision inputs only).

    A pod not pinned to a cell (:func:`berth.schemas.cells.pinned_cell`) may land in any cell,
    so cells are tried in turn: ``tried`` are the cells of the pod's current round, this cell
    last, out of ``cells``. A cell that cannot place the pod while some cell is untried gives it
    up (decision ``handed-over`` and a :class:`HandOverPod`), and the inventory routes it to the
    next one; the last cell of a round reports it unschedulable and keeps it, and starts a new
    round when it fails there again after resting through ``HANDOVER_RETRY_TICKS``
    (:mod:`berth.cells.handovers`) :class:`CellTick` s: capacity may have been freed in a cell it
    cannot see. ``hop`` counts the pod's routings: a hand-over naming an older hop is stale.
    Later changes of the pod reach the cell holding it as plain :class:`PodObserved`.
    """

    type: Literal["io.berth.scheduler.pod-routed.v1"] = "io.berth.scheduler.pod-routed.v1"
    pod: PodInfo
    tried: tuple[NonNegativeInt, ...] = Field(min_length=1)
    cells: int = Field(ge=1)
    hop: NonNegativeInt = 0
    route_partition: NonNegativeInt = 0
    """The partition of ``berth.cluster.pods.v1`` the pod's events arrive on: where the router
    keeps the pod's route, so a hand-over must go to this partition of the hand-over topic."""
    elsewhere: RejectedNodes | None = None
    """Why the nodes of the cells tried before in this round rejected the pod: the last cell's
    unschedulable message counts them too, as kube-scheduler's counts every node."""
    round_started_at: UtcDatetime
    """When the pod's current round began (for the record: cells count ticks, not time)."""
    observed_at: UtcDatetime

    @property
    def round_complete(self) -> bool:
        """Every cell has had its try in this round."""
        return len(set(self.tried)) >= self.cells


class CellTick(FrozenModel):
    """The passing of time, sent to every cell at a fixed interval (decision inputs only).

    A cell folds it like any input, so what waits for time there — a pod resting in the last
    cell of its round until it may go round again — ends even when nothing else happens in the
    cell (kube-scheduler flushes its unschedulable pods on a timer too). Deterministic on
    replay: the ticks are in the cell's log."""

    type: Literal["io.berth.scheduler.cell-tick.v1"] = "io.berth.scheduler.cell-tick.v1"
    issued_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return "tick"

    @property
    def subject(self) -> str:
        return "tick"


class ForeignNodeObserved(FrozenModel):
    """A node of another cell, as much of it as a cell needs to word an unschedulable message
    over the whole cluster (decision inputs only; the inventory sends it to every cell but the
    node's own).

    kube-scheduler's FitError counts every node of the cluster. A pod pinned to one cell
    (:func:`berth.schemas.cells.pinned_cell`) is decided against that cell's nodes only, so the
    cell states why the other cells' nodes would reject it too, from these node-level facts: the
    cordon (NodeUnschedulable), the taints (TaintToleration) and the labels (NodeAffinity). Sent
    when ``cell``, ``labels``, ``taints`` or ``unschedulable`` changed (never for a status-only
    change), in the order of the node's own events; the latest one of a name replaces the
    earlier. A cell that receives one naming itself as ``cell``, or that observes the node
    itself, does not count it as foreign.
    """

    type: Literal["io.berth.scheduler.foreign-node-observed.v1"] = "io.berth.scheduler.foreign-node-observed.v1"
    name: DnsLabel
    cell: NonNegativeInt
    """The cell the node belongs to (:func:`berth.schemas.cells.cell_of_node`)."""
    labels: StrMap = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    """``spec.unschedulable`` as observed (a cordon by its own cell is not included)."""
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.name

    @property
    def subject(self) -> str:
        return self.name


class ForeignNodeRemoved(FrozenModel):
    """A node of another cell is gone (decision inputs only): stop counting it (see
    :class:`ForeignNodeObserved`)."""

    type: Literal["io.berth.scheduler.foreign-node-removed.v1"] = "io.berth.scheduler.foreign-node-removed.v1"
    name: DnsLabel
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.name

    @property
    def subject(self) -> str:
        return self.name


class HandOverPod(NamesOnePod, FrozenModel):
    """A cell gives up a pod it cannot place, for the inventory to route it to the next cell.

    Issued with the cell's ``handed-over`` decision (same ``decision_id``); the cell forgets the
    pod at once and ignores it until it is routed there again. The inventory acts on it only if
    the pod is still pending, still routed to ``cell`` and still at ``hop``.
    """

    type: Literal["io.berth.scheduler.hand-over-pod.v1"] = "io.berth.scheduler.hand-over-pod.v1"
    command_id: str = Field(min_length=1)
    decision_id: str = Field(min_length=1)
    cell: NonNegativeInt
    pod_uid: str = Field(min_length=1)
    namespace: DnsLabel
    name: DnsLabel
    hop: NonNegativeInt
    route_partition: NonNegativeInt = 0
    """The :class:`PodRouted`'s: the partition of ``berth.scheduler.handovers.v1`` to publish to."""
    rejected: RejectedNodes | None = None
    """Why this cell's nodes, and those of the round's cells before it, rejected the pod (handed
    on as the next cell's ``elsewhere``; only this cell's when its round was complete)."""
    issued_at: UtcDatetime


CommandStatus = Literal["applied", "conflict", "failed"]


class IssuedCommand(Protocol):
    """What every command carries that its result repeats."""

    command_id: str
    decision_id: str

    @property
    def type(self) -> str: ...

    @property
    def subject(self) -> str: ...


class CommandResult(FrozenModel):
    """What the binder did with one command. ``conflict``: the cluster changed under it
    (pod gone, already bound elsewhere, UID mismatch); ``failed``: it could not apply it."""

    type: Literal["io.berth.scheduler.command-result.v1"] = "io.berth.scheduler.command-result.v1"
    command_id: str = Field(min_length=1)
    decision_id: str = Field(min_length=1)
    command_type: str
    status: CommandStatus
    reason: str = ""
    attempts: Annotated[int, Field(ge=1)] = 1
    target: str = ""
    applied_at: UtcDatetime

    @classmethod
    def of(
        cls, command: IssuedCommand, status: CommandStatus, at: datetime, *, reason: str = "", attempts: int = 1
    ) -> CommandResult:
        """The result of ``command`` (its ids, type and subject): ``status`` at ``at``."""
        return cls(
            command_id=command.command_id,
            decision_id=command.decision_id,
            command_type=command.type,
            status=status,
            reason=reason,
            attempts=attempts,
            target=command.subject,
            applied_at=at,
        )

    @property
    def partition_key(self) -> str:
        return self.command_id

    @property
    def subject(self) -> str:
        return self.target or self.command_id

    @property
    def concerns_issuing_cell(self) -> bool:
        """Whether the issuing cell must read this result in its input log.

        Only a command that did not apply changes the cell's state (its pods are queued again,
        its victims restored). An applied command is confirmed by the cluster itself, as
        kube-scheduler's assumed pods are: the pods bound (or evicted) reach the cell as pod
        events, so copying the result too would cost a record per pod and tell it nothing.
        """
        return self.status != "applied"


class NodeVerdict(FrozenModel):
    """One node's part in a decision: why it was filtered out, or its score per plugin."""

    node: str
    reason: str | None = None
    """The filter message that excluded the node; None when the node was feasible."""
    scores: IntMap = Field(default_factory=dict)
    total: int | None = None


DecisionOutcome = Literal[
    "placed",
    "unschedulable",
    "preempting",
    "scaled",
    "held",
    "cordoned",
    "evicting",
    "spot-suspended",
    "spot-resumed",
    "handed-over",
]
"""``handed-over``: a pod that does not fit in this cell, given to the next cell (:class:`PodRouted`);
``evicting``: pods leave a node about to be reclaimed (spot); ``spot-suspended`` / ``spot-resumed``:
a pool stops or starts using spot nodes after too many interruptions / a quiet window."""


class DecisionRecord(FrozenModel):
    """One decision of the core with everything needed to explain and replay it."""

    type: Literal["io.berth.scheduler.decision.v1"] = "io.berth.scheduler.decision.v1"
    decision_id: str = Field(min_length=1)
    cell: str
    input: InputPosition
    subject: str
    """``namespace/name`` of the pod (or pool, or node) decided about."""
    outcome: DecisionOutcome
    node: str | None = None
    gpu_devices: tuple[NonNegativeInt, ...] = ()
    message: str = ""
    verdicts: tuple[NodeVerdict, ...] = ()
    pods: tuple[str, ...] = ()
    """``namespace/name`` of the pods a gang decision is about (its subject is the pod group);
    empty when the subject is the pod itself. Whoever reports on pods (the binder's
    ``FailedScheduling``) reports on each of these."""
    config_version: str
    snapshot_hash: str
    config_hash: str
    decision_hash: str
    event_time: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.cell

    @property
    def cloudevent_extensions(self) -> dict[str, str]:
        """CloudEvents extension attributes of the record's envelope (Kafka header ``ce_outcome``):
        a consumer that acts on some outcomes only (the binder's unschedulable reports) passes
        over the others without parsing their bodies, which carry every node's verdict."""
        return {"outcome": self.outcome}


class SchedulerConfigAnnounced(FrozenModel):
    """A decision cell's configuration document, published before its first decision under it,
    so that the audit store can replay decisions from Postgres alone."""

    type: Literal["io.berth.scheduler.config.v1"] = "io.berth.scheduler.config.v1"
    config_hash: str = Field(min_length=1)
    config_version: str
    document: str
    """The configuration as canonical JSON (what ``config_hash`` hashes)."""
    cell: str
    announced_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.cell

    @property
    def subject(self) -> str:
        return self.config_hash


class DeadLetter(FrozenModel):
    """A record some consumer could not accept, kept whole with the reason.

    ``value`` and ``key`` are the original bytes as latin-1 text would mangle them, so they are
    carried base64-encoded; headers likewise.
    """

    type: Literal["io.berth.deadletter.v1"] = "io.berth.deadletter.v1"
    source_topic: str
    source_partition: NonNegativeInt
    source_offset: NonNegativeInt
    consumer: str
    reason: str
    key_b64: str | None = None
    value_b64: str = ""
    headers_b64: StrMap = Field(default_factory=dict)
    failed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return f"{self.source_topic}/{self.source_partition}"

    @property
    def subject(self) -> str:
        return f"{self.source_topic}/{self.source_partition}/{self.source_offset}"


Command = Annotated[PlacePods | ScalePool | CordonNode | EvictPod, Field(discriminator="type")]
ResultEvent = Annotated[CommandResult, Field(discriminator="type")]
DecisionEvent = Annotated[DecisionRecord | SchedulerConfigAnnounced, Field(discriminator="type")]
DeadLetterEvent = Annotated[DeadLetter, Field(discriminator="type")]
HandOverEvent = Annotated[HandOverPod, Field(discriminator="type")]
