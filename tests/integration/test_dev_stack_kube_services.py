"""``berth dev up --with-kubernetes`` runs Berth itself against the control plane it starts: the
services are recorded, shown by ``berth dev status``, schedule a pod created through the API,
and ``berth dev down`` stops every process and removes their data.

Runs the real CLI (``berth dev ...``) in a scratch ``BERTH_RUN_DIR``; needs java, the Postgres
binaries and the cached Kubernetes binaries (skipped without them, failed in CI). About a minute:
Kafka, Postgres, etcd, kube-apiserver and six Python services start on a small machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from berth_dev.devstack.fakenodes import create_fake_nodes
from berth_dev.devstack.kube import KubeConnection
from berth_dev.devstack.procs import is_running
from berth_dev.devstack.stack import SERVICE_ORDER
from kubernetes.client import CoreV1Api

pytestmark = pytest.mark.integration


def _wait(check, what: str, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s"
        time.sleep(0.5)


@pytest.mark.usefixtures("local_binaries", "cached_kube_binaries")
def test_dev_up_with_kubernetes_runs_berth_and_down_stops_it(tmp_path: Path) -> None:
    env = {**os.environ, "BERTH_RUN_DIR": str(tmp_path)}
    for variable in ("BERTH_KUBECONFIG", "BERTH_KAFKA_BOOTSTRAP", "BERTH_DATABASE_URL"):
        env.pop(variable, None)
    berth = str(Path(sys.executable).with_name("berth"))

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([berth, "dev", *command], env=env, capture_output=True, text=True, timeout=400)

    try:
        started = run("up", "--with-kubernetes")
        assert started.returncode == 0, started.stderr
        printed = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
        assert set(printed) == {"BERTH_KAFKA_BOOTSTRAP", "BERTH_DATABASE_URL", "BERTH_KUBECONFIG"}

        state = json.loads((tmp_path / "devstack.json").read_text())
        recorded = {service["name"]: service for service in state["services"]}
        assert list(recorded) == list(SERVICE_ORDER)
        markers = {name: f"--metrics-port {service['metrics_port']}" for name, service in recorded.items()}
        assert all(is_running(service["pid"], cmdline_contains=markers[name]) for name, service in recorded.items())
        assert "--backend kube" in " ".join(recorded["binder"]["args"])

        shown = run("status")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert "not answering" not in shown.stdout
        for name in ("kafka", "postgres", "kubernetes", *SERVICE_ORDER):
            assert any(line.split()[:1] == [name] and "answering" in line for line in shown.stdout.splitlines()), (
                name,
                shown.stdout,
            )

        # Berth schedules: nodes and a pod with schedulerName berth, through the API only. (The
        # node pool keeps the pod and its nodes in one cell, whatever the names hash to.)
        with KubeConnection.from_kubeconfig(printed["BERTH_KUBECONFIG"]).api_client() as api:
            nodes = create_fake_nodes(api, 2, prefix="dev-", labels={"berth.io/node-pool": "dev"})
            CoreV1Api(api).create_namespaced_pod(
                "default",
                {
                    "metadata": {"name": "hello"},
                    "spec": {
                        "schedulerName": "berth",
                        "nodeSelector": {"berth.io/node-pool": "dev"},
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    },
                },
            )
            pod = _wait(
                lambda: (p := CoreV1Api(api).read_namespaced_pod("hello", "default")).spec.node_name and p,
                "the pod bound",
                timeout=120,
            )
            assert pod.spec.node_name in nodes
            assert len(pod.metadata.annotations["berth.io/gpu-devices"].split(",")) == 1

        stopped = run("down")
        assert stopped.returncode == 0, stopped.stderr
        for name in SERVICE_ORDER:
            assert name in stopped.stdout
        assert not any(is_running(service["pid"], cmdline_contains=markers[name]) for name, service in recorded.items())
        assert not (tmp_path / "services").exists()
        assert not (tmp_path / "devstack.json").exists()
        assert run("status").returncode == 1
    finally:
        run("down")
