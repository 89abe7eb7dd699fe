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
    configuration.retries = 0  # urllib3 would retry a refused connection itself; the binder retries
    backend = KubeBackend(ApiClient(configuration), limiter=TokenBucket(0, 1), workers=2, timeout_s=2)
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


async def test_bodies_go_out_as_built_without_the_clients_argument_models():
    """The generated client would build a V1Binding from the dict (and refuse a field it does not
    know); the transport sends the dict itself, through the method's own path and headers."""
    from unittest import mock

    from kubernetes.client import CoreV1Api
    from kubernetes.client.rest import RESTResponse

    sent: list[tuple[str, str, object]] = []

    def request(method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        sent.append((method, url, body))
        raw = mock.Mock(status=201, reason="Created", data=b"{}", headers={})
        return RESTResponse(raw)

    client = ApiClient(Configuration(host="https://apiserver.test"))
    client.rest_client.request = request
    backend = KubeBackend(client, limiter=TokenBucket(0, 1), workers=1, timeout_s=2)
    body = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}, "berthOnly": True}
    try:
        with mock.patch("pydantic.main.BaseModel.__init__", side_effect=AssertionError("a model was built")):
            reply = await backend._api.send("POST", CoreV1Api(client).create_namespaced_pod_binding, "p", "ml", body)
    finally:
        await backend.close()
    assert reply.status == 201, reply
    assert sent == [("POST", "https://apiserver.test/api/v1/namespaces/ml/pods/p/binding", body)]
