"""The parts of GpuInventory on their own: the contracts the inventory relies on when it composes them."""

from __future__ import annotations

import random

import numpy as np
import pytest
from berth.schemas.cluster import GpuDevice, NodeInfo

from berth.core.plugins.gpu_device_arrays import GpuDeviceArrays
from berth.core.plugins.gpu_inventory import GpuInventory
from berth.core.plugins.gpu_mig import mig_filter, mig_pieces
from berth.core.plugins.gpu_requests import MILLI, GpuAllocation, GpuRequest
from berth.core.plugins.gpu_row_caches import RowCaches
from berth.core.plugins.gpu_shares import ShareIndex
from berth.core.plugins.gpu_topology import DENSE_TABLE_MAX_DEVICES, TopologyCatalog

from .gpu_nodes import dgx


def ring(name: str) -> NodeInfo:
    """4 GPUs in a ring 0-1-2-3-0, each link listed by one side only."""
    return NodeInfo(name=name, gpus=tuple(GpuDevice(index=i, nvlink_peers=((i + 1) % 4,)) for i in range(4)))


def arrays_of(*nodes: NodeInfo) -> GpuDeviceArrays:
    devices = GpuDeviceArrays()
    devices.grow(len(nodes), max(len(node.gpus) for node in nodes))
    for slot, node in enumerate(nodes):
        devices.set_node(slot, node, topo_id=0)
        devices.summarise(slot)
    return devices


def test_device_arrays_apply_and_give_back_exactly_and_clamp_over_commitment() -> None:
    devices = arrays_of(dgx("a"))
    before = devices.copy()
    share = GpuAllocation(devices=(3,), milli=250, memory_mib=10240)
    devices.apply(0, share, 1)
    devices.summarise(0)
    assert devices.describe(0)[3] == {"free_milli": 750, "mem_free": 30720}
    assert int(devices.full_count[0]) == 7 and int(devices.full_mask[0]) == 0b11110111
    assert int(devices.used_milli()[0]) == 250 and int(before.used_milli()[0]) == 0
    devices.apply(0, share, -1)
    devices.summarise(0)
    for name in ("free_milli", "mem_free", "full_mask", "full_count", "node_free"):
        assert np.array_equal(getattr(devices, name), getattr(before, name)), name
    whole = GpuAllocation(devices=(0,), milli=MILLI)
    devices.apply(0, whole, 1)
    devices.apply(0, whole, 1)  # a bound pod's claim on a device already taken
    assert int(devices.free_milli[0, 0]) == 0 and int(devices.mem_free[0, 0]) == 0
    with pytest.raises(KeyError):
        devices.column(0, 9)


def test_device_arrays_grow_keeps_rows_and_reports_a_change() -> None:
    devices = arrays_of(dgx("a"))
    assert devices.grow(1, 8) is False
    assert devices.grow(3, 10) is True
    assert devices.rows == 3 and devices.width == 10
    assert devices.describe(0)[7] == {"free_milli": MILLI, "mem_free": 40960}
    assert int(devices.dev_index[0, 9]) == -1 and int(devices.dev_index[2, 0]) == -1
    devices.clear_node(0)
    assert devices.node_names[0] is None and devices.describe(0) == {} and int(devices.node_total[0]) == 0


def test_topology_catalog_shares_layouts_and_links_both_ways() -> None:
    catalog = TopologyCatalog()
    catalog.widen(8)
    assert catalog.id_of(dgx("a")) == catalog.id_of(dgx("b")) == 0
    assert catalog.id_of(ring("r")) == 1
    assert catalog.topologies[1].links == (0b1010, 0b0101, 0b1010, 0b0101)
    assert catalog.choose(1, 0b1111, 3, "nvlink") is None  # a ring has no 3-clique
    assert catalog.choose(0, 0b11111110, 4, "nvlink") == (4, 5, 6, 7)


def test_dense_tables_agree_with_choosing_node_by_node() -> None:
    dense = TopologyCatalog()
    dense.widen(8)
    sparse = TopologyCatalog()
    sparse.widen(DENSE_TABLE_MAX_DEVICES + 1)  # too wide for tables: answers come from choose()
    for catalog in (dense, sparse):
        catalog.id_of(dgx("a"))
        catalog.id_of(ring("r"))
    masks = np.array([m for m in range(256)] + [m for m in range(16)], dtype=np.int64)
    topo_ids = np.array([0] * 256 + [1] * 16, dtype=np.int64)
    assert dense.table(2, "nvlink") is not None and sparse.table(2, "nvlink") is None
    for count, locality in ((2, "nvlink"), (3, "same-socket"), (4, "any")):
        ok, fit = dense.lookup(topo_ids, masks, count, locality)
        ok_sparse, fit_sparse = sparse.lookup(topo_ids, masks, count, locality)
        assert np.array_equal(ok, ok_sparse) and np.array_equal(fit, fit_sparse), (count, locality)
        assert ok.any() and not ok.all()


def test_share_index_kept_incrementally_matches_a_fresh_index() -> None:
    rng = random.Random(3)
    devices = arrays_of(*(dgx(f"n{i}", memory=16384 + 8192 * (i % 3)) for i in range(40)))
    shares = ShareIndex(devices)
    shapes = [GpuRequest(milli=300), GpuRequest(memory_mib=12000), GpuRequest(milli=100, memory_mib=20000)]
    for shape in shapes:
        shares.summary(shape)
    for step in range(60):
        # Up to 30 rows changed between uses: both the few-rows and the many-rows update run.
        changed = rng.sample(range(40), rng.choice((1, 5, 30)))
        for row in changed:
            col = rng.randrange(8)
            devices.apply(row, GpuAllocation(devices=(col,), milli=rng.choice((100, 400)), memory_mib=2048), 1)
            devices.summarise(row)
            shares.touch(row)
        fresh = ShareIndex(devices)
        for shape in shapes:
            kept_col, kept_free = shares.choice(shape)
            fresh_col, fresh_free = fresh.choice(shape)
            assert np.array_equal(kept_col, fresh_col) and np.array_equal(kept_free, fresh_free), (step, shape)
            rows = np.array(changed[:4], dtype=np.intp)
            assert np.array_equal(shares.device(shape, rows), fresh_col[rows]), (step, shape)


def test_share_need_of_a_memory_only_share_is_its_part_of_each_device() -> None:
    devices = arrays_of(dgx("small", memory=10000), dgx("big", memory=40000))
    milli, memory = ShareIndex(devices).need(GpuRequest(memory_mib=10000))
    assert int(milli[0, 0]) == MILLI and int(milli[1, 0]) == 250 and int(memory[1, 0]) == 10000
    allocation = ShareIndex(devices).at(1, GpuRequest(memory_mib=10000), 2)
    assert allocation == GpuAllocation(devices=(2,), milli=250, memory_mib=10000)


def test_row_caches_recompute_only_the_rows_touched() -> None:
    devices = arrays_of(dgx("a"), dgx("b"), dgx("c"))
    caches = RowCaches(devices)
    asked: list[list[int]] = []

    def free_devices(rows: np.ndarray) -> np.ndarray:
        asked.append(rows.tolist())
        return devices.full_count[rows].copy()

    assert caches.per_slot(("free",), free_devices).tolist() == [8, 8, 8]
    devices.apply(1, GpuAllocation(devices=(0, 1), milli=MILLI), 1)
    devices.summarise(1)
    devices.apply(2, GpuAllocation(devices=(0,), milli=MILLI), 1)
    devices.summarise(2)
    caches.touch(1)  # row 2 is not reported: its cached value stays as it was
    assert caches.per_slot(("free",), free_devices).tolist() == [8, 6, 8]
    assert asked == [[0, 1, 2], [1]]
    assert caches.per_slot(("free",), free_devices).tolist() == [8, 6, 8] and len(asked) == 2


def test_mig_slices_fill_the_fullest_device_first_and_agree_with_the_filter() -> None:
    devices = arrays_of(dgx("a", mig={6: {"1g.5gb": 7}, 7: {"1g.5gb": 7}}), dgx("b"))
    devices.apply(0, GpuAllocation(devices=(7,), mig=((7, "1g.5gb", 5),)), 1)
    request = GpuRequest(mig=(("1g.5gb", 3),))
    assert mig_pieces(devices, 0, request, range(8)) == ((6, "1g.5gb", 1), (7, "1g.5gb", 2))
    assert mig_pieces(devices, 0, request, [7]) is None
    fits, failures = mig_filter(devices, request, np.array([0, 1], dtype=np.intp))
    assert fits.tolist() == [True, False] and [mask.tolist() for _, mask in failures] == [[False, True]]


def test_the_inventory_agrees_with_its_parts_after_random_placements() -> None:
    rng = random.Random(11)
    nodes = [dgx(f"n{i:03}") if i % 5 else ring(f"n{i:03}") for i in range(80)]
    inventory = GpuInventory.of(nodes)
    requests = [
        GpuRequest(whole=2, locality="nvlink"),
        GpuRequest(whole=3, locality="same-socket"),
        GpuRequest(milli=400),
        GpuRequest(whole=1),
    ]
    all_rows = np.arange(80)
    for step in range(150):
        row = rng.randrange(80)
        allocation = inventory.choose(row, rng.choice(requests))
        if allocation is not None and allocation.devices:
            inventory.allocate(row, allocation)
        devices = inventory.devices
        for request in requests[:2]:
            # 80 rows take the per-slot cached path; the parts answer directly.
            fits, _ = inventory.filter(request, all_rows)
            direct_ok, direct_fit = inventory.topologies.lookup(
                devices.topo_id, devices.full_mask, request.whole, request.locality
            )
            assert np.array_equal(fits, direct_ok & (devices.full_count >= request.whole)), step
            assert np.array_equal(inventory.whole_fitness(request, all_rows), direct_fit), step
        share_fits, _ = inventory.filter(requests[2])
        assert np.array_equal(share_fits, inventory.shares.fits(requests[2]).any(axis=1)), step
    copy = inventory.copy()
    row, col = (int(i) for i in np.argwhere(inventory.devices.free_milli == MILLI)[0])
    copy.allocate(row, GpuAllocation(devices=(int(inventory.devices.dev_index[row, col]),), milli=MILLI))
    assert not np.array_equal(copy.devices.free_milli, inventory.devices.free_milli)
    assert np.array_equal(copy.shares.choice(requests[2])[0], ShareIndex(copy.devices).choice(requests[2])[0])
