"""The product as pip installs it: the top-level folders under berth, their package data, and none
of the development tooling."""

from __future__ import annotations

from pathlib import Path

from berth_dev.lint_imports import install_product


def test_the_installed_product_holds_the_mounted_folders_and_no_dev_tooling(tmp_path: Path):
    target = install_product(tmp_path)
    installed = {path.relative_to(target).as_posix() for path in target.rglob("*") if path.is_file()}

    for expected in (
        "berth/cli.py",
        "berth/plugins.py",
        "berth/kube/replicas.py",
        "berth/schemas/topics.py",
        "berth/services/audit/models.py",
        "berth/services/audit/db.py",
        "berth/migrations/env.py",
        "berth/migrations/script.py.mako",
        "berth/migrations/versions/0001_audit_store.py",
    ):
        assert expected in installed
    assert any(name.startswith("berth/schemas/jsonschema/") and name.endswith(".json") for name in installed)
    assert any(name.startswith("berth/schemas/examples/") and name.endswith(".json") for name in installed)
    dev_tooling = [
        name
        for name in installed
        if name.startswith(
            ("berth_dev/", "berth/devstack/", "berth/workloads/", "berth/audit/", "berth/services/cluster_sim/")
        )
        or name
        in (
            "berth/demo.py",
            "berth/supervisor.py",
            "berth/services/binder/fake.py",
            "berth/services/binder/sim_backend.py",
        )
    ]
    assert dev_tooling == []
