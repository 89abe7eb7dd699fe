"""The committed plain manifests (deploy/manifests/berth.yaml, rendered from the Helm chart) checked
against the code they deploy: the CLIs accept the arguments, the settings read the environment,
the ConfigMap's documents load, and each component gets exactly the access it needs.

No helm and no cluster here: tests/integration/test_deploy_chart.py checks that this file is the
chart's current rendering and that the apiserver accepts it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from berth_dev.devstack.cache import repo_root
from berth_dev.devstack.helm import RELEASE_NAMESPACE, manifests_path

from berth.cli import SERVICES
from berth.core.config import default_document

DEPLOYED = ("ingest", "inventory", "token-lag", "decision", "binder", "audit")
WITH_KUBERNETES = {"ingest", "binder"}
WITHOUT_KUBERNETES = set(DEPLOYED) - WITH_KUBERNETES
CONFIG_MOUNT = "/etc/berth/config"


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifests_path().read_text()) if doc]


def _of_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == kind}


def _deployment(documents: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return _of_kind(documents, "Deployment")[f"berth-{component}"]


def _config_files(documents: list[dict[str, Any]]) -> dict[str, str]:
    return _of_kind(documents, "ConfigMap")["berth-config"]["data"]


def _literal_env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}


def test_every_service_has_a_deployment_and_nothing_else_does(documents: list[dict[str, Any]]) -> None:
    assert set(DEPLOYED) == set(SERVICES) - {"cluster-sim"}, "a new service needs a Deployment in the chart"
    assert sorted(_of_kind(documents, "Deployment")) == sorted(f"berth-{c}" for c in DEPLOYED)
    for component in DEPLOYED:
        (container,) = _deployment(documents, component)["spec"]["template"]["spec"]["containers"]
        assert container["args"][:2] == [component, "run"]


def test_all_namespaced_objects_are_in_the_release_namespace(documents: list[dict[str, Any]]) -> None:
    cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for doc in documents:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == RELEASE_NAMESPACE, doc["metadata"]["name"]


def test_crds_come_first(documents: list[dict[str, Any]]) -> None:
    kinds = [doc["kind"] for doc in documents]
    crds = [doc["metadata"]["name"] for doc in documents if doc["kind"] == "CustomResourceDefinition"]
    assert set(crds) == {"agentpools.berth.io", "podgroups.scheduling.x-k8s.io"}
    assert kinds[: len(crds)] == ["CustomResourceDefinition"] * len(crds)


def _parse_berth_args(args: list[str]) -> dict[str, Any]:
    """Parse ``berth ARGS`` as the image's entry point would, without running the command: walk the
    command groups, then let the command parse (and validate) its options. Returns the parameters."""
    from berth.cli import app

    command = typer.main.get_command(app)
    path = ["berth"]
    # Typer ships its own copy of click: recognise groups by what they do, not by click's classes.
    while hasattr(command, "list_commands"):
        name, args = args[0], args[1:]
        found = command.get_command(command.context_class(command), name)
        assert found is not None, f"`{' '.join(path)}` has no command {name!r}"
        command, path = found, [*path, name]
    with command.make_context(" ".join(path), list(args)) as context:
        return dict(context.params)


@pytest.mark.parametrize("component", DEPLOYED)
def test_the_cli_accepts_the_deployed_arguments(
    component: str, documents: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The container's arguments parse with Berth's own CLI, with the ConfigMap's files where the
    pod mounts them (options with ``exists=True`` check the files)."""
    try:
        importlib.import_module(f"berth.services.{SERVICES[component]}.cli")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"berth.services.{SERVICES[component]}.cli", f"berth.services.{SERVICES[component]}"):
            raise
        pytest.skip(f"{component} is not part of this build yet")
    for name, text in _config_files(documents).items():
        (tmp_path / name).write_text(text)
    (container,) = _deployment(documents, component)["spec"]["template"]["spec"]["containers"]
    params = _parse_berth_args([arg.replace(CONFIG_MOUNT, str(tmp_path)) for arg in container["args"]])
    if component == "decision":
        assert params["config"] == tmp_path / "scheduler.yaml" and params["pools"] == tmp_path / "pools.yaml"
    if component == "binder":
        assert params["backend"] == "kube"


def test_the_migration_job_runs_db_upgrade(documents: list[dict[str, Any]]) -> None:
    job = _of_kind(documents, "Job")["berth-migrate"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert _parse_berth_args(container["args"])["revision"] == "head"
    env_names = {item["name"] for item in container["env"]}
    assert "BERTH_DATABASE_URL" in env_names and not any(n.startswith("BERTH_KAFKA") for n in env_names)


@pytest.mark.parametrize("component", DEPLOYED)
def test_the_settings_read_the_deployed_environment(
    component: str, documents: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from berth.settings import load_settings

    (container,) = _deployment(documents, component)["spec"]["template"]["spec"]["containers"]
    for name in list(os.environ):
        if name.startswith("BERTH_"):
            monkeypatch.delenv(name)
    for name, value in _literal_env(container).items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.kafka.bootstrap == "kafka:9092"
    assert settings.kafka.replication_factor == 3
    assert settings.metrics_port == int(container["ports"][0]["containerPort"]) == 9090
    assert settings.log_format == "json"
    if "health_port" in type(settings).model_fields:  # the setting the probes' port is given by
        assert settings.health_port == 8081
    database_from_secret = [item for item in container["env"] if item["name"] == "BERTH_DATABASE_URL"]
    if component == "audit":
        assert database_from_secret[0]["valueFrom"]["secretKeyRef"] == {"name": "berth-database", "key": "url"}
    else:
        assert not database_from_secret, f"{component} does not use Postgres and must not see its URL"


def test_the_configmap_holds_the_built_in_profile_and_loads(documents: list[dict[str, Any]], tmp_path: Path) -> None:
    from berth.services.token_lag.fold import load_lag_settings

    from berth.configfiles import read_pools
    from berth.core.config import default_document, parse_config

    files = _config_files(documents)
    scheduler = yaml.safe_load(files["scheduler.yaml"])
    assert scheduler == default_document()
    assert [profile.scheduler_name for profile in parse_config(scheduler).profiles] == ["berth"]
    (tmp_path / "pools.yaml").write_text(files["pools.yaml"])
    assert read_pools(tmp_path / "pools.yaml") == {}
    assert load_lag_settings(tmp_path / "pools.yaml").pools == {}


def test_the_charts_copy_of_the_default_profile_is_the_cores() -> None:
    chart_copy = repo_root() / "deploy" / "helm" / "berth" / "files" / "scheduler-config.yaml"
    assert yaml.safe_load(chart_copy.read_text()) == default_document(), (
        f"write berth.core.default_profile's document to {chart_copy} and run `make deploy-render`"
    )


@pytest.mark.parametrize("component", DEPLOYED)
def test_pods_are_locked_down(component: str, documents: list[dict[str, Any]]) -> None:
    """Pod Security Standards "restricted", as the image's user (Dockerfile: uid and gid 10001)."""
    deployment = _deployment(documents, component)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(container["ports"][0]["containerPort"])
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert {"/tmp", "/var/lib/berth"} <= mounts  # the writable places of a read-only root
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}


def test_the_image_runs_as_the_charts_user() -> None:
    dockerfile = (repo_root() / "Dockerfile").read_text()
    assert "groupadd --system --gid 10001 berth" in dockerfile
    assert "useradd --system --uid 10001 --gid 10001" in dockerfile
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and set(users) == {"10001:10001"}


REBUILDS_STATE = {"inventory", "token-lag", "decision"}


@pytest.mark.parametrize("component", DEPLOYED)
def test_pods_are_probed_on_the_health_port(component: str, documents: list[dict[str, Any]]) -> None:
    """/livez and /readyz on the health port (BERTH_HEALTH_PORT); a startup probe, with a long
    budget, only for the services that rebuild state when they start."""
    (container,) = _deployment(documents, component)["spec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 9090, "health": 8081}
    assert _literal_env(container)["BERTH_HEALTH_PORT"] == "8081"
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    if component in REBUILDS_STATE:
        startup = container["startupProbe"]
        assert startup["httpGet"] == {"path": "/readyz", "port": "health"}
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    else:
        assert "startupProbe" not in container
        assert container["livenessProbe"]["initialDelaySeconds"] > 0


@pytest.mark.parametrize("component", DEPLOYED)
def test_each_service_has_a_disruption_budget_that_allows_drains(
    component: str, documents: list[dict[str, Any]]
) -> None:
    budget = _of_kind(documents, "PodDisruptionBudget")[f"berth-{component}"]
    deployment = _deployment(documents, component)
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    # maxUnavailable 1: a single replica can still be evicted, so node drains are never blocked.
    assert budget["spec"] == {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}


def test_no_service_monitor_by_default(documents: list[dict[str, Any]]) -> None:
    assert not [doc for doc in documents if doc["apiVersion"].startswith("monitoring.coreos.com/")]


@pytest.mark.parametrize("component", DEPLOYED)
def test_each_deployment_has_a_metrics_service(component: str, documents: list[dict[str, Any]]) -> None:
    service = _of_kind(documents, "Service")[f"berth-{component}-metrics"]
    assert service["metadata"]["labels"]["berth.io/metrics"] == "true"  # what the ServiceMonitor selects
    pod_labels = _deployment(documents, component)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def _bound_accounts(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """ServiceAccount name -> the (Cluster)Roles bound to it, resolved to their documents."""
    roles = {(doc["kind"], doc["metadata"]["name"]): doc for doc in documents if doc["kind"] in ("Role", "ClusterRole")}
    bound: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            role = roles[(doc["roleRef"]["kind"], doc["roleRef"]["name"])]
            for subject in doc["subjects"]:
                assert subject["kind"] == "ServiceAccount" and subject["namespace"] == RELEASE_NAMESPACE
                bound.setdefault(subject["name"], []).append(role)
    return bound


def test_only_ingest_and_binder_get_kubernetes_access(documents: list[dict[str, Any]]) -> None:
    accounts = _of_kind(documents, "ServiceAccount")
    bound = _bound_accounts(documents)
    assert sorted(bound) == ["berth-binder", "berth-ingest"]
    for component in DEPLOYED:
        pod = _deployment(documents, component)["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == f"berth-{component}"
        expected = component in WITH_KUBERNETES
        assert pod["automountServiceAccountToken"] is expected, component
        if not expected:
            assert accounts[f"berth-{component}"]["automountServiceAccountToken"] is False
    job_pod = _of_kind(documents, "Job")["berth-migrate"]["spec"]["template"]["spec"]
    assert job_pod["automountServiceAccountToken"] is False


def _grants(roles: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_roles_name_every_grant_and_grant_no_wildcards(documents: list[dict[str, Any]]) -> None:
    for roles in _bound_accounts(documents).values():
        for group, resource, verb in _grants(roles):
            assert "*" not in (group, resource, verb)


def test_the_binder_writes_only_what_applying_a_decision_needs(documents: list[dict[str, Any]]) -> None:
    grants = _grants(_bound_accounts(documents)["berth-binder"])
    for needed in [
        ("", "pods/binding", "create"),
        ("", "pods/status", "patch"),
        ("", "pods/eviction", "create"),
        ("", "events", "create"),
        ("events.k8s.io", "events", "create"),
        ("", "nodes", "patch"),
        ("", "pods", "get"),
        ("", "nodes", "get"),
        ("apps", "deployments/scale", "patch"),
        ("apps", "statefulsets/scale", "get"),
        ("berth.io", "agentpools/scale", "patch"),
    ]:
        assert needed in grants, needed
    # Its node informer lists and watches nodes (instead of a GET per binding); nothing else.
    assert {(group, resource) for group, resource, verb in grants if verb in ("list", "watch")} == {("", "nodes")}
    verbs = {verb for _, _, verb in grants}
    assert not verbs & {"delete", "deletecollection", "update", "escalate", "bind", "impersonate"}
    assert ("", "secrets", "get") not in grants


def test_ingest_reads_the_cluster_and_writes_only_leases(documents: list[dict[str, Any]]) -> None:
    grants = _grants(_bound_accounts(documents)["berth-ingest"])
    for resource in [
        ("", "pods"),
        ("", "nodes"),
        ("", "namespaces"),
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("policy", "poddisruptionbudgets"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("scheduling.x-k8s.io", "podgroups"),
        ("berth.io", "agentpools"),
    ]:
        assert {(*resource, verb) for verb in ("get", "list", "watch")} <= grants, resource
    writes = {(group, resource) for group, resource, verb in grants if verb not in ("get", "list", "watch")}
    assert writes == {("coordination.k8s.io", "leases")}
    (lease_role,) = [doc for doc in documents if doc["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == RELEASE_NAMESPACE
    named = [rule for rule in lease_role["rules"] if "resourceNames" in rule]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["berth-ingest"],
            "verbs": ["get", "update"],
        }
    ]


def _ingest_module(name: str) -> Any:
    try:
        return importlib.import_module(f"berth.services.ingest.{name}")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("berth.services.ingest"):
            raise
        pytest.skip("the ingest service is not part of this build yet")


def test_ingest_may_watch_everything_it_watches(documents: list[dict[str, Any]]) -> None:
    """Every resource in ingest's watch table is granted get/list/watch (so a resource added there
    without RBAC fails here, not in a cluster)."""
    paths = _ingest_module("kubeapi").PATHS
    grants = _grants(_bound_accounts(documents)["berth-ingest"])
    for path in paths.values():
        group = "" if path.prefix == "/api/v1" else path.prefix.split("/")[2]
        assert {(group, path.plural, verb) for verb in ("list", "watch")} <= grants, path


def test_ingest_elects_with_the_lease_its_role_names(documents: list[dict[str, Any]]) -> None:
    _ingest_module("cli")
    (container,) = _deployment(documents, "ingest")["spec"]["template"]["spec"]["containers"]
    params = _parse_berth_args(container["args"])
    (lease_role,) = [doc for doc in documents if doc["kind"] == "Role"]
    assert [params["lease_name"]] in [rule.get("resourceNames") for rule in lease_role["rules"]]
    # The Lease goes where the Role is: the pod's namespace, from the downward API.
    pod_namespace = {item["name"]: item for item in container["env"]}["POD_NAMESPACE"]
    assert pod_namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert params["scheduler_name"] == ["berth"]  # the built-in profile's schedulerName
