"""The Helm chart against a real helm and a real kube-apiserver.

* the committed plain manifests are the chart's current rendering, and the chart lints strictly
  (helm v3 built from the Go module proxy and cached: berth_dev.devstack.helm);
* the apiserver accepts every rendered object (server-side apply, ``dryRun=All``), the CRDs
  applied for real first, also for a release with TLS, SASL and pools set, and for the
  everything-on values (deploy/helm/berth/ci/everything-on-values.yaml: a ServiceMonitor, whose CRD
  is a minimal one written here, disruption budgets, per-service pod settings, name overrides);
* every pod the chart makes meets the "restricted" Pod Security Standard: the apiserver's
  PodSecurity admission, enforcing it on a namespace, admits them (and refuses a privileged one);
* least privilege, for real: with the rendered ServiceAccounts and RBAC applied, the apiserver's
  authorizer (SubjectAccessReview) and requests made with each account's own token show that the
  binder can bind and cannot delete nodes, ingest can watch pods and cannot bind, and the decision
  service (and inventory, token-lag, audit) can do nothing at all.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from berth_dev.devstack.helm import (
    COLD_BUILD_NOTE,
    RELEASE_NAMESPACE,
    chart_dir,
    ensure_helm,
    helm_binary_present,
    lint_chart,
    manifests_path,
    render_manifests,
    run_helm,
)
from berth_dev.devstack.kube import KubeConnection
from berth_dev.devstack.procs import DevStackError

FIELD_MANAGER = "berth"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="module")
def helm(request: pytest.FixtureRequest) -> Path:
    """The cached helm, built on first use (~2 minutes); under CI a failed build fails the tests."""
    try:
        if helm_binary_present():
            return ensure_helm(quiet=True)
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(f"\nbuilding helm. {COLD_BUILD_NOTE}", flush=True)
            return ensure_helm()
    except DevStackError as exc:
        message = f"no helm for the chart tests: {exc}\n(`python -m berth_dev.devstack.helm build` builds it)"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def committed() -> list[dict[str, Any]]:
    return _documents(manifests_path().read_text())


# --- helm --------------------------------------------------------------------------------------


def test_committed_manifests_are_the_charts_current_rendering(helm: Path) -> None:
    rendered = render_manifests(helm)
    assert manifests_path().read_text() == rendered, (
        f"{manifests_path()} is stale: run `make deploy-render` and commit the result"
    )


def test_chart_lints_strictly(helm: Path) -> None:
    report = lint_chart(helm)
    assert "1 chart(s) linted, 0 chart(s) failed" in report


def test_chart_refuses_sasl_without_a_credentials_secret(helm: Path, tmp_path: Path) -> None:
    from berth_dev.devstack.helm import chart_dir

    with pytest.raises(DevStackError, match="needs kafka.sasl.existingSecret"):
        run_helm(["template", "berth", str(chart_dir()), "--set", "kafka.securityProtocol=SASL_SSL"], helm=helm)
    with pytest.raises(DevStackError, match="securityProtocol"):
        run_helm(["template", "berth", str(chart_dir()), "--set", "kafka.securityProtocol=TLS"], helm=helm)


# --- the apiserver -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(kube_apiserver: KubeConnection) -> Iterator[Any]:
    with kube_apiserver.api_client() as client:
        yield client


def _dynamic(api: Any) -> Any:
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(api)


def _apply(dynamic: Any, doc: dict[str, Any], *, dry_run: bool) -> Any:
    """Server-side apply, as ``kubectl apply --server-side [--dry-run=server]`` does."""
    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    return dynamic.server_side_apply(
        resource,
        body=doc,
        namespace=doc["metadata"].get("namespace"),
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
        dry_run="All" if dry_run else None,
    )


def _ensure_namespace(api: Any, name: str) -> None:
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    try:
        CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def _wait_established(api: Any, names: list[str], timeout: float = 30.0) -> None:
    from kubernetes.client import ApiextensionsV1Api

    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            conditions = ApiextensionsV1Api(api).read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise AssertionError(f"CRDs not Established within {timeout:.0f} s: {sorted(pending)}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def crds_installed(api: Any, committed: list[dict[str, Any]]) -> list[str]:
    """The chart's CRDs, applied for real (the custom resources' kinds must exist first)."""
    dynamic = _dynamic(api)
    names = []
    for doc in committed:
        if doc["kind"] == "CustomResourceDefinition":
            _apply(dynamic, doc, dry_run=False)
            names.append(doc["metadata"]["name"])
    _wait_established(api, names)
    return names


def _dry_run_all(api: Any, documents: list[dict[str, Any]]) -> list[str]:
    dynamic = _dynamic(api)  # discovery after the CRDs exist
    accepted = []
    for doc in documents:
        if doc["kind"] == "CustomResourceDefinition":
            continue
        result = _apply(dynamic, doc, dry_run=True)
        assert result.metadata.name == doc["metadata"]["name"]
        accepted.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return accepted


def test_rendered_manifests_apply_with_server_side_dry_run(
    api: Any, committed: list[dict[str, Any]], crds_installed: list[str]
) -> None:
    from kubernetes.client import AppsV1Api
    from kubernetes.client.exceptions import ApiException

    assert sorted(crds_installed) == ["agentpools.berth.io", "podgroups.scheduling.x-k8s.io"]
    _ensure_namespace(api, RELEASE_NAMESPACE)
    accepted = _dry_run_all(api, committed)
    assert len(accepted) == len(committed) - len(crds_installed)
    assert {name.split("/")[0] for name in accepted} >= {
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "Job",
        "PodDisruptionBudget",
    }
    with pytest.raises(ApiException) as missing:  # a dry run persists nothing
        AppsV1Api(api).read_namespaced_deployment("berth-decision", RELEASE_NAMESPACE)
    assert missing.value.status == 404


def test_a_release_with_tls_sasl_and_pools_applies_with_server_side_dry_run(
    helm: Path, api: Any, crds_installed: list[str]
) -> None:
    from berth_dev.devstack.helm import chart_dir

    namespace = "berth-values-test"
    text = run_helm(
        [
            "template",
            "gpu-sched",
            str(chart_dir()),
            "--namespace",
            namespace,
            "--set",
            "kafka.securityProtocol=SASL_SSL",
            "--set",
            "kafka.sasl.existingSecret=kafka-user",
            "--set",
            "kafka.tls.existingSecret=kafka-ca",
            "--set",
            "database.sslmode=verify-full",
            "--set",
            "migrations.enabled=false",
            "--set",
            "audit.replicas=2",
            "--set-json",
            'pools={"serving/llama-70b": {"tokens_per_second_per_replica": 2000, "ttft_slo_ms": 2000}}',
            "--set-json",
            'tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
        ],
        helm=helm,
    )
    documents = _documents(text)
    assert not [doc for doc in documents if doc["kind"] == "Job"]
    _ensure_namespace(api, namespace)
    accepted = _dry_run_all(api, documents)
    assert "Deployment/gpu-sched-berth-audit" in accepted


#: The Prometheus Operator's ServiceMonitor kind, just enough of it for the apiserver to accept (and
#: type-check a little of) the chart's ServiceMonitor: written here, not the operator's CRD.
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                                "required": ["selector", "endpoints"],
                                "properties": {
                                    "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    "endpoints": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                            "properties": {
                                                "port": {"type": "string"},
                                                "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                                                "scrapeTimeout": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def service_monitor_crd(api: Any) -> Iterator[str]:
    """The minimal ServiceMonitor CRD, applied for real; removed afterwards."""
    from kubernetes.client import ApiextensionsV1Api

    _apply(_dynamic(api), SERVICE_MONITOR_CRD, dry_run=False)
    name = SERVICE_MONITOR_CRD["metadata"]["name"]
    _wait_established(api, [name])
    yield name
    with contextlib.suppress(Exception):
        ApiextensionsV1Api(api).delete_custom_resource_definition(name)


@pytest.fixture(scope="module")
def everything_on(helm: Path) -> list[dict[str, Any]]:
    text = run_helm(
        [
            "template",
            "gpu",
            str(chart_dir()),
            "--namespace",
            "berth-platform",
            "-f",
            str(chart_dir() / "ci" / "everything-on-values.yaml"),
        ],
        helm=helm,
    )
    return _documents(text)


def test_the_everything_on_release_applies_with_server_side_dry_run(
    api: Any, everything_on: list[dict[str, Any]], crds_installed: list[str], service_monitor_crd: str
) -> None:
    for namespace in {doc["metadata"].get("namespace") for doc in everything_on} - {None}:
        _ensure_namespace(api, namespace)
    accepted = _dry_run_all(api, everything_on)
    assert "ServiceMonitor/gpu-sched" in accepted
    assert {
        f"PodDisruptionBudget/gpu-sched-{c}" for c in ("ingest", "token-lag", "decision", "binder", "audit")
    } <= set(accepted)
    assert {
        f"Deployment/gpu-sched-{c}" for c in ("ingest", "inventory", "token-lag", "decision", "binder", "audit")
    } <= set(accepted)
    assert len(accepted) == len(everything_on)
    (monitor,) = [doc for doc in everything_on if doc["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["namespace"] == "monitoring"


def test_the_apiserver_refuses_a_bad_service_monitor_interval(api: Any, service_monitor_crd: str) -> None:
    """The dry run above means something: the minimal CRD does check what it declares."""
    from kubernetes.client.exceptions import ApiException

    _ensure_namespace(api, "monitoring")
    bad = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "bad-interval", "namespace": "monitoring"},
        "spec": {"selector": {}, "endpoints": [{"port": "metrics", "interval": "soon"}]},
    }
    with pytest.raises(ApiException) as refused:
        _apply(_dynamic(api), bad, dry_run=True)
    assert refused.value.status == 422 and "interval" in str(refused.value.body)


RESTRICTED_NAMESPACE = "berth-restricted"


def _pods_of(documents: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """A Pod for each Deployment's and Job's template, as their controllers would create."""
    pods = []
    for doc in documents:
        if doc["kind"] in ("Deployment", "Job"):
            template = doc["spec"]["template"]
            spec = {
                key: value for key, value in template["spec"].items() if key != "priorityClassName"
            }  # the Priority admission wants the class to exist
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": doc["metadata"]["name"],
                        "namespace": namespace,
                        "labels": template["metadata"]["labels"],
                    },
                    "spec": spec,
                }
            )
    return pods


@pytest.fixture(scope="module")
def restricted_namespace(api: Any) -> str:
    from kubernetes.client import CoreV1Api

    _ensure_namespace(api, RESTRICTED_NAMESPACE)
    CoreV1Api(api).patch_namespace(
        RESTRICTED_NAMESPACE,
        {
            "metadata": {
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                }
            }
        },
    )
    return RESTRICTED_NAMESPACE


@pytest.mark.parametrize("values", ["default", "everything-on"])
def test_every_pod_meets_the_restricted_pod_security_standard(
    api: Any,
    committed: list[dict[str, Any]],
    everything_on: list[dict[str, Any]],
    restricted_namespace: str,
    values: str,
) -> None:
    pods = _pods_of(committed if values == "default" else everything_on, restricted_namespace)
    assert len(pods) == 7  # six services and the migration Job
    dynamic = _dynamic(api)
    for pod in pods:
        _apply(dynamic, pod, dry_run=True)


def test_the_restricted_standard_refuses_a_privileged_override(helm: Path, api: Any, restricted_namespace: str) -> None:
    from kubernetes.client.exceptions import ApiException

    text = run_helm(
        [
            "template",
            "berth",
            str(chart_dir()),
            "--namespace",
            RELEASE_NAMESPACE,
            "--set",
            "binder.securityContext.allowPrivilegeEscalation=true",
        ],
        helm=helm,
    )
    (pod,) = [p for p in _pods_of(_documents(text), restricted_namespace) if p["metadata"]["name"] == "berth-binder"]
    with pytest.raises(ApiException) as refused:
        _apply(_dynamic(api), pod, dry_run=True)
    assert refused.value.status == 403 and "allowPrivilegeEscalation" in str(refused.value.body)


# --- least privilege, for real -----------------------------------------------------------------


@pytest.fixture(scope="module")
def rbac_installed(api: Any, committed: list[dict[str, Any]], crds_installed: list[str]) -> Iterator[None]:
    """The rendered ServiceAccounts, Roles and bindings applied for real; removed afterwards (the
    namespace stays: without a namespace controller a deleted namespace never goes away)."""
    _ensure_namespace(api, RELEASE_NAMESPACE)
    dynamic = _dynamic(api)
    applied = [doc for doc in committed if doc["kind"] in RBAC_KINDS]
    for doc in applied:
        _apply(dynamic, doc, dry_run=False)
    yield
    for doc in reversed(applied):
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        with contextlib.suppress(Exception):
            dynamic.delete(resource, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))


def _allowed(
    api: Any,
    account: str,
    verb: str,
    resource: str,
    *,
    group: str = "",
    subresource: str = "",
    namespace: str | None = "team-a",
) -> bool:
    """What the apiserver's authorizer answers for ServiceAccount ``berth/<account>``."""
    from kubernetes.client import AuthorizationV1Api

    review = AuthorizationV1Api(api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{RELEASE_NAMESPACE}:{account}",
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{RELEASE_NAMESPACE}",
                    "system:authenticated",
                ],
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                    **({"namespace": namespace} if namespace else {}),
                },
            },
        }
    )
    return bool(review.status.allowed)


# (account, verb, resource, group, subresource, namespace, allowed)
ACCESS = [
    ("berth-binder", "create", "pods", "", "binding", "team-a", True),
    ("berth-binder", "patch", "pods", "", "status", "team-a", True),
    ("berth-binder", "create", "pods", "", "eviction", "team-a", True),
    ("berth-binder", "get", "pods", "", "", "team-a", True),
    ("berth-binder", "get", "nodes", "", "", None, True),
    ("berth-binder", "create", "events", "", "", "team-a", True),
    ("berth-binder", "create", "events", "events.k8s.io", "", "team-a", True),
    ("berth-binder", "patch", "nodes", "", "", None, True),
    ("berth-binder", "patch", "deployments", "apps", "scale", "team-a", True),
    ("berth-binder", "get", "statefulsets", "apps", "scale", "team-a", True),
    ("berth-binder", "patch", "agentpools", "berth.io", "scale", "team-a", True),
    ("berth-binder", "delete", "nodes", "", "", None, False),
    ("berth-binder", "delete", "pods", "", "", "team-a", False),
    ("berth-binder", "list", "pods", "", "", "team-a", False),
    ("berth-binder", "list", "nodes", "", "", None, True),  # its node informer
    ("berth-binder", "watch", "nodes", "", "", None, True),
    ("berth-binder", "watch", "pods", "", "", None, False),
    ("berth-binder", "update", "deployments", "apps", "", "team-a", False),
    ("berth-binder", "patch", "agentpools", "berth.io", "", "team-a", False),
    ("berth-binder", "get", "secrets", "", "", "team-a", False),
    ("berth-ingest", "watch", "pods", "", "", None, True),
    ("berth-ingest", "list", "nodes", "", "", None, True),
    ("berth-ingest", "watch", "podgroups", "scheduling.x-k8s.io", "", None, True),
    ("berth-ingest", "watch", "agentpools", "berth.io", "", None, True),
    ("berth-ingest", "watch", "poddisruptionbudgets", "policy", "", None, True),
    ("berth-ingest", "list", "priorityclasses", "scheduling.k8s.io", "", None, True),
    ("berth-ingest", "create", "leases", "coordination.k8s.io", "", RELEASE_NAMESPACE, True),
    ("berth-ingest", "create", "leases", "coordination.k8s.io", "", "kube-system", False),
    ("berth-ingest", "update", "leases", "coordination.k8s.io", "", RELEASE_NAMESPACE, False),  # no name: any lease
    ("berth-ingest", "create", "pods", "", "binding", "team-a", False),
    ("berth-ingest", "patch", "nodes", "", "", None, False),
    ("berth-ingest", "get", "secrets", "", "", RELEASE_NAMESPACE, False),
    *[
        (f"berth-{component}", verb, resource, group, "", namespace, False)
        for component in ("decision", "inventory", "token-lag", "audit")
        for verb, resource, group, namespace in [
            ("get", "pods", "", "team-a"),
            ("list", "nodes", "", None),
            ("create", "leases", "coordination.k8s.io", RELEASE_NAMESPACE),
            ("get", "configmaps", "", RELEASE_NAMESPACE),
        ]
    ],
]


@pytest.mark.parametrize(
    ("account", "verb", "resource", "group", "subresource", "namespace", "allowed"),
    ACCESS,
    ids=[f"{a}-{v}-{r}{'/' + s if s else ''}-{'allowed' if ok else 'denied'}" for a, v, r, _g, s, _n, ok in ACCESS],
)
def test_least_privilege_per_component(
    api: Any,
    rbac_installed: None,
    account: str,
    verb: str,
    resource: str,
    group: str,
    subresource: str,
    namespace: str | None,
    allowed: bool,
) -> None:
    assert _allowed(api, account, verb, resource, group=group, subresource=subresource, namespace=namespace) is allowed


def test_ingest_may_update_its_own_lease_only(api: Any, rbac_installed: None) -> None:
    from kubernetes.client import AuthorizationV1Api

    def update(namespace: str, name: str) -> bool:
        review = AuthorizationV1Api(api).create_subject_access_review(
            {
                "spec": {
                    "user": f"system:serviceaccount:{RELEASE_NAMESPACE}:berth-ingest",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": {
                        "verb": "update",
                        "group": "coordination.k8s.io",
                        "resource": "leases",
                        "namespace": namespace,
                        "name": name,
                    },
                }
            }
        )
        return bool(review.status.allowed)

    assert update(RELEASE_NAMESPACE, "berth-ingest")
    assert not update(RELEASE_NAMESPACE, "kube-scheduler")
    assert not update("kube-system", "berth-ingest")


@contextlib.contextmanager
def _client_as(kube: KubeConnection, admin_api: Any, account: str, tmp_path: Path) -> Iterator[Any]:
    """An API client authenticated as ServiceAccount ``berth/<account>``: with a token of its own
    (TokenRequest) on our control plane, by impersonation on a cluster from BERTH_KUBECONFIG."""
    from kubernetes.client import ApiClient

    user = f"system:serviceaccount:{RELEASE_NAMESPACE}:{account}"
    if kube.control_plane is not None:
        path = kube.control_plane.service_account_kubeconfig(
            RELEASE_NAMESPACE, account, tmp_path / f"{account}.kubeconfig"
        )
        with KubeConnection.from_kubeconfig(path).api_client(pool_size=2) as client:
            yield client
        return
    client = ApiClient(admin_api.configuration)
    client.set_default_header("Impersonate-User", user)
    client.set_default_header("Impersonate-Group", "system:serviceaccounts")
    try:
        yield client
    finally:
        client.close()


def test_service_account_tokens_bind_watch_and_are_refused_as_the_roles_say(
    kube_apiserver: KubeConnection, api: Any, rbac_installed: None, tmp_path: Path
) -> None:
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    namespace, node, pod = "deploy-rbac-test", "deploy-rbac-node", "deploy-rbac-pod"
    admin = CoreV1Api(api)
    _ensure_namespace(api, namespace)
    admin.create_node({"metadata": {"name": node}})
    admin.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": pod},
            "spec": {"schedulerName": "berth", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        },
    )
    try:
        uid = admin.read_namespaced_pod(pod, namespace).metadata.uid
        # pods/{name}/binding with the pod's UID as precondition, as the binder and kube-scheduler do.
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }

        with _client_as(kube_apiserver, api, "berth-ingest", tmp_path) as ingest_api:
            ingest = CoreV1Api(ingest_api)
            assert pod in [p.metadata.name for p in ingest.list_namespaced_pod(namespace).items]
            with pytest.raises(ApiException) as refused:
                ingest.create_namespaced_pod_binding(pod, namespace, binding, _preload_content=False)
            assert refused.value.status == 403

        with _client_as(kube_apiserver, api, "berth-decision", tmp_path) as decision_api:
            with pytest.raises(ApiException) as refused:
                CoreV1Api(decision_api).read_namespaced_pod(pod, namespace)
            assert refused.value.status == 403

        with _client_as(kube_apiserver, api, "berth-binder", tmp_path) as binder_api:
            binder = CoreV1Api(binder_api)
            with pytest.raises(ApiException) as refused:
                binder.delete_node(node)
            assert refused.value.status == 403
            # The client fails decoding a Binding response (kubernetes-client/python#825): raw body.
            assert binder.read_node(node).metadata.name == node
            response = binder.create_namespaced_pod_binding(pod, namespace, binding, _preload_content=False)
            assert response.status == 201
        assert admin.read_namespaced_pod(pod, namespace).spec.node_name == node
    finally:
        with contextlib.suppress(ApiException):
            admin.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            admin.delete_node(node)
