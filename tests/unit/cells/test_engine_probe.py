"""Engine.probe answers "where would these go" without changing anything."""

from __future__ import annotations

import random

from berth.schemas import PodInfo
from berth.schemas.samples import T0, h100_node
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.cells.pool_placement import constrained
from berth.core.config import default_document
from berth.core.engine import Engine


def _pods(seed: int, count: int) -> list[PodInfo]:
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        kind = rng.choice(["whole", "share", "cpu"])
        requests = {"cpu": rng.choice([500, 4000]), "memory": 2**30}
        fraction = None
        if kind == "whole":
            requests["nvidia.com/gpu"] = rng.choice([1, 2, 4])
        elif kind == "share":
            fraction = rng.choice([250, 500])
        pods.append(
            PodInfo(
                uid=f"u{seed}-{i}",
                namespace="ns",
                name=f"p{i}",
                scheduler_name="berth",
                requests=requests,
                gpu_fraction_milli=fraction,
                creation_time=T0,
                tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
            )
        )
    return pods


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(5, 30))
def test_probes_leave_the_snapshot_and_later_placements_unchanged(seed, count):
    plain, probed = (Engine(default_document()) for _ in range(2))
    for engine in (plain, probed):
        for i in range(3):
            engine.upsert_node(h100_node(f"n{i}", spot=i == 0))
    template = _pods(seed + 1, 1)[0]
    for pod in _pods(seed, count):
        before = probed.snapshot_hash()
        nodes = probed.probe([constrained(template, "on-demand")] * 3 + [template] * 2)
        assert probed.snapshot_hash() == before
        assert len(nodes) <= 5
        a, b = plain.schedule(pod), probed.schedule(pod)
        assert [(p.node, p.gpu_devices, p.gpu_milli) for p in a.placements] == [
            (p.node, p.gpu_devices, p.gpu_milli) for p in b.placements
        ]
        assert plain.snapshot_hash() == probed.snapshot_hash()
