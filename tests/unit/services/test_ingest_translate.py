"""Ingest's pure parts: API objects → contract events, the relist diff, the Lease rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from berth.schemas import topic_for_event
from berth.schemas.cluster import NodeObserved, NodeRemoved, PodDeleted, PodObserved
from berth.schemas.envelope import decode, encode
from berth.schemas.policy import PolicyObserved, PolicyRemoved
from berth.services.ingest.lease import ExpiryWatch, LeaseRecord, decide, lease_body
from berth.services.ingest.service import IngestConfig, route_published
from berth.services.ingest.translate import (
    event_identity,
    event_scope,
    fold_published,
    identity,
    last_write_time,
    observe,
    relist_steps,
    remember,
    watch_steps,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)


def pod(
    name: str,
    *,
    uid: str | None = None,
    scheduler: str = "berth",
    node: str | None = None,
    phase: str | None = None,
    rv: str = "10",
    cpu: str = "1",
    priority_class: str | None = None,
    priority: int | None = None,
    namespace: str = "ml",
) -> dict:
    spec: dict = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    if priority is not None:
        spec["priority"] = priority
        spec["preemptionPolicy"] = "Never"
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "resourceVersion": rv,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "time": "2026-01-01T00:00:30Z"}],
        },
        "spec": spec,
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def node(name: str, *, rv: str = "5", gpus: str = "8") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"nvidia.com/gpu.product": "H100"},
        },
        "status": {
            "capacity": {"cpu": "64", "nvidia.com/gpu": gpus},
            "allocatable": {"cpu": "64", "nvidia.com/gpu": gpus},
        },
    }


def agent_pool(name: str, replicas: int = 2) -> dict:
    return {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "serving", "resourceVersion": "7"},
        "spec": {
            "model": "llama-70b",
            "replicas": replicas,
            "ttftSloMs": 500,
            "gpuRequirements": {"type": "H100", "count": 2},
        },
    }


# --- which pods are visible ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, visible",
    [
        (pod("berth-pending"), True),
        (pod("berth-bound", node="n1"), True),
        (pod("other-pending", scheduler="default-scheduler"), False),
        (pod("other-bound", scheduler="default-scheduler", node="n1"), True),
        (pod("berth-done", node="n1", phase="Succeeded"), False),
        (pod("other-failed", scheduler="default-scheduler", node="n1", phase="Failed"), False),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_berth_pods_and_every_bound_running_pod_are_visible(obj, visible):
    event = observe("pods", obj, observed_at=T0)
    assert (event is not None) == visible
    if visible:
        assert isinstance(event, PodObserved)
        assert event.pod.uid == obj["metadata"]["uid"]
        assert event.resource_version == "10"
        assert event.pod.requests == {"cpu": 1000}
        assert event.observed_at == T0


def test_other_scheduler_names_can_be_berths():
    obj = pod("p", scheduler="berth-gpu")
    assert observe("pods", obj, observed_at=T0) is None
    assert observe("pods", obj, observed_at=T0, scheduler_names=frozenset({"berth-gpu"})) is not None


def test_a_live_pods_priority_is_what_admission_resolved_even_without_its_class():
    # The apiserver copied the class's value into spec.priority; the class itself is not at hand.
    event = observe("pods", pod("p", priority_class="serving-critical", priority=100000), observed_at=T0)
    assert event.pod.priority == 100000
    assert event.pod.priority_class_name == "serving-critical"
    assert event.pod.preemption_policy == "Never"


def test_nodes_and_each_policy_kind_convert():
    observed = observe("nodes", node("gpu-1"), observed_at=T0)
    assert isinstance(observed, NodeObserved)
    assert observed.node.allocatable["nvidia.com/gpu"] == 8 and observed.resource_version == "5"
    cases = {
        "podgroups": ({"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 4}}, "PodGroup"),
        "priorityclasses": ({"metadata": {"name": "high"}, "value": 1000}, "PriorityClass"),
        "resourcequotas": (
            {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}},
            "ResourceQuota",
        ),
        "limitranges": (
            {
                "metadata": {"name": "l", "namespace": "ml"},
                "spec": {"limits": [{"type": "Container", "max": {"cpu": "4"}}]},
            },
            "LimitRange",
        ),
        "poddisruptionbudgets": (
            {
                "metadata": {"name": "b", "namespace": "ml"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}},
            },
            "PodDisruptionBudget",
        ),
        "agentpools": (agent_pool("llama"), "AgentPool"),
        "namespaces": ({"metadata": {"name": "team-a", "labels": {"tier": "prod"}}}, "Namespace"),
    }
    for resource, (obj, kind) in cases.items():
        event = observe(resource, obj, observed_at=T0)
        assert isinstance(event, PolicyObserved) and event.kind == kind, resource
        assert event.partition_key == identity(resource, obj)
        assert event_scope(event)[0] == resource


def test_agent_pool_events_carry_the_spec_and_round_trip_the_contract():
    event = observe("agentpools", agent_pool("llama"), observed_at=T0)
    assert event.agent_pool.spec["ttftSloMs"] == 500
    assert list(event.agent_pool.spec) == sorted(event.agent_pool.spec)  # keys kept sorted
    record = encode(event, source="tests")
    assert decode(topic_for_event(event), record.key, record.value, record.headers).event == event
    gone = PolicyRemoved(kind="AgentPool", namespace="serving", name="llama", observed_at=T0)
    assert (
        decode(topic_for_event(gone), *(lambda r: (r.key, r.value, r.headers))(encode(gone, source="t"))).event == gone
    )
    assert event_identity(gone) == event_identity(event) == "AgentPool/serving/llama"


def test_namespace_events_carry_labels_for_namespace_selectors_and_are_cluster_scoped():
    known: dict = {}
    ns = {"metadata": {"name": "team-a", "resourceVersion": "3", "labels": {"tier": "prod"}}}
    added = watch_steps(known, "namespaces", "ADDED", ns, observed_at=T0)
    [step] = added.steps
    assert step.event.namespace_info.labels == {"kubernetes.io/metadata.name": "team-a", "tier": "prod"}
    assert event_scope(step.event) == ("namespaces", "") and step.key == "Namespace//team-a"
    remember(known, added.steps)
    relabelled = {"metadata": {"name": "team-a", "resourceVersion": "4", "labels": {"tier": "dev"}}}
    [change] = watch_steps(known, "namespaces", "MODIFIED", relabelled, observed_at=T1).steps
    assert change.event.namespace_info.labels["tier"] == "dev"
    remember(known, (change,))
    [gone] = watch_steps(known, "namespaces", "DELETED", relabelled, observed_at=T1).steps
    assert gone.event == PolicyRemoved(kind="Namespace", namespace="", name="team-a", observed_at=T1)
    record = encode(change.event, source="tests")
    assert decode(topic_for_event(change.event), record.key, record.value, record.headers).event == change.event


# --- watch events ------------------------------------------------------------------------------


def test_watch_events_publish_changes_once_and_deletions_of_what_was_published():
    known: dict = {}
    added = watch_steps(known, "pods", "ADDED", pod("a"), observed_at=T0)
    assert [type(s.event) for s in added.steps] == [PodObserved]
    remember(known, added.steps)
    # A status-only update (new resourceVersion, same scheduling facts) publishes nothing.
    assert watch_steps(known, "pods", "MODIFIED", pod("a", rv="11"), observed_at=T1).steps == ()
    bound = watch_steps(known, "pods", "MODIFIED", pod("a", rv="12", node="n1"), observed_at=T1)
    assert bound.steps[0].event.pod.node_name == "n1"
    remember(known, bound.steps)
    deleted = watch_steps(known, "pods", "DELETED", pod("a", rv="13", node="n1"), observed_at=T1)
    assert deleted.steps[0].event == PodDeleted(uid="uid-a", namespace="ml", name="a", node_name="n1", observed_at=T1)
    remember(known, deleted.steps)
    assert known == {}
    # Deleting what was never published (another scheduler's pending pod) publishes nothing.
    assert watch_steps(known, "pods", "DELETED", pod("x", scheduler="default-scheduler"), observed_at=T1).steps == ()
    assert watch_steps(known, "pods", "BOOKMARK", {"metadata": {"resourceVersion": "99"}}, observed_at=T1).steps == ()


def test_a_pod_that_finishes_is_deleted_for_the_scheduler():
    known: dict = {}
    remember(known, watch_steps(known, "pods", "ADDED", pod("job", node="n1"), observed_at=T0).steps)
    done = watch_steps(known, "pods", "MODIFIED", pod("job", node="n1", phase="Succeeded"), observed_at=T1)
    assert isinstance(done.steps[0].event, PodDeleted) and done.steps[0].event.node_name == "n1"


def test_an_unconvertible_object_is_reported_and_treated_as_absent():
    known: dict = {}
    remember(known, watch_steps(known, "pods", "ADDED", pod("a"), observed_at=T0).steps)
    broken = watch_steps(known, "pods", "MODIFIED", pod("a", cpu="two cores"), observed_at=T1)
    assert "spec.containers[0].resources.requests.cpu" in broken.problems[0]
    assert isinstance(broken.steps[0].event, PodDeleted)


# --- relist ------------------------------------------------------------------------------------


def test_relist_publishes_what_changed_while_away_removals_first():
    known: dict = {}
    remember(known, relist_steps(known, "pods", [pod("a"), pod("b"), pod("c")], observed_at=T0).steps)
    assert sorted(known) == ["uid-a", "uid-b", "uid-c"]
    # Away: b deleted, c bound, d created; a unchanged.
    diff = relist_steps(known, "pods", [pod("d"), pod("c", node="n2", rv="20"), pod("a", rv="15")], observed_at=T1)
    assert [(type(s.event).__name__, s.key) for s in diff.steps] == [
        ("PodDeleted", "uid-b"),
        ("PodObserved", "uid-c"),
        ("PodObserved", "uid-d"),
    ]
    remember(known, diff.steps)
    assert sorted(known) == ["uid-a", "uid-c", "uid-d"]
    assert relist_steps(known, "pods", [pod("d"), pod("c", node="n2"), pod("a")], observed_at=T1).steps == ()


def test_relist_of_nodes_and_policies_removes_by_name():
    known: dict = {}
    remember(known, relist_steps(known, "nodes", [node("n1"), node("n2")], observed_at=T0).steps)
    diff = relist_steps(known, "nodes", [node("n1", gpus="4")], observed_at=T1)
    assert [type(s.event) for s in diff.steps] == [NodeRemoved, NodeObserved]
    policies: dict = {}
    remember(policies, relist_steps(policies, "agentpools", [agent_pool("a"), agent_pool("b")], observed_at=T0).steps)
    diff = relist_steps(policies, "agentpools", [agent_pool("a", replicas=3)], observed_at=T1)
    assert diff.steps[0].event == PolicyRemoved(kind="AgentPool", namespace="serving", name="b", observed_at=T1)
    assert diff.steps[1].event.agent_pool.spec["replicas"] == 3


def test_folding_published_events_gives_what_downstream_holds():
    known: dict = {}
    first = observe("pods", pod("a"), observed_at=T0)
    second = observe("pods", pod("b"), observed_at=T0)
    for event in (first, second, PodDeleted(uid="uid-a", namespace="ml", name="a", observed_at=T1)):
        fold_published(known, event)
    assert known == {"uid-b": second}
    routed = route_published([second, observe("nodes", node("n1"), observed_at=T0)], [("pods", "ml"), ("nodes", "")])
    assert routed == {
        ("pods", "ml"): {"uid-b": second},
        ("nodes", ""): {"n1": observe("nodes", node("n1"), observed_at=T0)},
    }
    # A pod of a namespace no watcher covers is left alone (not deleted by a relist).
    assert route_published([second], [("pods", "other")]) == {("pods", "other"): {}}


def test_scopes_split_namespaced_resources_only():
    config = IngestConfig(
        identity="i",
        lease_namespace="x",
        namespaces=("a", "b"),
        resources=("pods", "nodes", "priorityclasses", "agentpools"),
    )
    assert config.scopes() == [
        ("pods", "a"),
        ("pods", "b"),
        ("nodes", ""),
        ("priorityclasses", ""),
        ("agentpools", "a"),
        ("agentpools", "b"),
    ]
    with pytest.raises(ValueError, match="unknown resource"):
        IngestConfig(identity="i", lease_namespace="x", resources=("secrets",))


def test_last_write_time_reads_managed_fields():
    assert last_write_time(pod("a")) == datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    assert last_write_time(node("n")) is None


# --- lease rules -------------------------------------------------------------------------------


def record(holder: str | None, renew: str = "t1", transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration_s=15, renew_time=renew, transitions=transitions, resource_version="1")


def test_lease_decisions():
    assert decide(None, identity="me", expired=False) == "create"
    assert decide(record("me"), identity="me", expired=False) == "renew"
    assert decide(record("other"), identity="me", expired=False) == "wait"
    assert decide(record("other"), identity="me", expired=True) == "take"
    assert decide(record(None), identity="me", expired=False) == "take"


def test_expiry_is_judged_by_our_clock_from_when_the_record_last_changed():
    watch = ExpiryWatch()
    assert not watch.expired(record("other", "t1"), now=100.0)
    assert not watch.expired(record("other", "t1"), now=114.9)
    assert not watch.expired(record("other", "t2"), now=115.0)  # renewed: the count restarts
    assert not watch.expired(record("other", "t2"), now=129.9)
    assert watch.expired(record("other", "t2"), now=130.0)


def test_lease_body_for_acquire_and_release():
    body = lease_body(
        namespace="ns", name="l", holder="me", duration_s=15, transitions=2, now=T0, acquire=True, resource_version="42"
    )
    assert body["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "leaseTransitions": 2,
        "renewTime": "2026-01-01T00:00:00.000000Z",
        "acquireTime": "2026-01-01T00:00:00.000000Z",
    }
    assert body["metadata"]["resourceVersion"] == "42"
    released = lease_body(namespace="ns", name="l", holder=None, duration_s=15, transitions=2, now=T0, acquire=False)
    assert "holderIdentity" not in released["spec"] and released["spec"]["leaseDurationSeconds"] == 1
