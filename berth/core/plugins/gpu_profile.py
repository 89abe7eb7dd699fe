"""Berth's GPU-aware profile: the built-in profile plus part 2's GPU, preemption and locality
plugins, as a configuration document (merged onto ``default_config.yaml`` like any user profile).

``berth simulate`` and the decision service run this when given no ``--config``. It lives in the
core (not in the CLI) so that pure consumers can import it; it becomes redundant once the
built-in profile lists these plugins itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GPU_PROFILE"]

GPU_PROFILE: dict[str, Any] = {
    "apiVersion": "berth.io/v1alpha1",
    "kind": "BerthSchedulerConfiguration",
    "profiles": [{
        "schedulerName": "berth",
        "plugins": {"multiPoint": {"enabled": [
            {"name": "GpuDeviceFit"},
            {"name": "GpuBinPack", "weight": 2},
            {"name": "GpuTopologyFitness", "weight": 1},
            {"name": "ModelCache", "weight": 1},
            {"name": "DataLocality", "weight": 1},
            {"name": "DefaultPreemption"},
        ]}},
    }],
}
"""Plugins and weights: devices must fit (GpuDeviceFit); among fitting nodes, fill partly used
GPUs first (GpuBinPack, 2), prefer compact NUMA/NVLink sets for multi-GPU pods
(GpuTopologyFitness, 1), nodes with the pod's model cached (ModelCache, 1) or its data nearby
(DataLocality, 1); preempt lower-priority pods when nothing fits (DefaultPreemption). The
built-in profile adds GpuFragmentation (10); cost, carbon and GPU availability are opt-in (see
``examples/berth-config.yaml``)."""
