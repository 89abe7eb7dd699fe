"""The cluster simulator as a :class:`~berth.services.binder.ports.ClusterBackend`, over its Kubernetes-shaped HTTP API.

The simulator answers as kube-apiserver would (see ``berth_dev.cluster_sim.api``), so this is
also the blueprint of the Kubernetes backend: the same requests, the same reading of answers.

HTTP status → outcome: 2xx applied; 404 conflict (for evict: applied, the pod is already gone);
409 conflict — for a binding, after reading the pod back: already bound to the same node with the
same UID is applied (a re-application); 429 and 5xx, timeouts and connection errors retryable;
any other 4xx (400, 401, 403, 422) permanent.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from berth.schemas import PodPlacement
from berth.services.binder.ports import ANNOTATION_GPU_MILLI, KeepIf, Outcome, Preemptor

from berth.kube.manifests import ANNOTATION_GPU_DEVICES


def _message(status: int, body: Any, text: str) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return f"HTTP {status}: {text[:200]}" if text else f"HTTP {status}"


def _classify(status: int, message: str) -> Outcome:
    if 200 <= status < 300:
        return Outcome.applied()
    if status in (404, 409):
        return Outcome.conflict(message)
    if status == 429 or status >= 500:
        return Outcome.retryable(message)
    return Outcome.permanent(message)


class SimulatorBackend:
    """HTTP client of the simulator at ``base_url`` (e.g. ``http://127.0.0.1:8470``).

    The simulator has no pod status conditions, nominations or events: :meth:`nominate` and
    :meth:`report_unschedulable` answer applied without a request (``nominated`` keeps what was
    asked, for tests). Its own consumers learn unschedulable verdicts from the decisions topic.
    """

    meters_requests = False

    def __init__(self, base_url: str, *, timeout_s: float = 10.0, connections: int = 64) -> None:
        self.base_url = base_url.rstrip("/")
        self.nominated: list[PodPlacement] = []
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Created lazily: a session must be made inside the running event loop.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(limit=self._connections)
            )
        return self._session

    async def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any, str]:
        """(status, parsed JSON or None, text); a transport failure is status 0."""
        try:
            async with self._client().request(
                method, self.base_url + path, json=body, headers={"Content-Type": content_type}
            ) as response:
                text = await response.text()
                try:
                    parsed = await response.json(content_type=None) if text else None
                except ValueError:
                    parsed = None
                return response.status, parsed, text
        except (aiohttp.ClientError, TimeoutError) as exc:
            return 0, None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    async def _outcome(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Outcome]:
        status, parsed, text = await self._request(method, path, body, content_type)
        if status == 0:
            return 0, Outcome.retryable(f"simulator at {self.base_url} unreachable: {text}")
        return status, _classify(status, _message(status, parsed, text))

    async def _read_pod(self, placement: PodPlacement) -> Outcome:
        """Compare the pod as it is now with the placement (check_bind's contract)."""
        path = f"/api/v1/namespaces/{placement.namespace}/pods/{placement.name}"
        status, body, text = await self._request("GET", path)
        if status == 0:
            return Outcome.retryable(f"simulator at {self.base_url} unreachable: {text}")
        if status != 200:
            return _classify(status, _message(status, body, text))
        if not isinstance(body, dict):
            return Outcome.retryable(f"unreadable pod {placement.namespace}/{placement.name}: {text[:200]}")
        uid = (body.get("metadata") or {}).get("uid")
        node = (body.get("spec") or {}).get("nodeName")
        if uid != placement.pod_uid:
            return Outcome.conflict(f"UID in precondition: {placement.pod_uid}, UID in object meta: {uid}")
        if node and node != placement.node:
            return Outcome.conflict(f"pod {placement.namespace}/{placement.name} is already assigned to node {node!r}")
        return Outcome.applied("already bound" if node == placement.node else "")

    async def bind(self, placement: PodPlacement) -> Outcome:
        annotations = {}
        if placement.gpu_devices:
            annotations[ANNOTATION_GPU_DEVICES] = ",".join(str(d) for d in placement.gpu_devices)
        if placement.gpu_milli is not None:
            annotations[ANNOTATION_GPU_MILLI] = str(placement.gpu_milli)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": placement.name,
                "namespace": placement.namespace,
                "uid": placement.pod_uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": placement.node},
        }
        status, outcome = await self._outcome(
            "POST", f"/api/v1/namespaces/{placement.namespace}/pods/{placement.name}/binding", binding
        )
        if status == 409:
            # A re-application of our own binding gets "already assigned" too: read the pod to
            # tell it from a real conflict. If the pod itself looks bindable, something else was in
            # the way (e.g. the node is gone): keep the server's message.
            current = await self._read_pod(placement)
            if current.is_applied and current.reason != "already bound":
                return outcome
            return current
        return outcome

    async def check_bind(self, placement: PodPlacement) -> Outcome:
        return await self._read_pod(placement)

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str | None = None,
        preemptor: Preemptor | None = None,
        keep_if: KeepIf | None = None,
    ) -> Outcome:
        # keep_if is not checked: the simulated cluster's pods have no volumes.
        eviction: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            eviction["deleteOptions"] = {"preconditions": {"uid": uid}}
        status, outcome = await self._outcome("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", eviction)
        return Outcome.applied("already gone") if status == 404 else outcome

    async def scale(self, namespace: str, pool: str, replicas: int) -> Outcome:
        _, outcome = await self._outcome(
            "PATCH",
            f"/apis/berth.io/v1alpha1/namespaces/{namespace}/agentpools/{pool}/scale",
            {"spec": {"replicas": replicas}},
            "application/merge-patch+json",
        )
        return outcome

    async def cordon(self, node: str) -> Outcome:
        _, outcome = await self._outcome(
            "PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}}, "application/merge-patch+json"
        )
        return outcome

    async def nominate(self, placement: PodPlacement) -> Outcome:
        self.nominated.append(placement)
        return Outcome.applied()

    async def report_unschedulable(self, namespace: str, name: str, uid: str | None, message: str) -> Outcome:
        return Outcome.applied("the simulator keeps no pod conditions")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
