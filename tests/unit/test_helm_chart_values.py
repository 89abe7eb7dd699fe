"""The Helm chart's values, rendered by a real helm (no cluster): the schema refuses what it should,
with a message naming the key; the everything-on values file (deploy/helm/berth/ci/) lints and
renders the ServiceMonitor, the disruption budgets, the probes and every per-service pod setting;
chart-wide pod settings merge with a service's own as values.yaml says; nameOverride and
fullnameOverride rename every object and relabel every selector.

helm is the cached build (berth_dev.devstack.helm). Without it these tests skip, except under CI
(``CI=true``), where helm is built and a failed build fails them. The apiserver's view of the same
renderings is in tests/integration/test_deploy_chart.py.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_dev.devstack.helm import (
    COLD_BUILD_NOTE,
    chart_dir,
    ensure_helm,
    helm_binary_present,
    lint_chart,
    run_helm,
)
from berth_dev.devstack.procs import DevStackError

SERVICES = {
    "ingest": "ingest",
    "inventory": "inventory",
    "tokenLag": "token-lag",
    "decision": "decision",
    "binder": "binder",
    "audit": "audit",
}
EVERYTHING_ON = chart_dir() / "ci" / "everything-on-values.yaml"
MANAGED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="module")
def helm(request: pytest.FixtureRequest) -> Path:
    """The cached helm; under CI it is built when missing and a failed build fails the tests."""
    try:
        if helm_binary_present():
            return ensure_helm(quiet=True)
        if not _in_ci():
            pytest.skip("helm is not built yet (`python -m berth_dev.devstack.helm build`, ~2 minutes)")
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(f"\nbuilding helm. {COLD_BUILD_NOTE}", flush=True)
            return ensure_helm()
    except DevStackError as exc:
        message = f"no helm for the chart tests: {exc}\n(`python -m berth_dev.devstack.helm build` builds it)"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _template(helm: Path, *args: str, release: str = "berth", namespace: str = "berth") -> list[dict[str, Any]]:
    text = run_helm(["template", release, str(chart_dir()), "--namespace", namespace, *args], helm=helm)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _by(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == kind}


def _pod(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return _by(documents, "Deployment")[name]["spec"]["template"]


@pytest.fixture(scope="module")
def everything_on(helm: Path) -> list[dict[str, Any]]:
    return _template(helm, "-f", str(EVERYTHING_ON), release="gpu", namespace="berth-platform")


@pytest.fixture(scope="module")
def defaults(helm: Path) -> list[dict[str, Any]]:
    return _template(helm)


# --- lint ----------------------------------------------------------------------------------------


def test_chart_lints_strictly_with_default_and_everything_on_values(helm: Path) -> None:
    assert "1 chart(s) linted, 0 chart(s) failed" in lint_chart(helm)
    report = run_helm(["lint", "--strict", str(chart_dir()), "-f", str(EVERYTHING_ON)], helm=helm)
    assert "1 chart(s) linted, 0 chart(s) failed" in report


# --- the schema refuses bad values, naming them --------------------------------------------------


# (helm arguments, what the error must say)
BAD_VALUES = [
    (["--set", "decison.replicas=2"], "additional properties 'decison' not allowed"),
    (["--set", "decision.replica=2"], "at '/decision': additional properties 'replica' not allowed"),
    (
        ["--set", "tokenLag.podDisruptionBudget.maxUnavalable=1"],
        "at '/tokenLag/podDisruptionBudget': additional properties 'maxUnavalable' not allowed",
    ),
    (["--set", "binder.replicas=-1"], "at '/binder/replicas': minimum: got -1, want 0"),
    (["--set", "audit.replicas=two"], "at '/audit/replicas': got string, want integer"),
    (["--set", "metrics.port=70000"], "at '/metrics/port': maximum: got 70,000, want 65,535"),
    (["--set", "health.port=0"], "at '/health/port': minimum: got 0, want 1"),
    (["--set", "log.level=trace"], "at '/log/level': value must be one of 'debug', 'info', 'warning', 'error'"),
    (["--set", "log.format=text"], "at '/log/format': value must be one of 'json', 'console'"),
    (["--set", "kafka.securityProtocol=TLS"], "at '/kafka/securityProtocol': value must be one of"),
    (["--set", "kafka.sasl.mechanism=GSSAPI"], "at '/kafka/sasl/mechanism': value must be one of 'PLAIN'"),
    (["--set", "kafka.topicPrefix=team a."], "at '/kafka/topicPrefix': 'team a.' does not match pattern"),
    (["--set", "kafka.groupPrefix=team/a"], "at '/kafka/groupPrefix': 'team/a' does not match pattern"),
    (["--set", "database.sslmode=on"], "at '/database/sslmode': value must be one of"),
    (
        [
            "--set",
            "decision.podDisruptionBudget.minAvailable=1",
            "--set",
            "decision.podDisruptionBudget.maxUnavailable=1",
        ],
        "at '/decision/podDisruptionBudget/maxUnavailable': got number, want null",
    ),
    (
        ["--set", "inventory.podDisruptionBudget.maxUnavailable=half"],
        "at '/inventory/podDisruptionBudget/maxUnavailable': 'half' does not match pattern",
    ),
    (
        ["--set", "ingest.securityContext.runAsNonroot=true"],
        "at '/ingest/securityContext': additional properties 'runAsNonroot' not allowed",
    ),
    (
        ["--set", "podSecurityContext.seccompProfile.type=Default"],
        "at '/podSecurityContext/seccompProfile/type': value must be one of 'RuntimeDefault'",
    ),
    (
        ["--set", "decision.probes.startup.failureThreshold=0"],
        "at '/decision/probes/startup/failureThreshold': minimum: got 0, want 1",
    ),
    (
        ["--set", "ingest.probes.liveness.successThreshold=2"],
        "at '/ingest/probes/liveness': additional properties 'successThreshold' not allowed",
    ),
    (
        ["--set-json", 'binder.tolerations=[{"key": "gpu", "operator": "Exist"}]'],
        "at '/binder/tolerations/0/operator': value must be one of 'Exists', 'Equal'",
    ),
    (["--set", "metrics.serviceMonitor.interval=30"], "at '/metrics/serviceMonitor/interval': got number, want string"),
    (
        ["--set", "metrics.serviceMonitor.interval=30 seconds"],
        "at '/metrics/serviceMonitor/interval': '30 seconds' does not match",
    ),
    (
        ["--set", "metrics.serviceMonitor.enable=true"],
        "at '/metrics/serviceMonitor': additional properties 'enable' not allowed",
    ),
    (["--set", "fullnameOverride=Berth_Prod"], "at '/fullnameOverride': 'Berth_Prod' does not match pattern"),
    (
        ["--set", "decision.resources.limits.memory=lots"],
        "at '/decision/resources/limits/memory': 'lots' does not match",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_VALUES, ids=[" ".join(a[1::2])[:60] for a, _ in BAD_VALUES])
def test_the_schema_refuses_bad_values_naming_them(helm: Path, args: list[str], message: str) -> None:
    with pytest.raises(DevStackError) as refused:
        _template(helm, *args)
    assert "values don't meet the specifications of the schema" in str(refused.value)
    assert message in str(refused.value)


def test_a_values_file_with_a_typo_is_refused(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "typo.yaml"
    values.write_text("decision:\n  replicas: 2\n  nodeSelecter: {pool: control}\n")
    with pytest.raises(DevStackError, match="at '/decision': additional properties 'nodeSelecter' not allowed"):
        _template(helm, "-f", str(values))


def test_the_health_port_must_differ_from_the_metrics_port(helm: Path) -> None:
    with pytest.raises(DevStackError, match="health.port and metrics.port are both 9090"):
        _template(helm, "--set", "health.port=9090")


# --- everything on -------------------------------------------------------------------------------


def test_everything_on_renders_a_service_monitor_for_the_metrics_services(everything_on: list[dict[str, Any]]) -> None:
    (monitor,) = [doc for doc in everything_on if doc["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == "gpu-sched"
    assert monitor["metadata"]["namespace"] == "monitoring"  # the namespace override
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # for the operator's selector
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["berth-platform"]}
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "15s", "scrapeTimeout": "5s"}
    ]
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = _by(everything_on, "Service")
    selected = sorted(
        name for name, service in services.items() if selector.items() <= service["metadata"]["labels"].items()
    )
    assert selected == sorted(f"gpu-sched-{component}-metrics" for component in SERVICES.values())
    for service in services.values():
        assert service["spec"]["ports"][0] == {
            "name": "metrics",
            "port": 9191,
            "targetPort": "metrics",
            "protocol": "TCP",
        }


def test_the_service_monitor_defaults_to_the_release_namespace(helm: Path) -> None:
    documents = _template(helm, "--set", "metrics.serviceMonitor.enabled=true", namespace="sched")
    (monitor,) = [doc for doc in documents if doc["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["namespace"] == "sched"
    assert monitor["spec"]["endpoints"][0]["interval"] == "30s"
    assert monitor["spec"]["endpoints"][0]["scrapeTimeout"] == "10s"


def test_everything_on_renders_the_disruption_budgets_it_asks_for(everything_on: list[dict[str, Any]]) -> None:
    budgets = {name: doc["spec"] for name, doc in _by(everything_on, "PodDisruptionBudget").items()}
    assert "gpu-sched-inventory" not in budgets  # podDisruptionBudget.enabled: false
    assert budgets["gpu-sched-ingest"]["minAvailable"] == 1 and "maxUnavailable" not in budgets["gpu-sched-ingest"]
    assert budgets["gpu-sched-decision"]["maxUnavailable"] == "34%"
    assert budgets["gpu-sched-audit"]["maxUnavailable"] == 1
    assert budgets["gpu-sched-token-lag"]["maxUnavailable"] == 1  # neither bound set: maxUnavailable 1
    for name, spec in budgets.items():
        assert (
            spec["selector"]["matchLabels"] == _by(everything_on, "Deployment")[name]["spec"]["selector"]["matchLabels"]
        )


def test_a_disruption_budget_may_be_turned_off_and_allows_zero(helm: Path) -> None:
    documents = _template(
        helm, "--set", "audit.podDisruptionBudget.enabled=false", "--set", "binder.podDisruptionBudget.maxUnavailable=0"
    )
    budgets = _by(documents, "PodDisruptionBudget")
    assert "berth-audit" not in budgets
    assert budgets["berth-binder"]["spec"]["maxUnavailable"] == 0


def test_a_disabled_service_has_no_objects(helm: Path) -> None:
    documents = _template(helm, "--set", "audit.enabled=false", "--set", "metrics.serviceMonitor.enabled=true")
    assert not [doc for doc in documents if doc["metadata"]["name"].startswith("berth-audit")]


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["spec"]["containers"]
    return {entry["name"]: entry.get("value") for entry in container.get("env", [])}


def test_the_kafka_prefixes_reach_every_service(helm: Path) -> None:
    documents = _template(helm, "--set", "kafka.topicPrefix=team-a.", "--set", "kafka.groupPrefix=team-a-")
    for name in SERVICES.values():
        env = _env(_pod(documents, f"berth-{name}"))
        assert env["BERTH_KAFKA__TOPIC_PREFIX"] == "team-a.", name
        assert env["BERTH_KAFKA__GROUP_PREFIX"] == "team-a-", name


def test_by_default_the_kafka_prefixes_are_empty(defaults: list[dict[str, Any]]) -> None:
    for name in SERVICES.values():
        env = _env(_pod(defaults, f"berth-{name}"))
        assert (env["BERTH_KAFKA__TOPIC_PREFIX"], env["BERTH_KAFKA__GROUP_PREFIX"]) == ("", ""), name


def test_cells_reach_every_service(helm: Path, defaults: list[dict[str, Any]]) -> None:
    documents = _template(helm, "--set", "kafka.cells=4")
    for name in SERVICES.values():
        assert _env(_pod(documents, f"berth-{name}"))["BERTH_KAFKA__CELLS"] == "4", name
        assert _env(_pod(defaults, f"berth-{name}"))["BERTH_KAFKA__CELLS"] == "2", name


def test_a_descheduler_policy_reaches_the_decision_service_as_it_reads_it(helm: Path, tmp_path: Path) -> None:
    from datetime import timedelta

    from berth.configfiles import read_descheduler

    policy = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [
            {
                "name": "gpu",
                "pluginConfig": [{"name": "GpuDefragmentation", "args": {"maxPodGpus": 1}}],
                "plugins": {"balance": {"enabled": ["GpuDefragmentation"]}},
            }
        ],
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"descheduler": {"policy": policy, "intervalSeconds": 120}}))
    documents = _template(helm, "-f", str(values))
    args = _pod(documents, "berth-decision")["spec"]["containers"][0]["args"]
    at = args.index("--descheduler-policy")
    assert args[at + 1 : at + 6] == [
        "/etc/berth/config/descheduler-policy.yaml",
        "--descheduling-interval",
        "120",
        "--descheduling-cooldown",
        "3600",
    ]
    mounted = tmp_path / "descheduler-policy.yaml"
    mounted.write_text(_by(documents, "ConfigMap")["berth-config"]["data"]["descheduler-policy.yaml"])
    read = read_descheduler(mounted, timedelta(seconds=120), timedelta(seconds=3600))  # as the service reads it
    assert [strategy.name for strategy in read.policy.strategies] == ["GpuDefragmentation"]


def test_without_a_policy_the_decision_service_does_not_deschedule(defaults: list[dict[str, Any]]) -> None:
    assert "--descheduler-policy" not in _pod(defaults, "berth-decision")["spec"]["containers"][0]["args"]
    assert "descheduler-policy.yaml" not in _by(defaults, "ConfigMap")["berth-config"]["data"]


def test_everything_on_probes_take_their_timings(everything_on: list[dict[str, Any]]) -> None:
    containers = {name: _pod(everything_on, f"gpu-sched-{name}")["spec"]["containers"][0] for name in SERVICES.values()}
    for container in containers.values():
        assert {port["name"]: port["containerPort"] for port in container["ports"]} == {"metrics": 9191, "health": 8181}
        assert {"name": "BERTH_HEALTH_PORT", "value": "8181"} in container["env"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert containers["ingest"]["livenessProbe"]["initialDelaySeconds"] == 30
    assert containers["ingest"]["livenessProbe"]["failureThreshold"] == 5
    assert containers["ingest"]["livenessProbe"]["periodSeconds"] == 20  # the rest from values.yaml
    assert containers["inventory"]["readinessProbe"]["periodSeconds"] == 5
    assert "startupProbe" not in containers["token-lag"]  # turned off
    assert containers["decision"]["startupProbe"] == {
        "httpGet": {"path": "/readyz", "port": "health"},
        "periodSeconds": 15,
        "timeoutSeconds": 5,
        "failureThreshold": 240,
    }
    assert containers["binder"]["startupProbe"]["failureThreshold"] == 12  # turned on
    assert "startupProbe" not in containers["audit"]


def test_a_probe_may_be_turned_off(helm: Path) -> None:
    documents = _template(helm, "--set", "audit.probes.liveness.enabled=false")
    container = _pod(documents, "berth-audit")["spec"]["containers"][0]
    assert "livenessProbe" not in container and "readinessProbe" in container


def test_everything_on_services_own_pod_settings_win_over_the_chart_wide_ones(
    everything_on: list[dict[str, Any]],
) -> None:
    decision = _pod(everything_on, "gpu-sched-decision")
    spec = decision["spec"]
    (container,) = spec["containers"]
    # Maps merge, the service's keys winning.
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 20001,
        "runAsGroup": 20001,
        "fsGroup": 10001,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL", "NET_RAW"]},
    }
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"memory": "8Gi", "ephemeral-storage": "1Gi"},
    }
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "node-role.example.com/control": "true"}
    assert decision["metadata"]["labels"]["example.com/cost-center"] == "gpu-platform"
    assert decision["metadata"]["labels"]["example.com/tier"] == "control"
    assert decision["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert decision["metadata"]["annotations"]["example.com/team"] == "scheduling"
    # Lists, affinity and the priority class are replaced.
    assert spec["tolerations"] == [
        {"key": "node-role.example.com/control", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert list(spec["affinity"]) == ["podAntiAffinity"]
    assert spec["priorityClassName"] == "platform-critical"
    assert {"name": "BERTH_SPOT_LABELS", "value": "example.com/lifecycle=spot"} in container["env"]


def test_everything_on_chart_wide_pod_settings_reach_every_pod(everything_on: list[dict[str, Any]]) -> None:
    pods = {name: _pod(everything_on, f"gpu-sched-{name}") for name in SERVICES.values() if name != "decision"}
    pods["migrate"] = _by(everything_on, "Job")["gpu-sched-migrate"]["spec"]["template"]
    for name, pod in pods.items():
        spec = pod["spec"]
        (container,) = spec["containers"]
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "fsGroup": 10001,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }, name
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, name
        assert container["resources"]["limits"]["ephemeral-storage"] == "1Gi", name
        assert container["resources"]["requests"]["memory"], name  # the service's (or Job's) own, merged
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}, name
        assert spec["tolerations"] == [
            {"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}
        ], name
        assert list(spec["affinity"]) == ["nodeAffinity"], name
        assert spec["priorityClassName"] == "platform-high", name
        assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}], name
        assert pod["metadata"]["labels"]["example.com/cost-center"] == "gpu-platform", name
        assert pod["metadata"]["annotations"]["example.com/owner"] == "platform", name
        assert container["image"] == "registry.example.com/platform/berth:0.1.0-rc1", name
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name


def test_a_services_false_overrides_a_chart_wide_true(helm: Path) -> None:
    """Merging keeps a service's false, 0 and empty values (they are not 'unset')."""
    documents = _template(
        helm,
        "--set",
        "binder.securityContext.readOnlyRootFilesystem=false",
        "--set",
        "binder.podSecurityContext.runAsNonRoot=false",
        "--set",
        "binder.podSecurityContext.runAsUser=0",
    )
    spec = _pod(documents, "berth-binder")["spec"]
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    assert spec["securityContext"]["runAsNonRoot"] is False and spec["securityContext"]["runAsUser"] == 0
    other = _pod(documents, "berth-audit")["spec"]
    assert other["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_podlabels_cannot_change_the_charts_labels(helm: Path) -> None:
    documents = _template(helm, "--set-json", 'podLabels={"app.kubernetes.io/component": "x", "team": "a"}')
    labels = _pod(documents, "berth-decision")["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "decision" and labels["team"] == "a"


# --- names -----------------------------------------------------------------------------------------


def _names(documents: list[dict[str, Any]]) -> list[str]:
    return [doc["metadata"]["name"] for doc in documents if doc["kind"] != "CustomResourceDefinition"]


def _selectors(documents: list[dict[str, Any]]) -> list[dict[str, str]]:
    found = []
    for doc in documents:
        spec = doc.get("spec", {})
        if doc["kind"] in ("Deployment", "PodDisruptionBudget", "ServiceMonitor"):
            found.append(spec["selector"]["matchLabels"])
        elif doc["kind"] == "Service":
            found.append(spec["selector"])
    return found


def _check_names(documents: list[dict[str, Any]], prefix: str, name_label: str, release: str) -> None:
    names = _names(documents)
    assert len(names) == len(
        {(doc["kind"], doc["metadata"]["name"]) for doc in documents if doc["kind"] != "CustomResourceDefinition"}
    )
    for name in names:
        assert name.startswith(prefix) or name == prefix.removesuffix("-"), name  # the ServiceMonitor: fullname
        assert len(name) <= 63 and not name.endswith("-"), name
    for doc in documents:
        if doc["kind"] == "CustomResourceDefinition":
            continue
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == name_label, doc["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == release, doc["metadata"]["name"]
        assert set(MANAGED_LABELS) <= set(labels), doc["metadata"]["name"]
        if doc["kind"] in ("Deployment", "Job"):
            pod_labels = doc["spec"]["template"]["metadata"]["labels"]
            assert pod_labels["app.kubernetes.io/name"] == name_label
            assert set(MANAGED_LABELS) <= set(pod_labels)
    for selector in _selectors(documents):
        assert selector["app.kubernetes.io/name"] == name_label and selector["app.kubernetes.io/instance"] == release
    # References between objects follow the names.
    for doc in documents:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            assert pod["serviceAccountName"] == doc["metadata"]["name"]
            for volume in pod["volumes"]:
                if "configMap" in volume:
                    assert volume["configMap"]["name"] == f"{prefix}config"
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert doc["roleRef"]["name"].startswith(prefix)
            assert all(subject["name"].startswith(prefix) for subject in doc["subjects"])


def test_default_names(defaults: list[dict[str, Any]]) -> None:
    _check_names(defaults, "berth-", "berth", "berth")
    assert "berth-decision" in _by(defaults, "Deployment")


def test_a_release_name_without_the_charts_gets_it_appended(helm: Path) -> None:
    documents = _template(helm, "--set", "metrics.serviceMonitor.enabled=true", release="sched")
    _check_names(documents, "sched-berth-", "berth", "sched")


def test_a_release_name_containing_the_charts_is_not_doubled(helm: Path) -> None:
    documents = _template(helm, release="prod-berth")
    _check_names(documents, "prod-berth-", "berth", "prod-berth")
    assert "prod-berth-decision" in _by(documents, "Deployment")


def test_name_override_renames_every_object_and_relabels_the_selectors(everything_on: list[dict[str, Any]]) -> None:
    _check_names(everything_on, "gpu-sched-", "sched", "gpu")
    assert len(_names(everything_on)) > 30


def test_full_name_override_wins(helm: Path) -> None:
    documents = _template(
        helm,
        "--set",
        "fullnameOverride=scheduler",
        "--set",
        "nameOverride=ignored-for-names",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        release="prod-berth",
    )
    _check_names(documents, "scheduler-", "ignored-for-names", "prod-berth")
    assert "scheduler" in _by(documents, "ServiceMonitor")
    assert "scheduler-ingest-leader-election" in _by(documents, "Role")


def test_long_names_are_shortened_keeping_the_component(helm: Path) -> None:
    """At most 63 characters (a Service's name is a DNS label): the fullname part is shortened, so
    the names stay distinct, and never ends in a "-"."""
    fullname = "x" * 39 + "-" + "y" * 23  # 63 characters
    documents = _template(
        helm,
        "--set",
        f"fullnameOverride={fullname}",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        release="a-very-long-release-name-for-a-platform-team-xyz",
    )
    names = _names(documents)
    assert all(len(name) <= 63 and "--" not in name for name in names), names
    assert len(names) == len(
        {(doc["kind"], doc["metadata"]["name"]) for doc in documents if doc["kind"] != "CustomResourceDefinition"}
    )  # distinct within each kind
    # Each component keeps its whole name and suffix; the fullname gives way.
    for component in SERVICES.values():
        tail = f"-{component}-metrics"
        assert f"{fullname[: 63 - len(tail)].rstrip('-')}{tail}" in _by(documents, "Service")
        assert f"{fullname[: 63 - len(component) - 1].rstrip('-')}-{component}" in _by(documents, "Deployment")
    assert "x" * 39 + "-ingest-leader-election" in _by(documents, "Role")  # 40 characters, less the "-"
    assert fullname in _by(documents, "ServiceMonitor")


def test_the_database_ca_reaches_the_audit_store_and_the_migrations(helm: Path) -> None:
    documents = _template(
        helm, "--set", "database.sslmode=verify-full", "--set", "database.tls.existingSecret=postgres-ca"
    )
    job = _by(documents, "Job")
    [migrate] = [spec["spec"]["template"] for spec in job.values()]
    for pod in (_pod(documents, "berth-audit"), migrate):
        env = _env(pod)
        assert env["BERTH_DATABASE__SSLMODE"] == "verify-full"
        assert env["BERTH_DATABASE__SSLROOTCERT"] == "/etc/berth/database-tls/ca.crt"
        (container,) = pod["spec"]["containers"]
        assert {"name": "database-tls", "mountPath": "/etc/berth/database-tls", "readOnly": True} in container[
            "volumeMounts"
        ]
        assert {"name": "database-tls", "secret": {"secretName": "postgres-ca"}} in pod["spec"]["volumes"]
    # Services that never open the database get neither the setting nor the Secret.
    assert "BERTH_DATABASE__SSLROOTCERT" not in _env(_pod(documents, "berth-decision"))
