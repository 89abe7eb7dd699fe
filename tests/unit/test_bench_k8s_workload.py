"""The head-to-head benchmark's workload and figures (bench/k8s/workload.py): pure functions."""

from __future__ import annotations

import pytest

from bench.k8s.workload import (
    GPU,
    GpuPod,
    demand_ratio,
    gpu_allocation,
    gpu_pods,
    overcommitted_nodes,
    parse_mix,
    pod_manifest,
    stranded_gpus,
    throughput,
)


def test_the_same_seed_gives_the_same_pods_and_another_seed_others():
    assert gpu_pods(500, seed=3) == gpu_pods(500, seed=3)
    assert gpu_pods(500, seed=3) != gpu_pods(500, seed=4)


def test_the_default_mix_over_subscribes_1000_nodes_with_5000_pods():
    pods = gpu_pods(5000)
    assert {pod.gpus for pod in pods} == {1, 2, 4, 8}
    assert len({pod.name for pod in pods}) == 5000
    assert 1.1 < demand_ratio(pods, 1000, 8) < 1.3


def test_a_mix_is_read_and_refused_when_malformed():
    assert parse_mix("1:0.5,8:0.5") == {1: 0.5, 8: 0.5}
    assert {pod.gpus for pod in gpu_pods(50, mix=parse_mix("8:1"))} == {8}
    with pytest.raises(ValueError, match="GPUS:WEIGHT"):
        parse_mix("one:half")
    with pytest.raises(ValueError, match="at least one size"):
        gpu_pods(3, mix={0: 1.0})


def test_a_pod_asks_for_whole_gpus_with_cpu_and_memory_in_proportion():
    body = pod_manifest(GpuPod("p", 4), scheduler_name="berth")
    [container] = body["spec"]["containers"]
    assert body["spec"]["schedulerName"] == "berth"
    assert container["resources"]["requests"] == {"cpu": "80", "memory": "800Gi", GPU: "4"}
    assert container["resources"]["limits"] == {GPU: "4"}


def test_figures():
    assert gpu_allocation([8, 4, 4], nodes=2, gpus_per_node=8) == 1.0
    assert gpu_allocation([], nodes=0, gpus_per_node=8) == 0.0
    assert throughput(100, 4.0) == 25.0 and throughput(5, 0.0) == 0.0
    assert overcommitted_nodes([("a", 8), ("b", 4), ("b", 8)], 8) == ["b"]
    # Free GPUs on nodes with fewer free than the smallest pending pod asks for are stranded.
    assert stranded_gpus([("a", 6), ("b", 1)], ["a", "b", "c"], 8, smallest_pending=4) == 2
    assert stranded_gpus([("a", 6)], ["a", "b"], 8, smallest_pending=None) == 0


def test_api_requests_are_summed_by_method_from_prometheus_text():
    from bench.k8s.__main__ import requests_by_method

    text = (
        "# HELP rest_client_requests_total x\n"
        'rest_client_requests_total{code="201",host="h",method="POST"} 3.0\n'
        'rest_client_requests_total{code="409",host="h",method="POST"} 1.0\n'
        'rest_client_requests_total{code="200",host="h",method="GET"} 2\n'
        'rest_client_request_duration_seconds_count{verb="GET"} 9\n'
    )
    assert requests_by_method(text) == {"GET": 2, "POST": 4}


def test_a_pod_is_marked_unschedulable_by_its_podscheduled_false_condition():
    from bench.k8s.__main__ import marked_unschedulable

    assert marked_unschedulable(
        {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}
    )
    assert not marked_unschedulable({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}})
    assert not marked_unschedulable({"status": {}}) and not marked_unschedulable({})
