"""Berth's own reasons for device-level misfits, in kube-scheduler's style.

Kubernetes has no wording for these (it counts GPUs, it does not place them on devices), so they
are Berth's: a node-count prefix is added by the FitError histogram, as for kube's own reasons
(``0/5 nodes are available: 2 node(s) had no GPU device with 250 milli free, ...``). Counts of
whole GPUs and MIG slices keep kube's ``Insufficient <resource>`` (see
:func:`berth.core.messages.insufficient`). Golden tests: ``tests/unit/engine_gpu/test_messages.py``.

These belong beside kube's strings in :mod:`berth.core.messages`; they live here until that module
takes them (one import line to change in the GPU plugins).
"""

from __future__ import annotations

__all__ = [
    "PREEMPTION_NOT_ELIGIBLE_NEVER",
    "PREEMPTION_NOT_HELPFUL",
    "PREEMPTION_NO_VICTIMS",
    "gpu_no_nvlink_set",
    "gpu_no_share",
    "gpu_no_socket_set",
    "preemption_message",
]


def gpu_no_share(milli: int, memory_mib: int = 0) -> str:
    """No single device has room for a share (Berth's)."""
    if milli and memory_mib:
        return f"node(s) had no GPU device with {milli} milli and {memory_mib} MiB free"
    if memory_mib:
        return f"node(s) had no GPU device with {memory_mib} MiB free"
    return f"node(s) had no GPU device with {milli} milli free"


def gpu_no_nvlink_set(count: int) -> str:
    """Enough free GPUs, but no set of ``count`` of them all NVLink-connected (Berth's)."""
    return f"node(s) had no NVLink-connected set of {count} free GPUs"


def gpu_no_socket_set(count: int) -> str:
    """Enough free GPUs, but not ``count`` of them on one NUMA node (Berth's)."""
    return f"node(s) had no {count} free GPUs on one NUMA node"


# --- DefaultPreemption (kube's wording: plugins/defaultpreemption, framework/preemption) ---------

PREEMPTION_NO_VICTIMS = "No preemption victims found for incoming pod"
"""kube: a node with no pod of lower priority (``SelectVictimsOnNode``)."""

PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
"""kube: a node whose failure eviction cannot fix (taints, selectors: UnschedulableAndUnresolvable)."""

PREEMPTION_NOT_ELIGIBLE_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
"""kube: the whole PostFilter message for a pod with ``preemptionPolicy: Never``."""


def preemption_message(inner_fit_error: str) -> str:
    """kube's PostFilter message when no node can be freed: ``preemption: `` + the inner
    FitError (``0/3 nodes are available: 3 No preemption victims found for incoming pod.``).
    Appended to the outer FitError with kube's separator, the full text ends in ``..`` exactly as
    kube-scheduler prints it."""
    return f"preemption: {inner_fit_error}"
