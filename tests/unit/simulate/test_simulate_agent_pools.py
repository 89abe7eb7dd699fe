"""`berth simulate` on AgentPools: their replicas are scheduled like the controller would create them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.simulate import main

NODE = {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": NODE,
    }


def pool(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "serving"},
        "spec": {"model": "llama-70b", "replicas": replicas, "gpuRequirements": {"count": 2}, **spec},
    }


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], documents: list[dict[str, Any]]) -> tuple[int, dict, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    code = main([str(path)])
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
    return code, {line["pod"]: line for line in lines if "pod" in line}, captured.err


def test_missing_replicas_are_created_and_placed_and_running_ones_count(tmp_path, capsys):
    running = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llama-0", "namespace": "serving", "labels": {"berth.io/agent-pool": "llama"}},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}
            ],
        },
    }
    code, out, err = run(tmp_path, capsys, [node("n1"), node("n2"), pool("llama", 3), running])
    assert code == 0
    assert sorted(out) == ["serving/llama-1", "serving/llama-2"]  # llama-0 runs already
    assert all(line["node"] in ("n1", "n2") and len(line["gpus"]) == 2 for line in out.values())
    assert "AgentPool serving/llama: 2 replica(s) created to reach 3 (1 in the file)" in err


def test_a_cache_aware_pool_prefers_nodes_with_its_model_cached(tmp_path, capsys):
    scaling = {"ttftSloMs": 2000, "tokensPerSecondPerReplica": 2000}
    aware = {**scaling, "scheduling": {"cacheAware": {"enabled": True}}}

    def nodes(cached: str) -> list[dict[str, Any]]:
        return [
            node(name, **({"berth.io/cached-models": "llama-70b"} if name == cached else {}))
            for name in ("n1", "n2", "n3")
        ]

    plain_placements = []
    for cached in ("n1", "n3"):
        code, out, _ = run(tmp_path, capsys, [*nodes(cached), pool("llama", 2, **aware)])
        assert code == 0 and {line["node"] for line in out.values()} == {cached}
        code, plain, _ = run(tmp_path, capsys, [*nodes(cached), pool("llama", 2, **scaling)])
        plain_placements.append(sorted((p, line["node"]) for p, line in plain.items()))
    # Without cacheAware the cache label changes nothing.
    assert plain_placements[0] == plain_placements[1]


def test_replicas_pass_admission_like_other_pods(tmp_path, capsys):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": "serving"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
    }
    code, out, _ = run(tmp_path, capsys, [node("n1"), quota, pool("llama", 3)])
    assert code == 0
    assert [out[f"serving/llama-{i}"]["node"] is not None for i in range(3)] == [True, True, False]
    assert "exceeded quota: gpus" in out["serving/llama-2"]["message"]
