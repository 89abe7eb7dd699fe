"""The decision cell over the real placement engine (berth.core), without Kafka."""

from __future__ import annotations

import json
from datetime import timedelta

from berth.decider import CellDecider
from berth.decider.engine import CoreEngine, default_scheduler_document, engine_from_document
from berth.decider.pools import PoolPolicy
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


def _pod(name, *, gpus=0, fraction=None, group=None, priority=0):
    requests = {"cpu": 1000, "memory": 2**30}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    return PodInfo(uid=f"uid-{name}", namespace="ml", name=name, scheduler_name="berth", priority=priority,
                   requests=requests, gpu_fraction_milli=fraction, pod_group=group, creation_time=T0,
                   tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},))


def _run(events, engine=None):
    engine = engine or CoreEngine(default_scheduler_document())
    cell = CellDecider(0, engine)
    out = []
    for offset, event in enumerate(events):
        out.extend(cell.handle(event, InputPosition(topic="t", partition=0, offset=offset)))
    return out


def _placements(decisions):
    return {p.name: (p.node, p.gpu_devices, p.gpu_milli) for d in decisions for c in d.commands
            if isinstance(c, PlacePods) for p in c.placements}


def _events():
    nodes = [NodeObserved(node=h100_node(f"gpu-{i}"), observed_at=T0) for i in range(2)]
    group = PolicyObserved(kind="PodGroup", observed_at=T0,
                           pod_group=PodGroupInfo(namespace="ml", name="train", min_member=2))
    pods = [_pod("whole-4", gpus=4), _pod("frac-a", fraction=250), _pod("frac-b", fraction=500),
            _pod("gang-0", gpus=4, group="train"), _pod("gang-1", gpus=4, group="train"),
            _pod("too-big", gpus=16)]
    return [*nodes, group, *(PodObserved(pod=p, observed_at=T0 + timedelta(seconds=i)) for i, p in enumerate(pods))]


def test_gpu_pods_get_devices_gangs_go_together_and_misfits_get_kube_messages():
    decisions = _run(_events())
    placed = _placements(decisions)
    assert len(placed["whole-4"][1]) == 4
    assert placed["frac-a"][2] == 250 and len(placed["frac-a"][1]) == 1
    assert placed["frac-a"][1] == placed["frac-b"][1] and placed["frac-a"][0] == placed["frac-b"][0]  # packed
    assert {"gang-0", "gang-1"} <= set(placed)
    devices = [d for name in ("whole-4", "gang-0", "gang-1") for d in
               [(placed[name][0], dev) for dev in placed[name][1]]]
    assert len(devices) == len(set(devices)), "a device was given twice"
    [misfit] = [d.record for d in decisions if d.record.subject == "ml/too-big"]
    assert misfit.outcome == "unschedulable"
    assert misfit.message.startswith("0/2 nodes are available: ") and misfit.message.endswith(".")
    assert "nvidia.com/gpu" in misfit.message


def test_replay_from_the_announced_document_gives_identical_decisions():
    pools = {"serving/llama": PoolPolicy(tokens_per_second_per_replica=1000, ttft_slo_ms=2000)}
    first = CoreEngine(default_scheduler_document(), pools)
    again = engine_from_document(first.config_document)
    assert again.config_hash == first.config_hash and again.pools == first.pools
    one = [json.dumps(d.record.model_dump(mode="json"), sort_keys=True) for d in _run(_events(), first)]
    two = [json.dumps(d.record.model_dump(mode="json"), sort_keys=True) for d in _run(_events(), again)]
    assert one == two and len(one) >= 5
