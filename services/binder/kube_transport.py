"""Sending requests to the Kubernetes API for :class:`~.kube_backend.KubeBackend`.

The official client is synchronous: each request runs on a thread of a pool of our own (as many
threads as the ApiClient has pooled connections, sized for ``--max-in-flight``; asyncio's default
executor would cap it at a handful on a small machine). Every request first takes a token from a
limiter, so ``--qps``/``--burst`` bound the API rate as client-go's flags do. The answer, whatever
it is (an error status, no answer at all), comes back as a :class:`~.kube_outcomes.Reply`; reading
it is :mod:`.kube_outcomes`' business.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import Counter, Histogram

from berth.metrics import labelled

from . import kube_outcomes as k
from .kube_outcomes import Reply
from .ratelimit import TokenBucket

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

T = TypeVar("T")

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
    """Requests on ``api_client`` from ``workers`` threads, each after a token from ``limiter``
    (or the limiter a request names), each allowed ``timeout_s``. Owns the thread pool
    (:meth:`shutdown`), not the client."""

    def __init__(self, api_client: ApiClient, *, limiter: TokenBucket, workers: int, timeout_s: float) -> None:
        self.limiter = limiter
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube-api")
        self._host = api_client.configuration.host.split("://", 1)[-1]

    async def send(
        self,
        method: str,
        call: Callable[..., Any],
        *args: Any,
        limiter: TokenBucket | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> Reply:
        """One API request: a token (from ``limiter``, default the main one; ``deferrable``: after
        the bindings queued for one, see :class:`TokenBucket`), then ``call`` on the pool; never
        raises for an answer."""
        bucket = limiter or self.limiter
        await (bucket.acquire(deferrable=True) if deferrable else bucket.acquire())
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        reply = await loop.run_in_executor(self._pool, lambda: self._invoke(call, args, kwargs))
        labelled(REQUESTS, str(reply.status), method, self._host).inc()
        labelled(REQUEST_LATENCY, method, self._host).observe(time.perf_counter() - started)
        return reply

    def _invoke(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Reply:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = _unchecked(call)(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
            try:
                return k.reply_of(response.status, response.data, dict(response.headers or {}))
            finally:
                response.release_conn()
        except ApiException as exc:
            return k.reply_of_exception(exc)
        except (HTTPError, OSError) as exc:  # timeouts, refused and reset connections, TLS errors
            return Reply(0, None, f"{type(exc).__name__}: {exc}", unreachable=_no_connection(exc))

    async def run_blocking(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on one of the pool's threads (no token taken)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    def shutdown(self) -> None:
        """Wait for the requests under way; those not started are cancelled."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _unchecked(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` without the generated client's argument checks, when it has them.

    Each API method of the official client (37) is wrapped in pydantic's ``validate_call``, which
    builds the body's model (``V1Binding``, ``EventsV1Event``, ...) from the dict given, only for the
    client to turn it back into a dict before sending: a fifth of the binder's time under load. The
    bodies come from :mod:`.kube_outcomes` and the apiserver validates them anyway; the method's
    own serialisation (path, query, headers, authentication) still runs.
    """
    raw = getattr(getattr(call, "__func__", None), "raw_function", None)
    if raw is None:
        return call
    api = getattr(call, "__self__")  # noqa: B009 -- a bound method (it has __func__); mypy sees a Callable
    return functools.partial(raw, api)


def _no_connection(exc: BaseException) -> bool:
    """True when no connection to the apiserver could be made or kept (refused, reset, closed
    mid-request), as while it restarts; False for a request that timed out, TLS errors and the rest."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

    reason = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
    return isinstance(reason, (NewConnectionError, ProtocolError, ConnectionError))
