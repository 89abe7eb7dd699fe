"""The pools file of a workload: each scaled AgentPool's policy, for the decision and token-lag
services (``--pools``). What a replica pod of a pool looks like is the product's
(:mod:`berth.kube.replicas`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from berth.cells.pools import merge_cluster_spec

from .model import Workload, WorkloadError


def pool_policies(workload: Workload) -> dict[str, Any]:
    """The pools file (``{pools: {NAMESPACE/NAME: {...}}}``) that the decision and token-lag
    services read: each scaled AgentPool's spec as :class:`berth.cells.pools.PoolPolicy`
    validates it (keys the policy does not know are left out; the replica template stays, so
    the decision cell can size replicas before the first one exists). Pools without
    ``tokensPerSecondPerReplica`` and ``ttftSloMs`` are not scaled and are left out."""
    pools: dict[str, Any] = {}
    for pool in sorted(workload.pools, key=lambda p: p.key):
        if "tokensPerSecondPerReplica" not in pool.spec or "ttftSloMs" not in pool.spec:
            continue
        try:
            policy = merge_cluster_spec(None, pool.spec)
        except ValueError as exc:
            raise WorkloadError(f"AgentPool {pool.key}: {exc}") from exc
        pools[pool.key] = policy.model_dump(mode="json", exclude_unset=True)
    return {"pools": pools}


def write_pools_file(workload: Workload, path: Path) -> None:
    """Write :func:`pool_policies` of ``workload`` as YAML to ``path`` (the services' ``--pools``)."""
    path.write_text(yaml.safe_dump(pool_policies(workload), sort_keys=False))
