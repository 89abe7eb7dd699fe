"""The apiserver as raw JSON: GET/POST/PUT of any path and streaming watches (synchronous).

Why raw JSON rather than the typed client: the converters in :mod:`berth.kube.manifests` read the
same camelCase dicts a manifest holds, and the typed models would cost a deserialisation of every
pod only to be turned back into a dict. The official client still does what it is good at:
reading kubeconfigs (tokens, client certificates, exec plugins, in-cluster service accounts) and
authenticating requests (``param_serialize``/``call_api``).

Everything here blocks: callers run it in threads (``asyncio.to_thread``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

__all__ = ["ApiException", "KubeApi", "Path", "api_client_from_kubeconfig", "close_stream", "lines"]

Query = Sequence[tuple[str, Any]]


@dataclass(frozen=True)
class Path:
    """Where a resource lives: ``/api/v1`` or ``/apis/<group>/<version>``, and its plural."""

    prefix: str
    plural: str
    namespaced: bool

    def collection(self, namespace: str | None = None) -> str:
        """The list/watch path, across all namespaces unless ``namespace`` is given."""
        if self.namespaced and namespace:
            return f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.prefix}/{self.plural}"


#: Every resource ingest watches (plural → path).
PATHS: dict[str, Path] = {
    "pods": Path("/api/v1", "pods", True),
    "nodes": Path("/api/v1", "nodes", False),
    "podgroups": Path("/apis/scheduling.x-k8s.io/v1alpha1", "podgroups", True),
    "priorityclasses": Path("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "resourcequotas": Path("/api/v1", "resourcequotas", True),
    "limitranges": Path("/api/v1", "limitranges", True),
    "poddisruptionbudgets": Path("/apis/policy/v1", "poddisruptionbudgets", True),
    "agentpools": Path("/apis/berth.io/v1alpha1", "agentpools", True),
    "namespaces": Path("/api/v1", "namespaces", False),
}
LEASES = Path("/apis/coordination.k8s.io/v1", "leases", True)


class KubeApi:
    """Raw JSON access to one apiserver through an official-client ``ApiClient`` (not closed here).

    Errors are the client's :class:`ApiException` with ``status`` (404, 409, 410 ...) and the
    apiserver's Status ``body``; connection failures are urllib3/OS errors.
    """

    def __init__(self, client: ApiClient, *, request_timeout_s: float = 30.0) -> None:
        self.client = client
        self.request_timeout_s = request_timeout_s

    def _send(self, method: str, path: str, query: Query = (), body: Any = None, timeout: Any = None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        method, url, headers, body, post = self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.client.call_api(
            method,
            url,
            header_params=headers,
            body=body,
            post_params=post,
            _request_timeout=timeout or self.request_timeout_s,
        )
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def request(self, method: str, path: str, query: Query = (), body: Any = None) -> dict[str, Any]:
        """One request; the response body as a dict."""
        response = self._send(method, path, query, body)
        return json.loads(response.read() or b"{}")

    def get(self, path: str, query: Query = ()) -> dict[str, Any]:
        return self.request("GET", path, query)

    def open_watch(self, path: str, query: Query, *, read_timeout_s: float) -> Any:
        """Start a watch; returns the urllib3 response to read lines from (see :func:`lines`).
        ``read_timeout_s`` must exceed the watch's ``timeoutSeconds`` (the server ends it)."""
        response = self._send(
            "GET", path, [*query, ("watch", "true")], timeout=(self.request_timeout_s, read_timeout_s)
        )
        return response.response


def lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON documents of a streaming watch response, as they arrive.

    ``response.stream`` yields each HTTP chunk as soon as it is read, so an event is handed on
    without waiting for a buffer to fill.
    """
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def close_stream(response: Any) -> None:
    """End a watch stream from any thread: shutting the socket down unblocks a thread still
    reading it (a plain close would not). A stream that already ended just goes back to the pool."""
    try:
        response.shutdown()
    except (RuntimeError, ValueError, OSError):
        pass  # already released, or nothing to shut down
    try:
        response.release_conn()
    except Exception:
        pass


def api_client_from_kubeconfig(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """An ``ApiClient`` from ``kubeconfig`` (and ``context``), else the in-cluster service
    account, else ``~/.kube/config``. The error says which were tried."""
    from kubernetes.client import Configuration
    from kubernetes.config import ConfigException, load_incluster_config, load_kube_config

    configuration = Configuration()
    if kubeconfig:
        load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
        )
        return ApiClient(configuration)
    try:
        load_incluster_config(client_configuration=configuration)
    except ConfigException as in_cluster:
        try:
            load_kube_config(context=context, client_configuration=configuration, persist_config=False)
        except (ConfigException, OSError) as default:
            raise ConfigException(
                f"no Kubernetes credentials: not in a cluster ({in_cluster}) and no usable "
                f"~/.kube/config ({default}); pass --kubeconfig PATH"
            ) from default
    return ApiClient(configuration)
