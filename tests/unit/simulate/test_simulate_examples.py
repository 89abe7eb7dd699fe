"""`berth simulate` end to end on the shipped examples: outcomes, messages, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from berth.simulate import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def simulate(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main([str(path), *extra])
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
    return code, lines, captured.err


def by_pod(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {line["pod"]: line for line in lines if "pod" in line}


def test_gpu_sharing(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = simulate(EXAMPLES / "gpu-sharing.yaml", capsys)
    out = by_pod(lines)
    assert code == 0
    # gpu-a has 5 free GPUs but no 4 linked ones (0-1 held, 5 broken): the NVLink island of gpu-b.
    assert (out["default/tensor-parallel"]["node"], out["default/tensor-parallel"]["gpus"]) == ("gpu-b", [0, 1, 2, 3])
    assert (out["default/pair-same-socket"]["node"], out["default/pair-same-socket"]["gpus"]) == ("gpu-b", [4, 5])
    # shares pack onto one device
    shares = [out[f"default/{name}"] for name in ("embed-0", "embed-1", "rerank")]
    assert {(s["node"], tuple(s["gpus"])) for s in shares} == {("gpu-b", (6,))}
    assert (out["default/mig-small"]["node"], out["default/mig-small"]["gpus"]) == ("gpu-b", [7])
    assert (out["default/t4-inference"]["node"], out["default/t4-inference"]["gpus"]) == ("t4-a", [0])
    assert out["default/too-much-memory"] == {
        "pod": "default/too-much-memory",
        "node": None,
        "gpus": [],
        "message": "0/3 nodes are available: 1 node(s) had untolerated taint(s), "
        "2 node(s) had no GPU device with 500 milli and 50000 MiB free. no new claims to deallocate, "
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod.",
    }
    assert out["default/t4-no-toleration"]["message"].startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    summary = lines[-1]["summary"]
    assert (summary["pods"], summary["placed"], summary["unschedulable"], summary["running_before"]) == (9, 7, 2, 1)


def test_gangs(capsys: pytest.CaptureFixture[str]) -> None:
    _, lines, _ = simulate(EXAMPLES / "gang.yaml", capsys)
    out = by_pod(lines)
    # "pair" (higher priority) is decided first and lands whole in zone-a
    assert {out["default/pair-0"]["node"], out["default/pair-1"]["node"]} == {"node-a1", "node-a2"}
    assert out["default/pair-0"]["group"] == "default/pair"
    # "big" cannot come together: nobody of it is placed, nothing is left assumed
    assert all(out[f"default/big-{i}"]["node"] is None for i in range(3))
    assert out["default/big-0"]["message"] == (
        "pod group default/big did not fit as a whole: only 1 of minMember 3 members fit at once, so none was placed"
    )
    assert out["default/big-1"]["message"].startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert out["default/tiny-0"]["message"] == "pod group default/tiny has 2 pending pods, fewer than minMember 3"
    assert lines[-1]["summary"]["gangs_placed"] == 1


def test_preemption(capsys: pytest.CaptureFixture[str]) -> None:
    _, lines, _ = simulate(EXAMPLES / "preemption.yaml", capsys)
    out = by_pod(lines)
    # gpu-2 would break the serving PDB; gpu-1's two batch jobs go instead
    assert out["default/urgent"] == {
        "pod": "default/urgent",
        "node": "gpu-1",
        "gpus": [0, 1, 2, 3],
        "message": "",
        "victims": ["default/batch-a", "default/batch-b"],
    }
    assert out["default/polite"]["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "no new claims to deallocate, preemption: not eligible due to "
        "preemptionPolicy=Never."
    )
    assert out["default/peer"]["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. no new claims "
        "to deallocate, preemption: 0/2 nodes are available: 2 No preemption "
        "victims found for incoming pod."
    )
    assert "victims" not in out["default/peer"]
    summary = lines[-1]["summary"]
    assert (summary["preemptions"], summary["victims"]) == (1, 2)


def test_quota_and_limit_range(capsys: pytest.CaptureFixture[str]) -> None:
    _, lines, _ = simulate(EXAMPLES / "quota.yaml", capsys)
    out = by_pod(lines)
    assert out["ml-team/train-0"]["message"] == (
        'pods "train-0" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=4, '
        "used: requests.nvidia.com/gpu=6, limited: requests.nvidia.com/gpu=8"
    )
    assert out["ml-team/greedy"]["message"] == (
        'pods "greedy" is forbidden: maximum cpu usage per Container is 32, but limit is 64'
    )
    assert out["ml-team/train-1"]["node"] == "gpu-big" and len(out["ml-team/train-1"]["gpus"]) == 2
    assert out["default/elsewhere"]["node"] == "gpu-big"
    assert lines[-1]["summary"]["rejected_by_admission"] == 2


def test_outcomes_are_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = simulate(EXAMPLES / "gpu-sharing.yaml", capsys)[1][:-1]
    second = simulate(EXAMPLES / "gpu-sharing.yaml", capsys)[1][:-1]
    assert first == second


def test_json_list_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1"},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}},
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            },
        ],
    }
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(document))
    code, lines, _ = simulate(path, capsys)
    assert code == 0 and lines[0] == {"pod": "default/p", "node": "n1", "gpus": [0], "message": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: train-0}\nspec:\n  containers:\n  - name: c\n"
            "    resources: {requests: {cpu: 2 cores}}\n",
            "Pod default/train-0: spec.containers[0].resources.requests.cpu: '2 cores' is not a Kubernetes quantity",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeName: ghost\n  containers: [{name: c}]\n",
            "Pod default/p: spec.nodeName: node 'ghost' is not defined in the input",
        ),
        ("kind: Pod\nmetadata: [oops\n", "invalid YAML"),
    ],
)
def test_invalid_input_exits_2_with_the_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, lines, err = simulate(path, capsys)
    assert code == 2 and lines == []
    assert expected in err


def test_custom_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: berth.io/v1alpha1\nkind: BerthSchedulerConfiguration\nprofiles:\n"
        "- schedulerName: berth\n  plugins:\n    multiPoint:\n      enabled:\n"
        "      - name: GpuDeviceFit\n      - name: NodeCost\n        weight: 5\n"
    )
    code, lines, _ = simulate(EXAMPLES / "gpu-sharing.yaml", capsys, "--config", str(config))
    assert code == 0 and lines[-1]["summary"]["placed"] >= 6
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: berth.io/v1alpha1\nkind: BerthSchedulerConfiguration\nprofiles:\n- schedulerName: berth\n"
        "  plugins:\n    score:\n      enabled: [{name: Nope}]\n"
    )
    code, _, err = simulate(EXAMPLES / "gpu-sharing.yaml", capsys, "--config", str(bad))
    assert code == 2 and "unknown plugin 'Nope'" in err


def test_shipped_config_runs_every_score_term(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = simulate(EXAMPLES / "gpu-sharing.yaml", capsys, "--config", str(EXAMPLES / "berth-config.yaml"))
    assert code == 0, err
    assert lines[-1]["summary"]["placed"] == 7
