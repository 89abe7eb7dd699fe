"""Every user-visible reason string of the scheduling core, worded as kube-scheduler v1.34 words it.

Users grep for these strings and tools parse them (cluster-autoscaler, dashboards), so they must
match kube-scheduler's exactly; ``tests/unit/core/test_core_messages.py`` pins each one. The kube
source of each string is named next to it. Plugins must take their reasons from here, never
format their own.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "AFFINITY_CONFLICT",
    "FitErrorParts",
    "IN_ANOTHER_CELL",
    "DRA_NO_CLAIMS_TO_DEALLOCATE",
    "PREEMPTION_NOT_ELIGIBLE_NEVER",
    "PREEMPTION_NOT_HELPFUL",
    "PREEMPTION_NO_VICTIMS",
    "EXISTING_ANTI_AFFINITY_NOT_MATCH",
    "NODE_AFFINITY_ENFORCED_NOT_MATCH",
    "NODE_AFFINITY_NOT_MATCH",
    "NO_NODES_TO_SCHEDULE",
    "NODE_NAME_NOT_MATCH",
    "NODE_UNSCHEDULABLE",
    "POD_AFFINITY_NOT_MATCH",
    "POD_ANTI_AFFINITY_NOT_MATCH",
    "TOO_MANY_PODS",
    "TOPOLOGY_SPREAD_MISSING_LABEL",
    "TOPOLOGY_SPREAD_NOT_MATCH",
    "SCHEDULING_GATED",
    "UNTOLERATED_TAINT",
    "fit_error",
    "over_more_nodes",
    "parse_fit_error",
    "preemption_verdicts",
    "with_more_preemption",
    "unresolvable_postfilter",
    "with_more_nodes",
    "gang_failed",
    "gang_not_found",
    "gang_waiting",
    "gpu_no_nvlink_set",
    "gpu_no_share",
    "gpu_no_socket_set",
    "insufficient",
    "plugin_not_satisfied",
    "plugins_not_satisfied",
    "plugins_not_satisfied_simultaneously",
    "preemption_failed",
]

# --- framework (pkg/scheduler/framework/types.go, runtime/framework.go, schedule_one.go) ------

NO_NODES_TO_SCHEDULE = "no nodes available to schedule pods"
"""``ErrNoNodesAvailable``: the whole message when the scheduler knows no node at all."""

NO_NODE_AVAILABLE = "0/{total} nodes are available"
"""``NoNodeAvailableMsg``; the head of every FitError message."""

_SEPARATOR = " {}."
"""``SeparatorFormat``: how the reasons (or a PreFilter's message) follow the head."""


def plugins_not_satisfied(plugins: Iterable[str]) -> str:
    """Reason for nodes a PreFilter result left out (``findNodesThatFitPod``), plugin names
    sorted and printed as a Go slice: ``node(s) didn't satisfy plugin(s) [NodeAffinity]``."""
    return f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}]"


def plugin_not_satisfied(plugin: str) -> str:
    """PreFilter message when one PreFilter result alone left no node (``RunPreFilterPlugins``):
    ``node(s) didn't satisfy plugin NodeAffinity``."""
    return f"node(s) didn't satisfy plugin {plugin}"


def plugins_not_satisfied_simultaneously(plugins: Iterable[str]) -> str:
    """PreFilter message when the node sets of several PreFilter results do not intersect
    (``RunPreFilterPlugins``)."""
    return f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}] simultaneously"


def fit_error(
    total_nodes: int, reason_counts: Mapping[str, int], *, prefilter_message: str = "", postfilter_message: str = ""
) -> str:
    """kube's ``FitError.Error()``.

    ``0/<total> nodes are available: <count> <reason>, ... .`` — one ``"<count> <reason>"`` per
    distinct reason (a node contributes each of its reasons once), the entries sorted as strings
    (so ``"10 ..."`` sorts before ``"2 ..."``, as in kube), joined by ``", "``, then ``"."``. When a
    PreFilter rejected the pod its message replaces the per-node histogram. The PostFilter
    message (every rejecting PostFilter plugin's, joined by ``", "``) follows after one space,
    as it is, e.g. ``... 2 node(s) had untolerated taint(s). no new claims to deallocate,
    preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.`` (seen on
    kube-scheduler v1.34.10).
    """
    message = NO_NODE_AVAILABLE.format(total=total_nodes) + ":"
    if prefilter_message:
        message += _SEPARATOR.format(prefilter_message)
    else:
        entries = sorted(f"{count} {reason}" for reason, count in reason_counts.items())
        if entries:
            message += _SEPARATOR.format(", ".join(entries))
    if postfilter_message:
        message += " " + postfilter_message
    return message


def with_more_nodes(
    message: str, total_nodes: int, reason_counts: Mapping[str, int], more_nodes: int, more_reasons: Mapping[str, int]
) -> str:
    """A FitError over ``total_nodes`` (histogram ``reason_counts``) restated over those and
    ``more_nodes`` others that rejected the pod for ``more_reasons`` — the nodes of the decision
    cells a pod was tried in before (kube-scheduler has one cache, so its message counts every
    node). A PostFilter part of ``message`` is kept as it is. A message that is not that
    histogram's FitError (a PreFilter rejection, a gang's) is returned unchanged, except that
    "no nodes" becomes the other nodes' FitError."""
    if not more_nodes:
        return message
    if total_nodes == 0 and message == NO_NODES_TO_SCHEDULE:
        return fit_error(more_nodes, more_reasons)
    base = fit_error(total_nodes, reason_counts)
    # Without a histogram, what follows the count may be a PreFilter's message: leave it.
    if not reason_counts or not message.startswith(base):
        return message
    merged = dict(reason_counts)
    for reason, count in more_reasons.items():
        merged[reason] = merged.get(reason, 0) + count
    return fit_error(total_nodes + more_nodes, merged) + message[len(base) :]


@dataclasses.dataclass(frozen=True)
class FitErrorParts:
    """What :func:`fit_error` was given, read back from its message."""

    total: int
    reasons: Mapping[str, int]
    """The histogram (empty when a PreFilter's message stands in its place)."""
    prefilter_message: str = ""
    postfilter_message: str = ""


_FIT_ERROR_HEAD = re.compile(r"0/(\d+) nodes are available:")
_ENTRY = re.compile(r"(\d+) (\S.*)")
_PREEMPTION_PREFIX = "preemption: "


def _histogram(body: str) -> dict[str, int] | None:
    reasons: dict[str, int] = {}
    for entry in body.split(", "):
        match = _ENTRY.fullmatch(entry)
        if match is None or match.group(2) in reasons:
            return None
        reasons[match.group(2)] = int(match.group(1))
    return reasons


def parse_fit_error(message: str) -> FitErrorParts | None:
    """The parts of a message :func:`fit_error` wrote, or None for any other message (a gang's
    wording, ``no nodes available to schedule pods``). The histogram ends at the first ``". "``
    (or the final ``"."``) after which the rest reads back as a histogram; a body that is not
    one is a PreFilter's message. Every answer is checked by writing the message again: what is
    returned gives back ``message`` exactly."""
    head = _FIT_ERROR_HEAD.match(message)
    if head is None:
        return None
    total = int(head.group(1))
    rest = message[head.end() :]
    if not rest:
        return FitErrorParts(total, {}) if fit_error(total, {}) == message else None
    if not rest.startswith(" "):
        return None
    rest = rest[1:]
    for cut, char in enumerate(rest):
        if char != "." or (cut + 1 < len(rest) and rest[cut + 1] != " "):
            continue
        body, post = rest[:cut], rest[cut + 2 :]
        reasons = _histogram(body)
        if reasons is not None:
            parts = FitErrorParts(total, reasons, postfilter_message=post)
        else:
            parts = FitErrorParts(total, {}, prefilter_message=body, postfilter_message=post)
        if (
            fit_error(total, parts.reasons, prefilter_message=parts.prefilter_message, postfilter_message=post)
            == message
        ):
            return parts
        return None
    return None


def _preemption_inner(postfilter_message: str) -> tuple[int, FitErrorParts] | None:
    """Where DefaultPreemption's inner FitError starts in a PostFilter part, and its parts."""
    at = postfilter_message.find(_PREEMPTION_PREFIX + "0/")
    if at < 0:
        return None
    start = at + len(_PREEMPTION_PREFIX)
    inner = parse_fit_error(postfilter_message[start:])
    if inner is None or inner.prefilter_message or inner.postfilter_message:
        return None
    return start, inner


def _preemption_over_more_nodes(postfilter_message: str, more_nodes: int, more_reasons: Mapping[str, int]) -> str:
    """The PostFilter part with DefaultPreemption's inner FitError over ``more_nodes`` more
    nodes (``more_reasons``); any other part as it is."""
    found = _preemption_inner(postfilter_message)
    if found is None:
        return postfilter_message
    start, inner = found
    reasons = dict(inner.reasons)
    for reason, count in more_reasons.items():
        reasons[reason] = reasons.get(reason, 0) + count
    return postfilter_message[:start] + fit_error(inner.total + more_nodes, reasons)


def preemption_verdicts(message: str) -> tuple[int, dict[str, int]] | None:
    """``(nodes, reason → nodes)`` of DefaultPreemption's inner FitError in a FitError message
    (``preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.``);
    None when the message has none (preemption nominated a node, or was not eligible)."""
    parts = parse_fit_error(message)
    found = _preemption_inner(parts.postfilter_message) if parts is not None else None
    if found is None:
        return None
    return found[1].total, dict(found[1].reasons)


def with_more_preemption(message: str, more_nodes: int, more_reasons: Mapping[str, int]) -> str:
    """A FitError whose preemption part (DefaultPreemption's inner FitError) is restated over
    ``more_nodes`` more nodes, for which preemption said ``more_reasons``: the nodes of the cells
    a pod was tried in before (see :func:`with_more_nodes`, which restates the rest). Any other
    message, or one without that part, is returned unchanged."""
    parts = parse_fit_error(message)
    if parts is None or not more_nodes:
        return message
    post = _preemption_over_more_nodes(parts.postfilter_message, more_nodes, more_reasons)
    if post == parts.postfilter_message:
        return message
    return fit_error(parts.total, parts.reasons, prefilter_message=parts.prefilter_message, postfilter_message=post)


def unresolvable_postfilter(
    post_filter_plugins: Sequence[str], total_nodes: int, *, preemption_never: bool = False
) -> str:
    """The PostFilter part kube's default plugins write when every one of ``total_nodes`` nodes
    rejected the pod as UnschedulableAndUnresolvable (in the profile's PostFilter order;
    plugins other than DynamicResources and DefaultPreemption say nothing here)."""
    said: list[str] = []
    for plugin in post_filter_plugins:
        if plugin == "DynamicResources":
            said.append(DRA_NO_CLAIMS_TO_DEALLOCATE)
        elif plugin == "DefaultPreemption":
            said.append(
                PREEMPTION_NOT_ELIGIBLE_NEVER
                if preemption_never
                else preemption_failed(fit_error(total_nodes, {PREEMPTION_NOT_HELPFUL: total_nodes}))
            )
    return ", ".join(said)


def over_more_nodes(
    message: str, more_nodes: int, more_reasons: Mapping[str, int], *, postfilter_if_none: str = ""
) -> str:
    """A FitError restated over ``more_nodes`` other nodes that each rejected the pod for one
    UnschedulableAndUnresolvable reason (``more_reasons``: reason → nodes): they join the
    head's count and the histogram (a PreFilter's message, which speaks for every node, stays),
    and DefaultPreemption's inner FitError, under ``Preemption is not helpful for scheduling``
    (kube never looks for victims on such a node). ``no nodes available to schedule pods``
    becomes the other nodes' FitError followed by ``postfilter_if_none`` (see
    :func:`unresolvable_postfilter`); any message that is not a FitError stays as it is."""
    if not more_nodes:
        return message
    if message == NO_NODES_TO_SCHEDULE:
        return fit_error(more_nodes, more_reasons, postfilter_message=postfilter_if_none)
    parts = parse_fit_error(message)
    if parts is None:
        return message
    reasons = dict(parts.reasons)
    if not parts.prefilter_message:
        for reason, count in more_reasons.items():
            reasons[reason] = reasons.get(reason, 0) + count
    return fit_error(
        parts.total + more_nodes,
        reasons,
        prefilter_message=parts.prefilter_message,
        postfilter_message=_preemption_over_more_nodes(
            parts.postfilter_message, more_nodes, {PREEMPTION_NOT_HELPFUL: more_nodes}
        ),
    )


# --- SchedulingGates (plugins/schedulinggates; the apiserver's pod strategy) -------------------

SCHEDULING_GATED = "Scheduling is blocked due to non-empty scheduling gates"
"""The ``PodScheduled=False`` condition's message (reason ``SchedulingGated``) of a pod whose
``spec.schedulingGates`` are not all removed; no scheduler tries such a pod."""

# --- NodeUnschedulable (plugins/nodeunschedulable/node_unschedulable.go) ----------------------

NODE_UNSCHEDULABLE = "node(s) were unschedulable"
"""``ErrReasonUnschedulable``."""

# --- NodeName (plugins/nodename/node_name.go) --------------------------------------------------

NODE_NAME_NOT_MATCH = "node(s) didn't match the requested node name"
"""``ErrReason``."""

# --- NodeAffinity (plugins/nodeaffinity/node_affinity.go) --------------------------------------

NODE_AFFINITY_NOT_MATCH = "node(s) didn't match Pod's node affinity/selector"
"""``ErrReasonPod``."""

NODE_AFFINITY_ENFORCED_NOT_MATCH = "node(s) didn't match scheduler-enforced node affinity"
"""``errReasonEnforced``: the plugin's ``addedAffinity`` argument rejected the node."""

AFFINITY_CONFLICT = "pod affinity terms conflict"
"""``errReasonConflict``: every term pins ``metadata.name`` and no name satisfies them all."""

# --- TaintToleration (plugins/tainttoleration/taint_toleration.go) -----------------------------


UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
"""A node with a NoSchedule/NoExecute taint the pod does not tolerate; v1.34 names no taint
(``ErrReasonNotMatch``), so every such node counts under this one reason."""


# --- NodeResourcesFit (plugins/noderesources/fit.go) -------------------------------------------

TOO_MANY_PODS = "Too many pods"
"""The node already runs its allocatable ``pods``."""


def insufficient(resource: str) -> str:
    """``Insufficient <resource name>``, e.g. ``Insufficient nvidia.com/gpu``."""
    return f"Insufficient {resource}"


# --- InterPodAffinity (plugins/interpodaffinity/filtering.go) ----------------------------------

POD_AFFINITY_NOT_MATCH = "node(s) didn't match pod affinity rules"
"""``ErrReasonAffinityRulesNotMatch``."""

POD_ANTI_AFFINITY_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
"""``ErrReasonAntiAffinityRulesNotMatch``."""

EXISTING_ANTI_AFFINITY_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
"""``ErrReasonExistingAntiAffinityRulesNotMatch``."""

# --- PodTopologySpread (plugins/podtopologyspread/filtering.go) --------------------------------

TOPOLOGY_SPREAD_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
"""``ErrReasonConstraintsNotMatch``."""

TOPOLOGY_SPREAD_MISSING_LABEL = TOPOLOGY_SPREAD_NOT_MATCH + " (missing required label)"
"""``ErrReasonNodeLabelNotMatch``: the node lacks a constraint's topology key."""


# --- DefaultPreemption (plugins/defaultpreemption, framework/preemption/preemption.go) -------

PREEMPTION_NO_VICTIMS = "No preemption victims found for incoming pod"
"""A node with no pod of lower priority (``SelectVictimsOnNode``)."""

PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
"""A node whose failure eviction cannot fix (UnschedulableAndUnresolvable: taints, selectors)."""

PREEMPTION_NOT_ELIGIBLE_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
"""The whole PostFilter message for a pod with ``preemptionPolicy: Never``
(``PodEligibleToPreemptOthers``, prefixed ``preemption: `` by the plugin)."""


def preemption_failed(inner_fit_error: str) -> str:
    """PostFilter message when no node can be freed: ``preemption: `` + the inner FitError, e.g.
    ``preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.``
    (it ends the whole message with the inner FitError's period)."""
    return f"preemption: {inner_fit_error}"


# --- DynamicResources (plugins/dynamicresources/dynamicresources.go) -----------------------------

DRA_NO_CLAIMS_TO_DEALLOCATE = "no new claims to deallocate"
"""The DRA plugin's PostFilter message for a pod with no ResourceClaim to free (every Berth pod);
it comes before preemption's in kube's default profile."""


# --- Berth's own: GPU devices (berth/core/plugins/gpu_devices.py) -----------------------------
# Kubernetes counts GPUs, it does not place them on devices, so it has no words for these; they
# follow its "node(s) ..." style so that the FitError histogram reads naturally. Counts of whole
# GPUs and MIG slices keep kube's ``Insufficient <resource>``.


def gpu_no_share(milli: int, memory_mib: int = 0) -> str:
    """No single device has room for a share (``gpu-fraction`` / ``gpu-memory``)."""
    if milli and memory_mib:
        return f"node(s) had no GPU device with {milli} milli and {memory_mib} MiB free"
    if memory_mib:
        return f"node(s) had no GPU device with {memory_mib} MiB free"
    return f"node(s) had no GPU device with {milli} milli free"


def gpu_no_nvlink_set(count: int) -> str:
    """Enough free GPUs, but no ``count`` of them all NVLink-connected (locality ``nvlink``)."""
    return f"node(s) had no NVLink-connected set of {count} free GPUs"


def gpu_no_socket_set(count: int) -> str:
    """Enough free GPUs, but not ``count`` of them on one NUMA node (locality ``same-socket``)."""
    return f"node(s) had no {count} free GPUs on one NUMA node"


# --- Berth's own: cells (berth/cells/foreign_nodes.py) ----------------------------------------

IN_ANOTHER_CELL = "node(s) were in another scheduling cell"
"""A node of another decision cell that would pass kube's node-level filters (NodeUnschedulable,
TaintToleration, NodeAffinity) for a pod Berth itself pins to one cell (a gang member, an
AgentPool replica): the pod was not tried there, so no kube reason applies. Preemption in the
pod's cell cannot free such a node either; it counts under ``Preemption is not helpful for
scheduling``."""


# --- Berth's own: gangs (berth/core/gangs.py) ---------------------------------------------------


def gang_waiting(group: str, pending: int, min_member: int) -> str:
    """A PodGroup with fewer pending members than ``minMember``."""
    return f"pod group {group} has {pending} pending pods, fewer than minMember {min_member}"


def gang_not_found(group: str) -> str:
    """Pods label a PodGroup that does not exist (the decision cell words it the same way)."""
    return f'pod group "{group}" not found'


def gang_failed(group: str, fitted: int, min_member: int) -> str:
    """Given to the members that did fit when their gang as a whole did not."""
    return (
        f"pod group {group} did not fit as a whole: only {fitted} of minMember {min_member} "
        "members fit at once, so none was placed"
    )
