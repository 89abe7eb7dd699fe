"""The Kubernetes backend when nothing answers: every operation is retryable, nothing raises."""

from __future__ import annotations

import socket

from berth.schemas import PodPlacement
from berth.services.binder.kube_backend import KubeBackend
from berth.services.binder.ports import OutcomeKind
from berth.services.binder.ratelimit import TokenBucket
from kubernetes.client import ApiClient, Configuration


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: connections are refused


async def test_an_apiserver_that_does_not_answer_is_a_transient_error():
    configuration = Configuration(host=f"https://127.0.0.1:{closed_port()}")
    backend = KubeBackend(
        ApiClient(configuration), limiter=TokenBucket(0, 1), workers=2, timeout_s=2, sync_timeout_s=0.5
    )
    target = PodPlacement(pod_uid="u", namespace="ml", name="p", node="n", gpu_devices=(0,))
    try:
        outcomes = [
            await backend.bind(target),
            await backend.check_bind(target),
            await backend.evict("ml", "p", "u"),
            await backend.nominate(target),
            await backend.scale("ml", "pool", 2),
            await backend.cordon("n"),
            await backend.report_unschedulable("ml", "p", None, "0/1 nodes"),
        ]
    finally:
        await backend.close()
    assert [o.kind for o in outcomes] == [OutcomeKind.RETRYABLE] * 7
    assert all("kube-apiserver did not answer" in o.reason for o in outcomes), [o.reason for o in outcomes]


async def test_requests_carry_the_body_as_built_the_path_and_fresh_credentials():
    """Bodies go out as :mod:`kube_outcomes` built them (a field the generated models do not know
    survives), to the operation's path under the server's; a rotated token is used once
    ``AUTH_REFRESH_S`` have passed, or at once after a 401."""
    from unittest import mock

    from berth.services.binder.kube_transport import AUTH_REFRESH_S

    sent: list[dict[str, object]] = []
    statuses = iter([201, 200, 401, 200])

    async def request(method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        sent.append({"method": method, "url": url, "body": body, "headers": dict(headers or {})})
        response = mock.Mock(status=next(statuses), headers={"Content-Type": "application/json"})
        response.read = mock.AsyncMock(return_value=b'{"kind": "Status", "status": "Success"}')
        return response

    now = [100.0]
    configuration = Configuration(host="https://apiserver.test:6443")
    configuration.api_key = {"authorization": "Bearer first"}
    client = ApiClient(configuration)
    backend = KubeBackend(client, limiter=TokenBucket(0, 1), workers=1, timeout_s=2, monotonic=lambda: now[0])
    backend._api._rest.request = request
    target = PodPlacement(pod_uid="u", namespace="ml", name="p-1", node="n", gpu_devices=(0,))
    body = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}, "berthOnly": True}
    try:
        reply = await backend._api.send("POST", "/api/v1/namespaces/ml/pods/p/binding", body)
        configuration.api_key = {"authorization": "Bearer second"}
        await backend.cordon("gpu-1")  # the token read moments ago is still used
        now[0] += AUTH_REFRESH_S
        await backend.nominate(target)  # read again: "second", which the server refuses (401)
        configuration.api_key = {"authorization": "Bearer third"}
        await backend.cordon("gpu-2")  # read again after the 401
    finally:
        await backend.close()
    assert reply.status == 201 and reply.body == {"kind": "Status", "status": "Success"}, reply
    assert [(s["method"], s["url"]) for s in sent] == [
        ("POST", "https://apiserver.test:6443/api/v1/namespaces/ml/pods/p/binding"),
        ("PATCH", "https://apiserver.test:6443/api/v1/nodes/gpu-1"),
        ("PATCH", "https://apiserver.test:6443/api/v1/namespaces/ml/pods/p-1/status"),
        ("PATCH", "https://apiserver.test:6443/api/v1/nodes/gpu-2"),
    ]
    assert sent[0]["body"] is body
    tokens = [s["headers"]["authorization"] for s in sent]
    assert tokens == ["Bearer first", "Bearer first", "Bearer second", "Bearer third"]
    assert [s["headers"]["Content-Type"] for s in sent] == [
        "application/json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/merge-patch+json",
    ]
    assert all(s["headers"]["User-Agent"] == client.user_agent for s in sent)
