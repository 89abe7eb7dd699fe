"""The DeschedulerPolicy file: both wire forms, normalised into one, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from berth.schemas.descheduler import (
    GPU_DEFRAGMENTATION,
    LOW_NODE_UTILIZATION,
    NODE_TAINTS,
    PolicyError,
    PriorityThreshold,
    parse_policy,
)

SEED = Path("/work/shared/seeds/002_22330f6872796fac.txt")

SEED_POLICY = """
apiVersion: "descheduler/v1alpha1"
kind: "DeschedulerPolicy"
metadata:
  name: "descheduler-policy"
spec:
  evictLocalStoragePods: true
  evictSystemCriticalPods: false
  strategies:
    RemovePodsViolatingInterPodAntiAffinity:
      enabled: true
    LowNodeUtilization:
      enabled: true
      params:
        nodeResourceUtilizationThresholds:
          thresholds:
            cpu: 20
            memory: 20
            pods: 20
          targetThresholds:
            cpu: 50
            memory: 50
            pods: 50
"""


def _seed_text() -> str:
    # The seed's own text when it is on this machine, else the copy above (the same document).
    if not SEED.exists():
        return SEED_POLICY
    text = SEED.read_text()
    start = text.index('apiVersion: "descheduler/v1alpha1"')
    return text[start : text.index("EOF", start)]


def test_the_seeds_v1alpha1_policy_with_its_spec_wrapper() -> None:
    policy = parse_policy(yaml.safe_load(_seed_text()))
    assert [s.name for s in policy.strategies] == ["RemovePodsViolatingInterPodAntiAffinity", LOW_NODE_UTILIZATION]
    low = policy.strategies[1]
    assert low.thresholds == {"cpu": 20, "memory": 20, "pods": 20}
    assert low.target_thresholds == {"cpu": 50, "memory": 50, "pods": 50}
    assert all(
        s.evictor.evict_local_storage_pods and not s.evictor.evict_system_critical_pods for s in policy.strategies
    )
    assert low.profile == "strategy-LowNodeUtilization-profile"


def test_v1alpha1_per_strategy_params_and_limits() -> None:
    policy = parse_policy(
        {
            "apiVersion": "descheduler/v1alpha1",
            "kind": "DeschedulerPolicy",
            "maxNoOfPodsToEvictPerNode": 2,
            "maxNoOfPodsToEvictPerNamespace": 3,
            "strategies": {
                "RemovePodsViolatingNodeTaints": {
                    "enabled": True,
                    "params": {"thresholdPriority": 100, "excludedTaints": ["dedicated"], "nodeFit": True},
                },
                "RemovePodsViolatingNodeAffinity": {"enabled": False},
            },
        }
    )
    assert [s.name for s in policy.strategies] == [NODE_TAINTS]
    taints = policy.strategies[0]
    assert taints.evictor.priority_threshold == PriorityThreshold(value=100)
    assert taints.evictor.node_fit
    assert taints.excluded_taints == ("dedicated",)
    assert (policy.max_pods_to_evict_per_node, policy.max_pods_to_evict_per_namespace) == (2, 3)


def test_v1alpha2_profiles_normalise_to_the_same_form() -> None:
    document = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "maxNoOfPodsToEvictPerNode": 1,
        "maxNoOfPodsToEvictTotal": 5,
        "profiles": [
            {
                "name": "default",
                "pluginConfig": [
                    {
                        "name": "DefaultEvictor",
                        "args": {"evictLocalStoragePods": True, "priorityThreshold": {"name": "high"}},
                    },
                    {
                        "name": "LowNodeUtilization",
                        "args": {
                            "thresholds": {"cpu": 20, "nvidia.com/gpu": 10},
                            "targetThresholds": {"cpu": 60, "nvidia.com/gpu": 80},
                            "evictableNamespaces": {"exclude": ["kube-system"]},
                        },
                    },
                    {"name": "GpuDefragmentation", "args": {"maxPodGpus": 2, "nodesToFree": 1}},
                ],
                "plugins": {
                    "deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]},
                    "balance": {"enabled": ["LowNodeUtilization", "GpuDefragmentation"]},
                },
            }
        ],
    }
    policy = parse_policy(document)
    assert [s.name for s in policy.strategies] == [NODE_TAINTS, LOW_NODE_UTILIZATION, GPU_DEFRAGMENTATION]
    assert all(s.evictor.priority_threshold == PriorityThreshold(name="high") for s in policy.strategies)
    low = policy.strategies[1]
    assert low.thresholds["nvidia.com/gpu"] == 10 and low.target_thresholds["nvidia.com/gpu"] == 80
    assert low.namespaces is not None and not low.namespaces.admits("kube-system") and low.namespaces.admits("ml")
    assert policy.strategies[2].gpu.max_pod_gpus == 2 and policy.strategies[2].gpu.nodes_to_free == 1
    assert (policy.max_pods_to_evict_per_node, policy.max_pods_to_evict_total) == (1, 5)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy", "strategies": {"PodLifeTime": {}}},
            "'strategies.PodLifeTime': not a strategy Berth implements",
        ),
        (
            {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy", "evictLocalStoragePod": True},
            "evictLocalStoragePod: unknown field",
        ),
        (
            {"apiVersion": "descheduler/v1alpha3", "kind": "DeschedulerPolicy"},
            "apiVersion: expected descheduler/v1alpha1 or descheduler/v1alpha2",
        ),
        ({"apiVersion": "descheduler/v1alpha2", "kind": "Policy"}, "kind: expected DeschedulerPolicy"),
        (
            {
                "apiVersion": "descheduler/v1alpha2",
                "kind": "DeschedulerPolicy",
                "profiles": [
                    {
                        "name": "p",
                        "pluginConfig": [
                            {
                                "name": "LowNodeUtilization",
                                "args": {"thresholds": {"cpu": 70}, "targetThresholds": {"cpu": 50}},
                            }
                        ],
                        "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}},
                    }
                ],
            },
            "thresholds.cpu (70) must not exceed targetThresholds.cpu (50)",
        ),
        (
            {
                "apiVersion": "descheduler/v1alpha2",
                "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "plugins": {"balance": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}],
            },
            "RemovePodsViolatingNodeTaints is not a balance plugin",
        ),
        (
            {
                "apiVersion": "descheduler/v1alpha2",
                "kind": "DeschedulerPolicy",
                "profiles": [
                    {"name": "p", "pluginConfig": [{"name": "DefaultEvictor", "args": {"evictLocalStorage": True}}]}
                ],
            },
            "profiles[0].pluginConfig[0].args.evictLocalStorage: unknown field",
        ),
        (
            {
                "apiVersion": "descheduler/v1alpha1",
                "kind": "DeschedulerPolicy",
                "strategies": {
                    "RemovePodsViolatingNodeAffinity": {
                        "enabled": True,
                        "params": {"nodeAffinityType": ["preferredDuringSchedulingIgnoredDuringExecution"]},
                    }
                },
            },
            "is not supported (only requiredDuringSchedulingIgnoredDuringExecution)",
        ),
        (
            {
                "apiVersion": "descheduler/v1alpha1",
                "kind": "DeschedulerPolicy",
                "strategies": {
                    "LowNodeUtilization": {
                        "enabled": True,
                        "params": {"nodeResourceUtilizationThresholds": {"thresholds": {"cpu": 10}}},
                    }
                },
            },
            "needs both thresholds and targetThresholds",
        ),
    ],
)
def test_documents_berth_cannot_run_are_refused_naming_the_field(document: dict, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(document)
    assert message in str(caught.value)
