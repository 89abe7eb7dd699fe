"""GPU nodes shared by the tests of the device inventory and its parts."""

from __future__ import annotations

from berth.schemas.cluster import GpuDevice, MigSlice, NodeInfo


def dgx(
    name: str = "a",
    *,
    unhealthy: tuple[int, ...] = (),
    mig: dict[int, dict[str, int]] | None = None,
    memory: int = 40960,
) -> NodeInfo:
    """8 GPUs: two NVLink islands of 4 (0-3 on NUMA 0, 4-7 on NUMA 1)."""
    mig = mig or {}
    return NodeInfo(
        name=name,
        gpus=tuple(
            GpuDevice(
                index=i,
                numa_node=i // 4,
                memory_mib=memory,
                model="A100",
                nvlink_peers=tuple(j for j in range(4 * (i // 4), 4 * (i // 4) + 4) if j != i),
                healthy=i not in unhealthy,
                mig=tuple(MigSlice(profile=p, count=c) for p, c in sorted(mig.get(i, {}).items())),
            )
            for i in range(8)
        ),
    )
