"""``berth binder run --backend kube``: configuration errors say what to do, before anything starts."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from berth.cli import app

runner = CliRunner(env={"COLUMNS": "400", "NO_COLOR": "1"})  # rich wraps its error box otherwise


def output(result) -> str:
    return " ".join(result.output.split())


def test_a_missing_kubeconfig_is_named():
    result = runner.invoke(app, ["binder", "run", "--backend", "kube", "--kubeconfig", "/nonexistent/kubeconfig"])
    assert result.exit_code == 2 and "no such file" in output(result)


def test_an_unknown_context_says_how_to_fix_it(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "a",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    result = runner.invoke(
        app, ["binder", "run", "--backend", "kube", "--kubeconfig", str(kubeconfig), "--context", "nope"]
    )
    assert result.exit_code == 2
    assert "cannot load a Kubernetes configuration" in output(result) and "--context" in output(result)


def test_kube_options_are_refused_with_the_simulator():
    result = runner.invoke(
        app, ["binder", "run", "--backend", "sim", "--sim-url", "http://127.0.0.1:1", "--context", "a"]
    )
    assert result.exit_code == 2 and "--kubeconfig and --context are for --backend kube" in output(result)
