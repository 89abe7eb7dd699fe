"""`berth simulate` reads its inputs as `kubectl apply -f` does: several files, directories
(sorted, `-R` for subdirectories), `-` for stdin; errors name the file and document; exit codes
tell "bad input" (2) from "nothing to read" (3)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from berth.cli import app
from berth.simulate import EXIT_INVALID, EXIT_NO_INPUT, load_sources, main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

NODE = (
    "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
    "status: {allocatable: {cpu: '8', memory: 16Gi, nvidia.com/gpu: '2'}}\n"
)


def pod(name: str, gpus: int = 1) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: c\n"
        f"    resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}\n"
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines() if line.strip()], captured.err


def pods(lines: list[dict[str, Any]]) -> list[str]:
    return [line["pod"] for line in lines if "pod" in line]


def test_files_positional_and_repeated_f_are_one_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodes.yaml").write_text(NODE)
    (tmp_path / "a.yaml").write_text(pod("a"))
    (tmp_path / "b.yaml").write_text(pod("b"))
    code, lines, err = run(
        capsys, str(tmp_path / "nodes.yaml"), "-f", str(tmp_path / "a.yaml"), "--filename", str(tmp_path / "b.yaml")
    )
    assert code == 0, err
    # the pods of two files share the node of a third; queue order is input order
    assert [(line["pod"], line["node"], line["gpus"]) for line in lines[:-1]] == [
        ("default/a", "n1", [0]),
        ("default/b", "n1", [1]),
    ]
    assert lines[-1]["summary"]["placed"] == 2


def test_a_directory_reads_its_manifests_sorted_and_recursive_with_R(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "0-nodes.yaml").write_text(NODE)
    (tmp_path / "2-later.yml").write_text(pod("later"))
    (tmp_path / "1-first.json").write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "first"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
            }
        )
    )
    (tmp_path / "notes.txt").write_text("not a manifest: {")
    sub = tmp_path / "1-sub"
    sub.mkdir()
    (sub / "deep.yaml").write_text(pod("deep"))
    code, lines, err = run(capsys, "-f", str(tmp_path))
    assert code == 0, err
    assert pods(lines) == ["default/first", "default/later"]
    code, lines, err = run(capsys, "-f", str(tmp_path), "-R")
    assert code == 0, err
    # lexical walk: 0-nodes.yaml, 1-first.json, 1-sub/deep.yaml, 2-later.yml
    assert pods(lines) == ["default/first", "default/deep", "default/later"]
    assert [line["node"] for line in lines[:-1]] == ["n1", "n1", None]


def test_stdin_with_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodes.yaml").write_text(NODE)
    monkeypatch.setattr(sys, "stdin", io.StringIO(pod("piped", 2)))
    code, lines, err = run(capsys, str(tmp_path / "nodes.yaml"), "-f", "-")
    assert code == 0, err
    assert lines[0] == {"pod": "default/piped", "node": "n1", "gpus": [0, 1], "message": ""}


def test_stdin_only_once() -> None:
    with pytest.raises(ValueError, match="only once"):
        load_sources(["-", "-"], stdin=io.StringIO(""))


def test_the_examples_directory_each_file_its_own_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = run(capsys, "--each", *sorted(str(p) for p in EXAMPLES.glob("*.yaml")))
    assert code == 0, err
    summaries = {Path(line["file"]).name: line["summary"] for line in lines if "summary" in line}
    assert set(summaries) == {"gang.yaml", "gpu-sharing.yaml", "preemption.yaml", "quota.yaml"}
    assert summaries["gpu-sharing.yaml"]["placed"] == 7
    assert all("file" in line for line in lines)
    # the scheduler configuration beside them is skipped, with a hint
    assert "berth-config.yaml: document 1: skipped a BerthSchedulerConfiguration" in err
    assert "pass it with --config" in err


def test_the_examples_directory_as_one_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = run(capsys, "-f", str(EXAMPLES))
    assert code == 0, err
    assert lines[-1]["summary"]["pods"] == 7 + 9 + 3 + 4  # every pending pod of the four files
    assert "skipped a BerthSchedulerConfiguration" in err


def test_an_object_defined_in_two_files_names_the_second(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(NODE)
    (tmp_path / "b.yaml").write_text(pod("p") + "---\n" + NODE)
    code, lines, err = run(capsys, "-f", str(tmp_path))
    assert code == EXIT_INVALID and lines == []
    assert f"is defined twice (again in {tmp_path / 'b.yaml'}: document 2)" in err


def test_missing_path_empty_directory_no_input_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = run(capsys, str(tmp_path / "missing.yaml"))
    assert (code, lines) == (EXIT_NO_INPUT, []) and "missing.yaml: no such file or directory" in err
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "sub").mkdir()
    (tmp_path / "empty" / "sub" / "x.yaml").write_text(NODE)
    code, _, err = run(capsys, "-f", str(tmp_path / "empty"))
    assert code == EXIT_NO_INPUT and "no manifests in this directory" in err and "-R" in err
    code, _, err = run(capsys)
    assert code == EXIT_NO_INPUT and "no input" in err
    code, _, err = run(capsys, "-f", str(tmp_path / "nodes.yaml"), "--config", str(tmp_path / "nope.yaml"))
    assert code == EXIT_NO_INPUT


def test_unparsable_yaml_names_the_file_and_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "good.yaml").write_text(NODE)
    bad = tmp_path / "bad.yaml"
    bad.write_text(NODE + "---\n" + pod("fine") + "---\nkind: Pod\nmetadata: [oops\n")
    code, lines, err = run(capsys, str(tmp_path / "good.yaml"), str(bad))
    assert code == EXIT_INVALID and lines == []
    assert f"error: {bad}: document 3: line 16 column 1: invalid YAML" in err
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"kind": "Pod",\n "metadata": }')
    code, _, err = run(capsys, str(bad_json))
    assert code == EXIT_INVALID and f"{bad_json}: line 2 column 14: invalid JSON" in err


def test_invalid_object_names_its_file_and_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodes.yaml").write_text(NODE)
    pods_file = tmp_path / "pods.yaml"
    pods_file.write_text(pod("ok") + "---\n" + pod("broken").replace("nvidia.com/gpu: 1", "cpu: 2 cores"))
    code, _, err = run(capsys, "-f", str(tmp_path / "nodes.yaml"), "-f", str(pods_file))
    assert code == EXIT_INVALID
    assert (
        f"error: {pods_file}: document 2: Pod default/broken: spec.containers[0].resources.limits.cpu: "
        "'2 cores' is not a Kubernetes quantity"
    ) in err
    (tmp_path / "kindless.yaml").write_text("metadata: {name: x}\n")
    code, _, err = run(capsys, str(tmp_path / "nodes.yaml"), str(tmp_path / "kindless.yaml"))
    assert code == EXIT_INVALID and f"{tmp_path / 'kindless.yaml'}: document 1: kind: is required" in err


def test_each_reports_a_bad_file_and_carries_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(NODE + "---\n" + pod("a"))
    (tmp_path / "b.yaml").write_text(pod("b").replace("nvidia.com/gpu: 1", "cpu: lots"))
    (tmp_path / "c.yaml").write_text(NODE + "---\n" + pod("c"))
    code, lines, err = run(capsys, "--each", "-f", str(tmp_path))
    assert code == EXIT_INVALID
    assert [Path(line["file"]).name for line in lines if "summary" in line] == ["a.yaml", "c.yaml"]
    assert "b.yaml: document 1: Pod default/b" in err


def test_through_the_berth_cli_with_stdin() -> None:
    text = (EXAMPLES / "gang.yaml").read_text()
    result = CliRunner().invoke(app, ["simulate", "-"], input=text)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["summary"]["gangs_placed"] == 1
    result = CliRunner().invoke(app, ["simulate", "-f", "/nonexistent/dir/"])
    assert result.exit_code == EXIT_NO_INPUT
