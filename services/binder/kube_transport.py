"""Sending requests to the Kubernetes API for :class:`~.kube_backend.KubeBackend`.

Requests go out on the event loop through the official client's asyncio REST client
(``kubernetes.aio``, on aiohttp), configured from the binder's ``ApiClient``: its server, TLS
material, proxy, default headers and credentials. The credentials are read again (the client's
refresh hook: a rotated ServiceAccount token, an exec plugin's new token) every
``AUTH_REFRESH_S`` and after any 401, as client-go re-reads a token file at most once a minute:
the official client's hook re-reads the whole kubeconfig each time, which per request would cost
more than the request. Each request names its method and API path
(:mod:`.kube_paths`) and carries its body as built by :mod:`.kube_outcomes`: the generated
per-endpoint methods would validate every argument with pydantic and walk the body again before
sending it. Measured against a real kube-apiserver 1.34, a binding and its event cost the binder
1.1 ms of CPU through the synchronous methods on threads, 0.8 through the asyncio methods, and
0.6 this way.

Every request first takes a token from a limiter, so ``--qps``/``--burst`` bound the API rate as
client-go's flags do; at most ``max_in_flight`` are on the wire at once (the connection pool).
The answer, whatever it is (an error status, no answer at all), comes back as a
:class:`~.kube_outcomes.Reply`; reading it is :mod:`.kube_outcomes`' business.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from prometheus_client import Counter, Histogram

from berth.metrics import labelled

from . import kube_outcomes as k
from .kube_outcomes import Reply
from .ratelimit import TokenBucket

if TYPE_CHECKING:
    from kubernetes.aio.client.rest import RESTClientObject
    from kubernetes.client import ApiClient, Configuration

T = TypeVar("T")

JSON = "application/json"
AUTH_REFRESH_S = 10.0
"""Credentials are read again this long after they were last read (and after a 401)."""

# client-go's metric names (k8s.io/client-go/tools/metrics): the meaning is the same.
REQUESTS = Counter(
    "rest_client_requests_total",
    "Kubernetes API requests of the binder, by status code (0: no answer), method and host.",
    ["code", "method", "host"],
)
REQUEST_LATENCY = Histogram(
    "rest_client_request_duration_seconds",
    "Kubernetes API request latency in seconds, by verb and host.",
    ["verb", "host"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


class KubeTransport:
    """Requests to the apiserver of ``api_client``'s configuration, each after a token from
    ``limiter`` (or the limiter a request names), each allowed ``timeout_s``, at most
    ``max_in_flight`` at once. Owns its connections (:meth:`close`), not ``api_client``."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        limiter: TokenBucket,
        max_in_flight: int,
        timeout_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limiter = limiter
        self.timeout_s = timeout_s
        self._configuration = api_client.configuration
        self._server = self._configuration.host.rstrip("/")
        self._host = self._server.split("://", 1)[-1]
        self._default_headers: dict[str, str] = api_client.default_headers
        """The client's own (its User-Agent, and any set on it, such as impersonation), read per request."""
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._rest = _rest_client(self._configuration, max_in_flight)
        self._monotonic = monotonic
        self._auth: dict[str, str] = {}
        self._auth_read_at: float | None = None

    async def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        limiter: TokenBucket | None = None,
        deferrable: bool = False,
    ) -> Reply:
        """``method path`` with ``body`` (JSON-encoded as ``content_type``): a token first (from
        ``limiter``, default the main one; ``deferrable``: after the bindings queued for one, see
        :class:`TokenBucket`); never raises for an answer or the lack of one."""
        bucket = limiter or self.limiter
        await (bucket.acquire(deferrable=True) if deferrable else bucket.acquire())
        started = time.perf_counter()
        reply = await self._request(method, path, body, content_type)
        labelled(REQUESTS, str(reply.status), method, self._host).inc()
        labelled(REQUEST_LATENCY, method, self._host).observe(time.perf_counter() - started)
        return reply

    async def _request(self, method: str, path: str, body: Any, content_type: str) -> Reply:
        headers = {**self._default_headers, "Accept": JSON, "Content-Type": content_type, **self._credentials()}
        try:
            response = await self._rest.request(
                method, self._server + path, headers=headers, body=body, _request_timeout=self._timeout
            )
            try:
                data = await response.read()
            finally:
                response.response.release()
            if response.status == 401:
                self._auth_read_at = None
            return k.reply_of(response.status, data, response.headers)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Reply(0, None, f"{type(exc).__name__}: {exc}", unreachable=_no_connection(exc))

    def _credentials(self) -> dict[str, str]:
        """The authentication headers, read again when ``AUTH_REFRESH_S`` have passed or a 401 came."""
        now = self._monotonic()
        if self._auth_read_at is None or now - self._auth_read_at >= AUTH_REFRESH_S:
            settings = self._configuration.auth_settings().values()
            self._auth = {s["key"]: s["value"] for s in settings if s.get("in") == "header" and s.get("value")}
            self._auth_read_at = now
        return self._auth

    async def run_blocking(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on a thread of the loop's default executor (no token taken)."""
        return await asyncio.to_thread(function, *args)

    async def close(self) -> None:
        """Close the connections (requests still under way fail as unanswered)."""
        await self._rest.close()


def _rest_client(configuration: Configuration, max_in_flight: int) -> RESTClientObject:
    """The official asyncio REST client for the server, TLS material and proxy of
    ``configuration`` (the synchronous client's), without retries of its own: the binder retries,
    knowing which operations are safe to repeat.

    The proxy is the one the synchronous configuration chose (its ``proxy``, from the kubeconfig
    or ``HTTPS_PROXY``, unless ``NO_PROXY`` covers the server), so aiohttp is not asked to read
    the environment again: with ``trust_env`` it does so on every request (a third of the binder's
    CPU per binding).
    """
    from kubernetes.aio.client import Configuration as AsyncConfiguration
    from kubernetes.aio.client.rest import RESTClientObject
    from kubernetes.client.rest import should_bypass_proxies

    proxy = configuration.proxy
    if proxy and should_bypass_proxies(configuration.host, getattr(configuration, "no_proxy", None) or ""):
        proxy = None
    settings = AsyncConfiguration(
        host=configuration.host,
        ssl_ca_cert=configuration.ssl_ca_cert,
        ca_cert_data=getattr(configuration, "ca_cert_data", None),
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify_ssl=configuration.verify_ssl,
        tls_server_name=configuration.tls_server_name,
        proxy=proxy,
        proxy_headers=configuration.proxy_headers if proxy else None,
        connection_pool_maxsize=max_in_flight,
        client_session_kwargs={"trust_env": False},
    )
    return RESTClientObject(settings)


def _no_connection(exc: BaseException) -> bool:
    """True when no connection to the apiserver could be made or kept (refused, reset, closed
    mid-request), as while it restarts; False for a request that timed out, TLS errors and the rest."""
    if isinstance(exc, (aiohttp.ClientSSLError, aiohttp.ServerTimeoutError, TimeoutError)):
        return False
    return isinstance(
        exc,
        (
            aiohttp.ClientConnectorError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientPayloadError,
            aiohttp.ClientOSError,
            ConnectionError,
        ),
    )
