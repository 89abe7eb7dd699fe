"""The decision cell over the real engine (berth.core.engine.Engine), without Kafka."""

from __future__ import annotations

import json
from datetime import timedelta

from berth.schemas import (
    InputPosition,
    NodeObserved,
    PlacePods,
    PodGroupInfo,
    PodInfo,
    PodObserved,
    PolicyObserved,
)
from berth.schemas.samples import T0, h100_node

from berth.cells import Cell, CellConfig, PoolPolicy
from berth.core.config import default_document
from berth.core.engine import Engine


def _pod(name, *, gpus=0, fraction=None, group=None, priority=0):
    requests = {"cpu": 1000, "memory": 2**30}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        priority=priority,
        requests=requests,
        gpu_fraction_milli=fraction,
        pod_group=group,
        creation_time=T0,
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
    )


def _run(events, config=None):
    cell = Cell(0, config or CellConfig())
    out = []
    for offset, event in enumerate(events):
        out.extend(cell.handle(event, InputPosition(topic="t", partition=0, offset=offset)))
    return out


def _placements(decisions):
    return {
        p.name: (p.node, p.gpu_devices, p.gpu_milli)
        for d in decisions
        for c in d.commands
        if isinstance(c, PlacePods)
        for p in c.placements
    }


def _events():
    nodes = [NodeObserved(node=h100_node(f"gpu-{i}"), observed_at=T0) for i in range(2)]
    group = PolicyObserved(
        kind="PodGroup", observed_at=T0, pod_group=PodGroupInfo(namespace="ml", name="train", min_member=2)
    )
    pods = [
        _pod("whole-4", gpus=4),
        _pod("frac-a", fraction=250),
        _pod("frac-b", fraction=500),
        _pod("gang-0", gpus=4, group="train"),
        _pod("gang-1", gpus=4, group="train"),
        _pod("too-big", gpus=16),
    ]
    return [*nodes, group, *(PodObserved(pod=p, observed_at=T0 + timedelta(seconds=i)) for i, p in enumerate(pods))]


def test_gpu_pods_get_devices_gangs_go_together_and_misfits_get_kube_messages():
    decisions = _run(_events())
    placed = _placements(decisions)
    assert len(placed["whole-4"][1]) == 4
    assert placed["frac-a"][2] == 250 and len(placed["frac-a"][1]) == 1
    assert placed["frac-a"][1] == placed["frac-b"][1] and placed["frac-a"][0] == placed["frac-b"][0]  # packed
    assert {"gang-0", "gang-1"} <= set(placed)
    devices = [
        d for name in ("whole-4", "gang-0", "gang-1") for d in [(placed[name][0], dev) for dev in placed[name][1]]
    ]
    assert len(devices) == len(set(devices)), "a device was given twice"
    [misfit] = [d.record for d in decisions if d.record.subject == "ml/too-big"]
    assert misfit.outcome == "unschedulable"
    assert misfit.message.startswith("0/2 nodes are available: ") and misfit.message.endswith(".")
    assert "nvidia.com/gpu" in misfit.message


def test_replay_from_the_announced_document_gives_identical_decisions():
    pools = {"serving/llama": PoolPolicy(tokens_per_second_per_replica=1000, ttft_slo_ms=2000)}
    first = CellConfig(default_document(), pools)
    again = CellConfig.from_document(first.document)
    assert again.hash == first.hash and again.pools == first.pools
    one = [json.dumps(d.record.model_dump(mode="json"), sort_keys=True) for d in _run(_events(), first)]
    two = [json.dumps(d.record.model_dump(mode="json"), sort_keys=True) for d in _run(_events(), again)]
    assert one == two and len(one) >= 5


def _bound(name, node, devices, *, priority=0, group=None):
    pod = _pod(name, gpus=len(devices), priority=priority, group=group)
    return PodObserved(
        pod=pod.model_copy(update={"node_name": node, "gpu_devices": devices, "phase": "Running"}), observed_at=T0
    )


def test_a_victims_late_bound_echo_does_not_give_its_gpus_to_a_second_preemptor():
    # Regression: a victim still reported bound (eviction under way) came back into the
    # snapshot, and the next preemptor was given the same GPUs, "evicting" the same victims.
    events = [
        NodeObserved(node=h100_node("gpu-0"), observed_at=T0),
        _bound("low-a", "gpu-0", (0, 1, 2, 3)),
        _bound("low-b", "gpu-0", (4, 5, 6, 7)),
        PodObserved(pod=_pod("urgent-1", gpus=4, priority=1000), observed_at=T0),
    ]
    cell = Cell(0, CellConfig())
    decisions = []
    for offset, event in enumerate(events):
        decisions.extend(cell.handle(event, InputPosition(topic="t", partition=0, offset=offset)))
    [command] = [c for d in decisions for c in d.commands]
    assert len(command.victims) == 1 and command.victim_uids == (f"uid-{command.victims[0].split('/')[1]}",)
    victim = command.victims[0].split("/")[1]
    devices = (0, 1, 2, 3) if victim == "low-a" else (4, 5, 6, 7)
    later = [_bound(victim, "gpu-0", devices), PodObserved(pod=_pod("urgent-2", gpus=4, priority=1000), observed_at=T0)]
    second = []
    for offset, event in enumerate(later, start=len(events)):
        second.extend(cell.handle(event, InputPosition(topic="t", partition=0, offset=offset)))
    assert [c for d in second for c in d.commands] == []  # nothing given twice while it is evicted
    from berth.schemas import PodDeleted

    gone = cell.handle(
        PodDeleted(uid=f"uid-{victim}", namespace="ml", name=victim, observed_at=T0),
        InputPosition(topic="t", partition=0, offset=len(events) + len(later)),
    )
    [placement] = [c for d in gone for c in d.commands]
    assert set(placement.victims).isdisjoint(command.victims), "the same victim was preempted twice"
    assert set(placement.placements[0].gpu_devices).isdisjoint(command.placements[0].gpu_devices)


def test_gang_members_already_running_count_towards_min_member():
    events = [
        NodeObserved(node=h100_node("gpu-0"), observed_at=T0),
        PolicyObserved(
            kind="PodGroup", observed_at=T0, pod_group=PodGroupInfo(namespace="ml", name="train", min_member=3)
        ),
        _bound("g-0", "gpu-0", (0, 1), group="train"),
        _bound("g-1", "gpu-0", (2, 3), group="train"),
        PodObserved(pod=_pod("g-2", gpus=2, group="train"), observed_at=T0),
    ]
    placed = _placements(_run(events))
    assert "g-2" in placed and len(placed["g-2"][1]) == 2


def test_what_victims_hold_beyond_the_preemptors_share_is_not_given_away_before_they_are_gone():
    # Regression: a victim holding GPUs 0-7 was evicted for a 1-GPU preemptor; before the
    # eviction happened, quarter-GPU pods were packed onto the victim's other GPUs (overcommit).
    from berth.schemas import PodDeleted

    cell = Cell(0, CellConfig())
    events = [
        NodeObserved(node=h100_node("gpu-0"), observed_at=T0),
        _bound("low", "gpu-0", tuple(range(8))),
        PodObserved(pod=_pod("urgent", gpus=1, priority=1000), observed_at=T0),
        PodObserved(pod=_pod("quarter", fraction=250), observed_at=T0),
    ]
    decisions = []
    for offset, event in enumerate(events):
        decisions.extend(cell.handle(event, InputPosition(topic="t", partition=0, offset=offset)))
    placed = _placements(decisions)
    assert "urgent" in placed and "quarter" not in placed
    after = cell.handle(
        PodDeleted(uid="uid-low", namespace="ml", name="low", observed_at=T0),
        InputPosition(topic="t", partition=0, offset=len(events)),
    )
    quarter = _placements(after)["quarter"]
    assert quarter[0] == "gpu-0" and quarter[1] != placed["urgent"][1]


def test_namespace_events_feed_namespace_selectors_of_pod_affinity():
    """A Namespace's labels reach the engine through the policies topic: a pod whose required
    affinity selects namespaces by label follows the pods of a namespace only once its labels are
    known, and not after the namespace is gone."""
    from berth.schemas import LabelSelector, NamespaceInfo, PodAffinity, PodAffinityTerm, PolicyRemoved
    from berth.schemas.cluster import Affinity

    engine = Engine(default_document())
    for name, zone in (("gpu-0", "zone-a"), ("gpu-1", "zone-b")):
        engine.upsert_node(h100_node(name, zone=zone))
    db = _pod("db").model_copy(
        update={"namespace": "prod", "uid": "uid-db", "labels": {"app": "db"}, "node_name": "gpu-1"}
    )
    engine.upsert_bound_pod(db)
    term = PodAffinityTerm(
        label_selector=LabelSelector(match_labels={"app": "db"}),
        topology_key="topology.kubernetes.io/zone",
        namespace_selector=LabelSelector(match_labels={"tier": "prod"}),
    )
    follower = _pod("follower").model_copy(update={"affinity": Affinity(pod_affinity=PodAffinity(required=(term,)))})
    refused = engine.schedule(follower)
    assert refused.placements == () and "didn't match pod affinity rules" in refused.message, refused.message
    engine.upsert_policy(
        PolicyObserved(
            kind="Namespace",
            observed_at=T0,
            namespace_info=NamespaceInfo(name="prod", labels={"kubernetes.io/metadata.name": "prod", "tier": "prod"}),
        )
    )
    [placement] = engine.schedule(follower).placements
    assert placement.node == "gpu-1"
    engine.remove_policy("Namespace", "", "prod")
    second = follower.model_copy(update={"uid": "uid-follower-2", "name": "follower-2"})
    assert engine.schedule(second).placements == ()
    assert PolicyRemoved(kind="Namespace", name="prod", observed_at=T0).partition_key == "Namespace//prod"
