"""The pure parts of berth_dev.devstack.helm: the wrapper module, the version stamps, the header."""

from __future__ import annotations

from pathlib import Path

import pytest
from berth_dev.devstack import helm
from berth_dev.devstack.procs import DevStackError


def test_wrapper_module_requires_helm_at_the_version() -> None:
    text = helm.helm_wrapper_go_mod("v3.22.0", "1.26.0")
    assert "module berth.local/helm-build" in text
    assert "\ngo 1.26.0\n" in text
    assert "require helm.sh/helm/v3 v3.22.0\n" in text
    assert "replace" not in text


def test_required_version_reads_block_and_single_line_requires() -> None:
    go_mod = "module x\n\nrequire (\n\tk8s.io/api v0.37.0\n\tk8s.io/client-go v0.37.0\n)\nrequire foo.dev/bar v1.2.3\n"
    assert helm.required_version(go_mod, "k8s.io/client-go") == "v0.37.0"
    assert helm.required_version(go_mod, "foo.dev/bar") == "v1.2.3"
    assert helm.required_version(go_mod, "k8s.io/client") is None


def test_ldflags_stamp_the_release_and_the_kubernetes_version_from_client_go() -> None:
    flags = helm.helm_ldflags("v3.22.0", "abc123", "v0.37.2")
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    assert "-X helm.sh/helm/v3/internal/version.gitCommit=abc123" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags
    assert "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1" in flags
    unstamped = helm.helm_ldflags("v3.22.0", None, None)
    assert "gitCommit" not in unstamped and "k8sVersion" not in unstamped


def test_header_is_stable_and_names_the_helm_version() -> None:
    assert helm.rendered_header() == helm.rendered_header()
    assert f"helm {helm.HELM_VERSION} template berth --namespace berth --include-crds" in helm.rendered_header()
    assert helm.manifests_path().read_text().startswith(helm.rendered_header())


def test_berth_helm_names_a_binary_instead_of_building(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "helm"
    monkeypatch.setenv(helm.ENV_HELM, str(fake))
    with pytest.raises(DevStackError, match="not an executable file"):
        helm.ensure_helm()
    fake.write_text("#!/bin/sh\necho v3.0.0\n")
    fake.chmod(0o755)
    assert helm.helm_binary_present()
    assert helm.ensure_helm() == fake
    assert helm.run_helm(["version"]) == "v3.0.0\n"
