"""GPU placement helpers of the decision core (pure functions over numpy arrays).

The public surface is re-exported from :mod:`berth.core.gpu.fragmentation`.
"""

from berth.core.gpu.fragmentation import (
    BERTH_MEASURE,
    FGD_MEASURE,
    INFEASIBLE,
    MILLI_PER_GPU,
    DeviceChoice,
    Measure,
    PlacementScores,
    PodRequest,
    TargetWorkload,
    best_device_choice,
    device_increase_batch,
    exclusive_devices,
    fragmentation_batch,
    model_matches,
    node_fragmentation,
    score_placements,
    weight_scale,
    weighted_fragmentation_batch,
    weighted_fragmentation_one,
)

__all__ = [
    "BERTH_MEASURE",
    "FGD_MEASURE",
    "INFEASIBLE",
    "MILLI_PER_GPU",
    "DeviceChoice",
    "Measure",
    "PlacementScores",
    "PodRequest",
    "TargetWorkload",
    "best_device_choice",
    "device_increase_batch",
    "exclusive_devices",
    "fragmentation_batch",
    "model_matches",
    "node_fragmentation",
    "score_placements",
    "weight_scale",
    "weighted_fragmentation_batch",
    "weighted_fragmentation_one",
]
