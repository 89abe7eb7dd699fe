"""The binder's readiness (``/readyz``), from its public state.

- ``commands-consumer``: the group (``berth-binder`` by default) has assigned it partitions of
  ``berth.scheduler.commands.v1`` and it has caught up: its position on each is within
  :data:`~berth.health.DEFAULT_MAX_LAG` records of the log end (last stable offset) seen when
  the partitions were assigned. An idle member of the group (more binders than partitions) is a
  ready standby. Once caught up it stays ready until its assignment changes.
- ``decisions-consumer`` (only with ``--report-unschedulable``): the same for its second group
  (``<group>-decisions``), assigned only (it starts at the end of the topic anyway).
- ``cluster-api``: the cluster answers a cheap request within the timeout: ``GET /version``
  through the Kubernetes backend's own API client (outside the request rate limit), or the
  cluster simulator's ``/healthz``. A backend with neither (an in-memory fake) has nothing to ask.
"""

from __future__ import annotations

from typing import Any

from berth.health import DEFAULT_CHECK_TIMEOUT_S, ConsumerReadiness, HealthServer, blocking_check


def register(health: HealthServer, service: Any) -> HealthServer:
    """Add the binder's readiness checks to ``health``."""
    names = service.settings.kafka.names
    health.add_readiness("commands-consumer", ConsumerReadiness(service.consumer.raw, group=names.group(service.group)))
    if service.decisions is not None:
        health.add_readiness(
            "decisions-consumer",
            ConsumerReadiness(service.decisions.raw, group=names.group(f"{service.group}-decisions"), max_lag=None),
        )
    check = cluster_check(service.binder.backend, timeout_s=health.check_timeout_s)
    if check is not None:
        health.add_readiness("cluster-api", check)
    return health


def cluster_check(backend: Any, *, timeout_s: float = DEFAULT_CHECK_TIMEOUT_S) -> Any:
    """A check that the cluster behind ``backend`` answers, or None when there is none to ask."""
    api_client = getattr(backend, "api_client", None)
    if api_client is not None:

        def version() -> tuple[bool, str]:
            from kubernetes.client import VersionApi

            info = VersionApi(api_client).get_code(_request_timeout=timeout_s)
            return True, f"apiserver {api_client.configuration.host} answers, {info.git_version}"

        return blocking_check(version)
    base_url = getattr(backend, "base_url", None)
    if isinstance(base_url, str):

        async def simulator() -> tuple[bool, str]:
            import aiohttp

            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
                async with session.get(base_url + "/healthz") as response:
                    if response.status != 200:
                        return False, f"cluster simulator at {base_url}: HTTP {response.status}"
            return True, f"cluster simulator at {base_url} answers"

        return simulator
    return None
