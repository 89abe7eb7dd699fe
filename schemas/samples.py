"""One realistic, valid example of every event type.

Used by the demo, the tests and ``schemas/examples/`` (payloads written by an earlier version of
the contract, which every later version must still accept). Deterministic: fixed times and ids.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from .cluster import (
    Affinity,
    GpuDevice,
    NodeAffinity,
    NodeInfo,
    NodeObserved,
    NodeRemoved,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodDeleted,
    PodInfo,
    PodObserved,
    Taint,
    Toleration,
)
from .policy import PodGroupInfo, PolicyObserved, PolicyRemoved
from .scheduler import (
    CellTick,
    CommandResult,
    CordonNode,
    DeadLetter,
    DecisionRecord,
    EvictPod,
    ForeignNodeObserved,
    ForeignNodeRemoved,
    HandOverPod,
    InputPosition,
    NodeVerdict,
    PlacePods,
    PodPlacement,
    PodRouted,
    ScalePool,
    SchedulerConfigAnnounced,
)
from .signals import GpuDeviceSample, GpuTelemetry, QueueLagObserved, SpotInterruptionNotice
from .state import DeviceInventory, NodeInventory, PodAllocation, PoolLagState

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def h100_node(name: str = "gpu-node-0", *, spot: bool = False, zone: str = "zone-a") -> NodeInfo:
    """An 8×H100 node with two NVLink islands of four GPUs, one per NUMA node."""
    devices = tuple(
        GpuDevice(
            index=i,
            model="NVIDIA-H100-80GB-HBM3",
            memory_mib=81559,
            numa_node=i // 4,
            nvlink_peers=tuple(p for p in range(4 * (i // 4), 4 * (i // 4) + 4) if p != i),
        )
        for i in range(8)
    )
    return NodeInfo(
        name=name,
        labels={
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": "spot" if spot else "on-demand",
        },
        taints=(Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),),
        capacity={"cpu": 96000, "memory": 1024 * 2**30, "pods": 110, "nvidia.com/gpu": 8},
        allocatable={"cpu": 95000, "memory": 1000 * 2**30, "pods": 110, "nvidia.com/gpu": 8},
        gpus=devices,
        capacity_type="spot" if spot else "on-demand",
        price_per_hour=31.5 if not spot else 12.0,
        carbon_intensity=210.0,
        zone=zone,
    )


def training_pod(name: str = "train-0", *, gpus: int = 4, uid: str | None = None) -> PodInfo:
    return PodInfo(
        uid=uid or f"uid-{name}",
        namespace="ml",
        name=name,
        labels={"app": "trainer", "scheduling.x-k8s.io/pod-group": "train"},
        scheduler_name="berth",
        priority=1000,
        priority_class_name="training",
        requests={"cpu": 16000, "memory": 128 * 2**30, "nvidia.com/gpu": gpus},
        gpu_locality="nvlink",
        affinity=Affinity(
            node_affinity=NodeAffinity(
                required=(
                    NodeSelectorTerm(
                        match_expressions=(
                            NodeSelectorRequirement(
                                key="nvidia.com/gpu.product", operator="In", values=("NVIDIA-H100-80GB-HBM3",)
                            ),
                        )
                    ),
                )
            )
        ),
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
        pod_group="train",
        creation_time=T0,
    )


def fractional_pod(name: str = "embed-0", *, milli: int = 250) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="serving",
        name=name,
        scheduler_name="berth",
        annotations={"gpu-fraction": f"{milli / 1000:g}"},
        requests={"cpu": 2000, "memory": 8 * 2**30},
        gpu_fraction_milli=milli,
        gpu_memory_mib=10240,
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"),),
        creation_time=T0,
    )


def one_of_each() -> list[Any]:
    """One valid event of every type in the contract, in topic order."""
    pod = training_pod()
    placement = PodPlacement(
        pod_uid=pod.uid, namespace=pod.namespace, name=pod.name, node="gpu-node-0", gpu_devices=(0, 1, 2, 3)
    )
    return [
        PodObserved(pod=pod, resource_version="101", observed_at=T0),
        PodDeleted(uid="uid-old", namespace="ml", name="old", node_name="gpu-node-0", observed_at=T0),
        NodeObserved(node=h100_node(), resource_version="7", observed_at=T0),
        NodeRemoved(name="gpu-node-9", observed_at=T0),
        PolicyObserved(
            kind="PodGroup", pod_group=PodGroupInfo(namespace="ml", name="train", min_member=4), observed_at=T0
        ),
        PolicyRemoved(kind="PodGroup", namespace="ml", name="old-group", observed_at=T0),
        GpuTelemetry(
            node="gpu-node-0",
            devices=(
                GpuDeviceSample(index=0, utilization_pct=87.5, memory_used_mib=61440),
                GpuDeviceSample(index=1, utilization_pct=0.0, memory_used_mib=0, healthy=False, xid_errors=79),
            ),
            sampled_at=T0,
        ),
        QueueLagObserved(
            pool="llama-70b",
            namespace="serving",
            tokens_in_queue=120_000,
            token_rate=4000.0,
            active_sessions=310,
            mean_context_tokens=2048,
            observed_ttft_ms=850.0,
            ready_replicas=3,
            observed_at=T0,
        ),
        SpotInterruptionNotice(node="gpu-node-3", issued_at=T0, deadline=T0 + timedelta(seconds=120), provider="aws"),
        NodeInventory(
            node=h100_node(),
            cell=1,
            allocations=(
                PodAllocation(pod_uid=pod.uid, pod=pod.key, requests=dict(pod.requests), gpu_devices=(0, 1, 2, 3)),
            ),
            devices=tuple(DeviceInventory(index=i, free_milli=0 if i < 4 else 1000) for i in range(8)),
            requested=dict(pod.requests),
            updated_at=T0,
        ),
        PoolLagState(
            pool="llama-70b",
            namespace="serving",
            tokens_in_queue=120_000,
            token_rate=4000.0,
            smoothed_token_rate=3600.0,
            expected_ttft_ms=33333.3,
            active_sessions=310,
            ready_replicas=3,
            observations=12,
            updated_at=T0,
        ),
        PlacePods(command_id="cmd-1", decision_id="dec-1", issued_at=T0, placements=(placement,), pod_group="train"),
        ScalePool(
            command_id="cmd-2",
            decision_id="dec-2",
            issued_at=T0,
            pool="llama-70b",
            namespace="serving",
            replicas=5,
            previous_replicas=3,
            reason="expected TTFT 30000ms > SLO 2000ms",
        ),
        CordonNode(
            command_id="cmd-3", decision_id="dec-3", issued_at=T0, node="gpu-node-3", reason="spot interruption in 120s"
        ),
        EvictPod(
            command_id="cmd-4",
            decision_id="dec-4",
            issued_at=T0,
            pod_uid="uid-x",
            namespace="ml",
            name="x",
            node="gpu-node-3",
            reason="preempted by ml/train-0",
        ),
        CommandResult(
            command_id="cmd-1",
            decision_id="dec-1",
            command_type=PlacePods.model_fields["type"].default,
            status="applied",
            target="ml/train-0",
            applied_at=T0,
        ),
        DecisionRecord(
            decision_id="dec-1",
            cell="cell-0",
            input=InputPosition(topic="berth.cluster.pods.v1", partition=0, offset=41),
            subject="ml/train-0",
            outcome="placed",
            node="gpu-node-0",
            gpu_devices=(0, 1, 2, 3),
            verdicts=(
                NodeVerdict(node="gpu-node-0", scores={"GpuBinPacking": 80}, total=80),
                NodeVerdict(node="cpu-node-0", reason="Insufficient nvidia.com/gpu"),
            ),
            config_version="v1",
            snapshot_hash="a" * 64,
            config_hash="b" * 64,
            decision_hash="c" * 64,
            event_time=T0,
        ),
        SchedulerConfigAnnounced(
            config_hash="b" * 64, config_version="v1", document="{}", cell="cell-0", announced_at=T0
        ),
        HandOverPod(
            command_id="cmd-5",
            decision_id="dec-5",
            cell=0,
            pod_uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            hop=0,
            issued_at=T0,
        ),
        PodRouted(pod=pod, tried=(0, 1), cells=2, hop=1, round_started_at=T0, observed_at=T0),
        CellTick(issued_at=T0),
        ForeignNodeObserved(
            name="gpu-node-7",
            cell=1,
            labels={"berth.io/node-pool": "h100"},
            taints=(Taint(key="nvidia.com/gpu", effect="NoSchedule"),),
            observed_at=T0,
        ),
        ForeignNodeRemoved(name="gpu-node-7", observed_at=T0),
        DeadLetter(
            source_topic="berth.inference.queue.v1",
            source_partition=0,
            source_offset=7,
            consumer="token-lag",
            reason="io.berth.inference.queue-lag.v1: tokens_in_queue: Input should be greater than or equal to 0",
            value_b64="e30=",
            failed_at=T0,
        ),
    ]
