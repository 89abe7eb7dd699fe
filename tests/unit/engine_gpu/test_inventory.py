"""GPU device accounting: whole GPUs, shares, MIG, locality, health; table-driven."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from berth.schemas.cluster import GpuDevice, NodeInfo, PodInfo

from berth.core.plugins.gpu_inventory import GpuInventory
from berth.core.plugins.gpu_requests import GpuAllocation, GpuRequest

from .gpu_nodes import dgx

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def mesh(name: str = "m") -> NodeInfo:
    """4 GPUs, a ring 0-1-2-3-0 (no diagonals), all on NUMA 0 except 3."""
    ring = {0: (1, 3), 1: (0, 2), 2: (1, 3), 3: (0, 2)}
    return NodeInfo(
        name=name, gpus=tuple(GpuDevice(index=i, numa_node=1 if i == 3 else 0, nvlink_peers=ring[i]) for i in range(4))
    )


def holding(inv: GpuInventory, row: int, *allocations: GpuAllocation) -> GpuInventory:
    for allocation in allocations:
        inv.allocate(row, allocation)
    return inv


WHOLE = [
    # (name, node, held devices, request, expected devices or None)
    ("one GPU takes device 0", dgx(), (), GpuRequest(whole=1), (0,)),
    ("two GPUs stay in one NVLink island", dgx(), (), GpuRequest(whole=2), (0, 1)),
    ("four GPUs fill one island", dgx(), (), GpuRequest(whole=4), (0, 1, 2, 3)),
    ("eight GPUs take the node", dgx(), (), GpuRequest(whole=8), tuple(range(8))),
    ("any locality may span islands", dgx(), (0, 1, 4, 5), GpuRequest(whole=3), (2, 3, 6)),
    ("nvlink needs an all-linked set", dgx(), (0, 1, 4, 5), GpuRequest(whole=3, locality="nvlink"), None),
    ("nvlink finds the free island", dgx(), (0, 1), GpuRequest(whole=4, locality="nvlink"), (4, 5, 6, 7)),
    ("same-socket stays on one NUMA node", dgx(), (0,), GpuRequest(whole=4, locality="same-socket"), (4, 5, 6, 7)),
    ("same-socket cannot span", dgx(), (0, 4), GpuRequest(whole=4, locality="same-socket"), None),
    ("unhealthy devices are never used", dgx(unhealthy=(0, 1)), (), GpuRequest(whole=2), (2, 3)),
    ("MIG devices are not whole GPUs", dgx(mig={0: {"1g.5gb": 7}}), (), GpuRequest(whole=4), (4, 5, 6, 7)),
    ("a single GPU keeps the best block free", dgx(), (0, 1, 2), GpuRequest(whole=1), (3,)),
    ("ring: a linked pair on one NUMA node", mesh(), (), GpuRequest(whole=2, locality="nvlink"), (0, 1)),
    ("ring: no 3-clique exists", mesh(), (), GpuRequest(whole=3, locality="nvlink"), None),
    ("too few free devices", dgx(), tuple(range(7)), GpuRequest(whole=2), None),
]


@pytest.mark.parametrize(("node", "held", "request_", "expected"), [w[1:] for w in WHOLE], ids=[w[0] for w in WHOLE])
def test_whole_gpu_choice(
    node: NodeInfo, held: tuple[int, ...], request_: GpuRequest, expected: tuple[int, ...] | None
) -> None:
    inv = GpuInventory.of([node])
    if held:
        inv.allocate(0, GpuAllocation(devices=held, milli=1000))
    chosen = inv.choose(0, request_)
    assert (chosen.devices if chosen else None) == expected
    fits, _ = inv.filter(request_)
    assert bool(fits[0]) == (expected is not None)


def test_shares_pack_onto_the_most_used_device_that_fits() -> None:
    inv = GpuInventory.of([dgx()])
    quarter = GpuRequest(milli=250)
    placed = []
    for _ in range(5):
        allocation = inv.choose(0, quarter)
        assert allocation is not None
        inv.allocate(0, allocation)
        placed.append(allocation.devices[0])
    assert placed == [0, 0, 0, 0, 1]  # device 0 fills up before device 1 is touched
    half = inv.choose(0, GpuRequest(milli=500))
    assert half is not None and half.devices == (1,)  # the partly used device, not a fresh one
    assert inv.devices.describe(0)[0] == {"free_milli": 0, "mem_free": 0}


def test_share_memory_is_checked_per_device() -> None:
    inv = GpuInventory.of([dgx(memory=16384)])
    inv.allocate(0, GpuAllocation(devices=(0,), milli=100, memory_mib=12000))
    allocation = inv.choose(0, GpuRequest(milli=100, memory_mib=8192))
    assert allocation is not None and allocation.devices == (1,)
    assert not inv.filter(GpuRequest(milli=100, memory_mib=20000))[0][0]


def test_a_device_with_a_share_is_not_a_whole_gpu() -> None:
    inv = GpuInventory.of([dgx()])
    inv.allocate(0, GpuAllocation(devices=(0,), milli=250, memory_mib=10240))
    assert int(inv.devices.full_count[0]) == 7
    assert inv.choose(0, GpuRequest(whole=4, locality="nvlink")).devices == (4, 5, 6, 7)  # type: ignore[union-attr]  # not None in this test's setup


def test_mig_slices_fill_the_fullest_device_first() -> None:
    inv = GpuInventory.of([dgx(mig={6: {"1g.5gb": 7}, 7: {"1g.5gb": 7}})])
    first = inv.choose(0, GpuRequest(mig=(("1g.5gb", 2),)))
    assert first == GpuAllocation(devices=(6,), mig=((6, "1g.5gb", 2),))
    inv.allocate(0, first)
    spill = inv.choose(0, GpuRequest(mig=(("1g.5gb", 6),)))
    assert spill == GpuAllocation(devices=(6, 7), mig=((6, "1g.5gb", 5), (7, "1g.5gb", 1)))
    fits, failures = inv.filter(GpuRequest(mig=(("3g.20gb", 1),)))
    assert not fits[0] and failures[0][0].detail == ("nvidia.com/mig-3g.20gb",)


def test_allocate_and_release_are_inverse() -> None:
    inv = GpuInventory.of([dgx(mig={7: {"1g.5gb": 7}}), dgx("b")])
    before = inv.copy()
    allocations = [
        (0, inv.choose(0, GpuRequest(whole=3))),
        (1, inv.choose(1, GpuRequest(milli=300))),
        (0, inv.choose(0, GpuRequest(mig=(("1g.5gb", 3),)))),
    ]
    for row, allocation in allocations:
        assert allocation is not None
        inv.allocate(row, allocation)
    assert not np.array_equal(inv.devices.free_milli, before.devices.free_milli)
    for row, allocation in reversed(allocations):
        assert allocation is not None
        inv.release(row, allocation)
    for name in ("free_milli", "mem_free", "full_mask", "full_count"):
        assert np.array_equal(getattr(inv.devices, name), getattr(before.devices, name)), name
    assert all(np.array_equal(inv.devices.mig_free[p], before.devices.mig_free[p]) for p in inv.devices.mig_free)


def _pod(name: str, devices: tuple[int, ...] = (), **requests: int) -> PodInfo:
    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        node_name="a",
        gpu_devices=devices,
        requests={k.replace("_", "/").replace("nvidia/", "nvidia.com/"): v for k, v in requests.items()},
        creation_time=T0,
    )


def test_bound_pods_use_recorded_devices_or_get_deterministic_ones() -> None:
    inv = GpuInventory.of([dgx()])
    recorded = inv.allocation_of_bound(0, _pod("p", (5, 6), nvidia_gpu=2))
    assert recorded.devices == (5, 6)
    inv.allocate(0, recorded)
    assigned = inv.allocation_of_bound(0, _pod("q", nvidia_gpu=2))
    # 4 and 7 are what island 4-7 has left; taking them keeps island 0-3 whole for a 4-GPU job.
    assert assigned.devices == (4, 7)


def test_failures_explain_count_versus_locality() -> None:
    inv = GpuInventory.of([dgx("a"), dgx("b")])
    inv.allocate(0, GpuAllocation(devices=(0, 4), milli=1000))
    inv.allocate(1, GpuAllocation(devices=tuple(range(6)), milli=1000))
    fits, failures = inv.filter(GpuRequest(whole=4, locality="nvlink"))
    assert list(fits) == [False, False]
    by_kind = {misfit.kind: list(mask) for misfit, mask in failures}
    assert by_kind == {"count": [False, True], "nvlink": [True, False]}


def test_inventories_are_independent_copies() -> None:
    inv = GpuInventory.of([dgx()])
    copy = inv.copy()
    copy.allocate(0, GpuAllocation(devices=(0,), milli=1000))
    assert int(inv.devices.full_count[0]) == 8 and int(copy.devices.full_count[0]) == 7


def test_incremental_share_answers_match_a_fresh_computation() -> None:
    import random

    rng = random.Random(7)
    inv = GpuInventory.of([dgx(f"n{i}") for i in range(6)])
    shapes = [GpuRequest(milli=250), GpuRequest(milli=500), GpuRequest(milli=100, memory_mib=30000)]
    held: list[tuple[int, GpuAllocation]] = []
    for step in range(300):
        request = rng.choice(shapes + [GpuRequest(whole=rng.choice((1, 2)))])
        row = rng.randrange(6)
        if held and rng.random() < 0.3:
            inv.release(*held.pop(rng.randrange(len(held))))
        else:
            allocation = inv.choose(row, request)
            if allocation is not None:
                inv.allocate(row, allocation)
                held.append((row, allocation))
        for shape in shapes:
            fresh = inv.shares.fits(shape)
            expected = np.where(
                fresh.any(axis=1), np.argmin(np.where(fresh, inv.devices.free_milli, 10**9), axis=1), -1
            )
            assert np.array_equal(inv.shares.device(shape), expected), step
            best_col, best_free = inv.shares.choice(shape)
            assert np.array_equal(
                best_free, np.where(expected >= 0, inv.devices.free_milli[np.arange(6), np.maximum(expected, 0)], 0)
            )
            assert np.array_equal(inv.filter(shape)[0], fresh.any(axis=1)), step


def test_a_recorded_mig_claim_replays_to_the_slices_that_were_chosen() -> None:
    inv = GpuInventory.of([dgx(mig={6: {"1g.5gb": 7}, 7: {"1g.5gb": 7}})])
    inv.allocate(0, GpuAllocation(devices=(7,), mig=((7, "1g.5gb", 5),)))
    request = GpuRequest(mig=(("1g.5gb", 3),))
    chosen = inv.choose(0, request)
    assert chosen == GpuAllocation(devices=(6, 7), mig=((6, "1g.5gb", 1), (7, "1g.5gb", 2)))
    bound = PodInfo(
        uid="m", namespace="default", name="m", node_name="a", requests={"nvidia.com/mig-1g.5gb": 3}, creation_time=T0
    )
    assert inv.allocation_of_bound(0, bound, chosen.devices) == chosen
