"""The Kubernetes backend's pure half: API answers (status, body) → outcomes, and the bodies it sends.

The answer bodies below are copied from a kube-apiserver 1.34 (see the integration test for the
same cases against the real thing).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from berth.schemas import PodPlacement
from berth.services.binder import kube_outcomes as k
from berth.services.binder.kube_outcomes import Access, Reply
from berth.services.binder.ports import OutcomeKind
from kubernetes.client.exceptions import ApiException

APPLIED, CONFLICT = OutcomeKind.APPLIED, OutcomeKind.CONFLICT
RETRYABLE, PERMANENT = OutcomeKind.RETRYABLE, OutcomeKind.PERMANENT
NOW = datetime(2025, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
BINDING = Access("create", "pods/binding")


def status(code: int, message: str, reason: str = "", **details) -> Reply:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return k.reply_of(code, json.dumps(body))


def placement(**changes) -> PodPlacement:
    fields = dict(pod_uid="uid-1", namespace="ml", name="p1", node="node-a", gpu_devices=(2, 3))
    fields.update(changes)
    return PodPlacement(**fields)


def pod(uid="uid-1", node=None, deleting=False, conditions=None, rv="42") -> dict:
    metadata = {"name": "p1", "namespace": "ml", "uid": uid, "resourceVersion": rv}
    if deleting:
        metadata["deletionTimestamp"] = "2025-05-01T12:00:00Z"
    return {
        "metadata": metadata,
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions or []},
    }


# -- the general mapping --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, kind, words",
    [
        (k.reply_of(201, '{"kind":"Status","status":"Success","code":201}'), APPLIED, ""),
        (status(404, 'pods "p1" not found', "NotFound"), CONFLICT, 'pods "p1" not found'),
        (
            status(409, 'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "n"'),
            CONFLICT,
            "already assigned",
        ),
        (status(429, "Too many requests"), RETRYABLE, "Too many requests"),
        (status(500, "etcdserver: request timed out"), RETRYABLE, "etcdserver"),
        (status(503, "the server is currently unable to handle the request"), RETRYABLE, "unable to handle"),
        (Reply(0, None, "ReadTimeoutError: read timed out"), RETRYABLE, "kube-apiserver did not answer"),
        (status(401, "Unauthorized"), PERMANENT, "credentials were rejected"),
        (
            status(
                403,
                'pods "p1" is forbidden: User "system:serviceaccount:berth:binder" cannot create resource '
                '"pods/binding" in API group "" in the namespace "ml"',
            ),
            PERMANENT,
            'grant the binder\'s account verb "create" on resource "pods/binding" in apiGroups [""]',
        ),
        (
            status(422, 'Binding "p1" is invalid: target.name: Required value'),
            PERMANENT,
            "rejected the request as invalid",
        ),
        (status(400, "bad request"), PERMANENT, "bad request"),
        (k.reply_of(404, "404 page not found\n"), CONFLICT, "HTTP 404: 404 page not found"),
    ],
)
def test_classify(reply, kind, words):
    outcome = k.classify(reply, BINDING)
    assert outcome.kind is kind and words in outcome.reason


def test_429_says_when_to_come_back():
    reply = k.reply_of(429, '{"message": "slow down"}', {"Retry-After": "2"})
    outcome = k.classify(reply, BINDING)
    assert outcome.kind is RETRYABLE and outcome.reason == "slow down (Retry-After: 2 s)"


def test_reply_of_an_api_exception_keeps_status_body_and_headers():
    exc = ApiException(status=409, reason="Conflict")
    exc.body = '{"kind":"Status","message":"Precondition failed: UID in precondition: x","code":409}'
    exc.headers = {"Content-Type": "application/json", "retry-after": "1"}
    reply = k.reply_of_exception(exc)
    assert (reply.status, reply.message, reply.retry_after) == (409, "Precondition failed: UID in precondition: x", "1")
    assert k.reply_of_exception(ApiException(status=500, reason="boom")).message == "HTTP 500"


# -- binding --------------------------------------------------------------------------------------


def test_binding_carries_the_uid_precondition_and_the_devices():
    body = k.binding_body(placement(gpu_devices=(0, 5)))
    assert body["metadata"] == {
        "name": "p1",
        "namespace": "ml",
        "uid": "uid-1",
        "annotations": {"berth.io/gpu-devices": "0,5"},
    }
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    shared = k.binding_body(placement(gpu_devices=(1,), gpu_milli=250))
    assert shared["metadata"]["annotations"] == {"berth.io/gpu-devices": "1", "berth.io/gpu-milli": "250"}
    assert "annotations" not in k.binding_body(placement(gpu_devices=()))["metadata"]


@pytest.mark.parametrize(
    "current, kind, words",
    [
        (pod(), APPLIED, ""),
        (pod(node="node-a"), APPLIED, "already bound"),
        (pod(node="node-b"), CONFLICT, "already assigned to node 'node-b'"),
        (pod(uid="uid-2"), CONFLICT, "UID in precondition: uid-1, UID in object meta: uid-2"),
        (pod(deleting=True), CONFLICT, "is being deleted"),
    ],
)
def test_bindable(current, kind, words):
    outcome = k.bindable(current, placement())
    assert outcome.kind is kind
    assert words in outcome.reason if words else outcome.reason == ""


def test_a_409_on_binding_is_read_back():
    server = k.classify(status(409, 'pod p1 is already assigned to node "node-a"'), BINDING)
    assert k.bind_conflict(pod(node="node-a"), placement(), server).reason == "already bound"
    assert k.bind_conflict(pod(node="node-b"), placement(), server).kind is CONFLICT
    assert k.bind_conflict(None, placement(), server).reason == 'pods "p1" not found'
    # Unbound with our UID, yet refused: a race, so trying again is right.
    assert k.bind_conflict(pod(), placement(), server).kind is RETRYABLE


# -- eviction and nomination ----------------------------------------------------------------------


def test_eviction_body_has_the_uid_precondition_only_when_known():
    assert k.eviction_body("ml", "p1", "uid-1")["deleteOptions"] == {"preconditions": {"uid": "uid-1"}}
    assert "deleteOptions" not in k.eviction_body("ml", "p1", None)


@pytest.mark.parametrize(
    "reply, kind, words",
    [
        (k.reply_of(201, '{"kind":"Status","status":"Success","code":201}'), APPLIED, ""),
        (status(404, 'pods "p1" not found', "NotFound"), APPLIED, "already gone"),
        (
            status(
                409,
                'Operation cannot be fulfilled on Pod "p1": the UID in the precondition (x) does not match the '
                "UID in record (y). The object might have been deleted and then recreated",
            ),
            CONFLICT,
            "might have been deleted and then recreated",
        ),
        (
            status(429, "Cannot evict pod as it would violate the pod's disruption budget.", "TooManyRequests"),
            RETRYABLE,
            "disruption budget",
        ),
        (status(403, 'cannot create resource "pods/eviction"'), PERMANENT, '"pods/eviction"'),
    ],
)
def test_eviction_outcome(reply, kind, words):
    outcome = k.eviction_outcome(reply)
    assert outcome.kind is kind and words in outcome.reason
    # Only a 429 is the cluster's policy refusing (reported as a conflict once retries run out).
    assert outcome.refused is (reply.status == 429)


def test_nomination_sets_the_node_with_the_uid_as_precondition():
    assert k.nominate_patch(placement()) == {"metadata": {"uid": "uid-1"}, "status": {"nominatedNodeName": "node-a"}}
    recreated = status(
        422,
        'Pod "p1" is invalid: metadata.uid: Invalid value: "uid-1": field is immutable',
        "Invalid",
        causes=[{"reason": "FieldValueInvalid", "field": "metadata.uid"}],
    )
    assert k.uid_rejected(recreated)
    outcome = k.nominate_outcome(recreated, placement())
    assert outcome.kind is CONFLICT and "re-created" in outcome.reason
    other = status(422, "invalid", "Invalid", causes=[{"field": "status.nominatedNodeName"}])
    assert not k.uid_rejected(other) and k.nominate_outcome(other, placement()).kind is PERMANENT
    assert k.nominate_outcome(status(404, 'pods "p1" not found'), placement()).kind is CONFLICT


# -- unschedulable --------------------------------------------------------------------------------

MESSAGE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def test_unschedulable_patch_sets_the_condition_at_the_pods_resource_version():
    patch = k.unschedulable_patch(pod(), MESSAGE, NOW)
    assert patch["metadata"] == {"uid": "uid-1", "resourceVersion": "42"}
    assert patch["status"]["conditions"] == [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": MESSAGE,
            "lastProbeTime": None,
            "lastTransitionTime": "2025-05-01T12:00:00Z",
        }
    ]


def test_last_transition_time_moves_only_when_the_status_changes():
    earlier = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "older",
        "lastTransitionTime": "2025-04-30T08:00:00Z",
    }
    still_false = k.unschedulable_patch(pod(conditions=[earlier]), MESSAGE, NOW)
    assert still_false["status"]["conditions"][0]["lastTransitionTime"] == "2025-04-30T08:00:00Z"
    was_true = dict(earlier, status="True")
    assert (
        k.unschedulable_patch(pod(conditions=[was_true]), MESSAGE, NOW)["status"]["conditions"][0]["lastTransitionTime"]
        == "2025-05-01T12:00:00Z"
    )


def test_already_reported_means_exactly_this_message():
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE}
    assert k.already_reported(pod(conditions=[condition]), MESSAGE)
    assert not k.already_reported(pod(conditions=[condition]), MESSAGE.replace("3 Insufficient", "2 Insufficient"))
    assert not k.already_reported(pod(conditions=[dict(condition, reason="SchedulerError")]), MESSAGE)
    assert not k.already_reported(pod(), MESSAGE)


def test_the_json_patch_for_a_pod_never_reported_tests_uid_unbound_and_no_conditions():
    ops = k.unschedulable_json_patch("uid-1", MESSAGE, NOW, None)
    assert ops[:3] == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
        {"op": "test", "path": "/spec/nodeName", "value": None},
        {"op": "test", "path": "/status/conditions", "value": None},
    ]
    assert ops[3] == {
        "op": "add",
        "path": "/status/conditions",
        "value": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": MESSAGE,
                "lastProbeTime": None,
                "lastTransitionTime": "2025-05-01T12:00:00Z",
            }
        ],
    }
    # Without a UID (any pod of that name) there is no UID test; the others stay.
    assert [op["path"] for op in k.unschedulable_json_patch(None, MESSAGE, NOW, None)] == [
        "/spec/nodeName",
        "/status/conditions",
        "/status/conditions",
    ]


def test_the_json_patch_for_a_pod_we_reported_replaces_our_condition_keeping_its_transition_time():
    known = k.ReportedCondition("uid-7", 1, "2025-04-30T08:00:00Z", "older")
    ops = k.unschedulable_json_patch(None, MESSAGE, NOW, known)
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-7"},
        {"op": "test", "path": "/spec/nodeName", "value": None},
        {"op": "test", "path": "/status/conditions/1/type", "value": "PodScheduled"},
        {"op": "test", "path": "/status/conditions/1/status", "value": "False"},
        {
            "op": "replace",
            "path": "/status/conditions/1",
            "value": {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": MESSAGE,
                "lastProbeTime": None,
                "lastTransitionTime": "2025-04-30T08:00:00Z",
            },
        },
    ]


def test_reported_condition_is_read_from_the_patched_pod():
    scheduled_false = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": MESSAGE,
        "lastTransitionTime": "2025-04-30T08:00:00Z",
    }
    other = {"type": "DisruptionTarget", "status": "True"}
    assert k.reported_condition(pod(conditions=[other, scheduled_false])) == k.ReportedCondition(
        "uid-1", 1, "2025-04-30T08:00:00Z", MESSAGE
    )
    assert k.reported_condition(pod(conditions=[dict(scheduled_false, status="True")])) is None
    assert k.reported_condition(pod()) is None


# -- events ---------------------------------------------------------------------------------------


def test_scheduled_event_reads_like_kube_schedulers():
    event = k.scheduled_event(placement(), now=NOW, instance="berth-binder-host")
    assert (event["reason"], event["type"], event["action"], event["note"]) == (
        "Scheduled",
        "Normal",
        "Binding",
        "Successfully assigned ml/p1 to node-a",
    )
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "p1", "uid": "uid-1"}
    assert (event["reportingController"], event["reportingInstance"]) == ("berth", "berth-binder-host")
    assert event["eventTime"] == "2025-05-01T12:00:00.123456Z"
    assert event["metadata"] == {"name": f"p1.{int(NOW.timestamp()) * 10**9 + 123456000:x}", "namespace": "ml"}


def test_failed_scheduling_is_a_warning_with_the_whole_message_within_the_api_limit():
    event = k.failed_scheduling_event("ml", "p1", None, MESSAGE, now=NOW, instance="i")
    assert (event["reason"], event["type"], event["action"], event["note"]) == (
        "FailedScheduling",
        "Warning",
        "Scheduling",
        MESSAGE,
    )
    assert "uid" not in event["regarding"]
    long = k.failed_scheduling_event("ml", "p1", "u", "é" * 2000, now=NOW, instance="i" * 300)
    assert len(long["note"].encode()) <= k.EVENT_NOTE_LIMIT and long["note"].endswith("...")
    assert len(long["reportingInstance"]) == 128
