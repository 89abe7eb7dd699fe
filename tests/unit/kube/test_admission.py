"""LimitRanger and ResourceQuota admission: defaults, bounds and kube-apiserver's exact wording."""

from __future__ import annotations

import pytest
from berth.schemas.policy import LimitRangeInfo, LimitRangeItem, ResourceQuotaInfo

from berth.core.admission import (
    ContainerResources,
    PodResources,
    QuotaLedger,
    apply_limit_ranges,
    limit_range_message,
    quota_usage,
)

GiB = 2**30


def resources(*containers: dict[str, dict[str, int]]) -> PodResources:
    return PodResources(
        tuple(ContainerResources(f"c{i}", c.get("requests", {}), c.get("limits", {})) for i, c in enumerate(containers))
    )


LIMITS = LimitRangeInfo(
    namespace="ml",
    name="ml-limits",
    limits=(
        LimitRangeItem(
            type="Container",
            default={"cpu": 4000, "memory": 8 * GiB},
            default_request={"cpu": 2000, "memory": 4 * GiB},
            min={"memory": GiB},
            max={"cpu": 32000},
        ),
        LimitRangeItem(type="Pod", max={"memory": 20 * GiB}),
    ),
)


@pytest.mark.parametrize(
    ("pod", "violations"),
    [
        (resources({}), []),
        (
            resources({"requests": {"memory": GiB // 2}}),
            ["minimum memory usage per Container is 1Gi, but request is 512Mi"],
        ),
        (resources({"limits": {"cpu": 64000}}), ["maximum cpu usage per Container is 32, but limit is 64"]),
        (
            resources({}, {}, {}),  # three defaulted 8Gi limits
            ["maximum memory usage per Pod is 20Gi, but limit is 24Gi"],
        ),
        (
            resources({"requests": {"cpu": 100}, "limits": {"cpu": 64000, "memory": 100}}),
            [
                "minimum memory usage per Container is 1Gi, but limit is 100",
                "maximum cpu usage per Container is 32, but limit is 64",
            ],
        ),
    ],
)
def test_limit_range_bounds(pod: PodResources, violations: list[str]) -> None:
    _, found = apply_limit_ranges(pod, [LIMITS])
    assert found == violations


def test_limit_range_defaults_fill_only_what_is_missing() -> None:
    defaulted, _ = apply_limit_ranges(resources({"requests": {"cpu": 500}}), [LIMITS])
    container = defaulted.containers[0]
    assert container.requests == {"cpu": 500, "memory": 4 * GiB}
    assert container.limits == {"cpu": 4000, "memory": 8 * GiB}
    assert defaulted.effective_requests() == {"cpu": 500, "memory": 4 * GiB}


def test_pod_max_needs_a_limit_as_in_kubernetes() -> None:
    gpu_cap = LimitRangeInfo(
        namespace="ml", name="gpu-cap", limits=(LimitRangeItem(type="Pod", max={"nvidia.com/gpu": 16}),)
    )
    assert apply_limit_ranges(resources({"requests": {"cpu": 1}}), [gpu_cap])[1] == [
        "maximum nvidia.com/gpu usage per Pod is 16.  No limit is specified"
    ]


def test_several_violations_are_bracketed_as_kube_aggregates_them() -> None:
    assert limit_range_message(["a", "b"]) == "[a, b]"
    assert limit_range_message(["a"]) == "a"


def gpu_pod(gpus: int, cpu: int = 1000) -> PodResources:
    return resources(
        {
            "requests": {"cpu": cpu, "memory": GiB, "nvidia.com/gpu": gpus},
            "limits": {"cpu": cpu, "memory": GiB, "nvidia.com/gpu": gpus},
        }
    )


def test_quota_usage_keys() -> None:
    assert quota_usage(gpu_pod(2)) == {
        "count/pods": 1,
        "cpu": 1000,
        "limits.cpu": 1000,
        "limits.memory": GiB,
        "memory": GiB,
        "pods": 1,
        "requests.cpu": 1000,
        "requests.memory": GiB,
        "requests.nvidia.com/gpu": 2,
    }


def test_quota_rejection_names_the_quota_with_kubes_wording() -> None:
    ledger = QuotaLedger.of(
        [ResourceQuotaInfo(namespace="ml", name="gpu-quota", hard={"requests.nvidia.com/gpu": 8, "pods": 10})]
    )
    ledger = ledger.charge("ml", None, gpu_pod(6))
    decision = ledger.admit("train-0", "ml", None, gpu_pod(4))
    assert decision.message == (
        'pods "train-0" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=6, limited: "
        "requests.nvidia.com/gpu=8"
    )
    assert decision.ledger is ledger
    fits = ledger.admit("train-0", "ml", None, gpu_pod(2))
    assert fits.admitted and fits.ledger.used[("ml", "gpu-quota")] == {"pods": 2, "requests.nvidia.com/gpu": 8}
    assert fits.ledger.release("ml", None, gpu_pod(2)).used == ledger.used


def test_quota_lists_every_exceeded_resource_sorted_and_formats_quantities() -> None:
    ledger = QuotaLedger.of(
        [ResourceQuotaInfo(namespace="ml", name="compute", hard={"requests.cpu": 2000, "limits.memory": GiB})]
    )
    decision = ledger.admit(
        "p",
        "ml",
        None,
        resources({"requests": {"cpu": 2500, "memory": GiB}, "limits": {"cpu": 2500, "memory": 2 * GiB}}),
    )
    assert decision.message == (
        'pods "p" is forbidden: exceeded quota: compute, requested: '
        "limits.memory=2Gi,requests.cpu=2500m, used: limits.memory=0,requests.cpu=0, "
        "limited: limits.memory=1Gi,requests.cpu=2"
    )


def test_quota_scoped_to_priority_classes_and_namespaces() -> None:
    ledger = QuotaLedger.of(
        [
            ResourceQuotaInfo(
                namespace="ml", name="low", hard={"requests.nvidia.com/gpu": 1}, scope_priority_classes=("low",)
            )
        ]
    )
    assert ledger.admit("p", "ml", "high", gpu_pod(4)).admitted
    assert ledger.admit("p", "other", "low", gpu_pod(4)).admitted
    assert not ledger.admit("p", "ml", "low", gpu_pod(4)).admitted


def test_quota_on_cpu_requires_every_container_to_say_cpu() -> None:
    ledger = QuotaLedger.of(
        [ResourceQuotaInfo(namespace="ml", name="compute", hard={"limits.cpu": 8000, "requests.memory": GiB})]
    )
    decision = ledger.admit("p", "ml", None, resources({"requests": {"cpu": 100}}, {"limits": {"cpu": 100}}))
    assert decision.message == (
        'pods "p" is forbidden: failed quota: compute: must specify limits.cpu for: c0; requests.memory for: c0,c1'
    )
