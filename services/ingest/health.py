"""Ingest's readiness (``/readyz``), from its public state.

Ingest consumes no consumer-group topic: it lists and watches the apiserver and, while it holds
the Lease, publishes. So:

- ``apiserver``: the apiserver answers ``GET /version`` within the timeout, through the
  service's own API client (its credentials and TLS).
- ``lease``: the leader is ready once every watcher has done its first list and published the
  difference (its view of the cluster is caught up). An instance that does not hold the Lease is a
  *warm standby*: it is ready too — it has nothing to serve, but it must not be killed, since it is
  the one that takes over within a lease duration when the leader goes away.
"""

from __future__ import annotations

from typing import Any

from berth.health import HealthServer, blocking_check

from .kubeapi import KubeApi


def register(health: HealthServer, service: Any) -> HealthServer:
    """Add ingest's readiness checks to ``health``."""
    api = KubeApi(service.api.client, request_timeout_s=health.check_timeout_s)
    host = service.api.client.configuration.host

    def version() -> tuple[bool, str]:
        info = api.get("/version")
        return True, f"apiserver {host} answers, {info.get('gitVersion', 'unknown version')}"

    health.add_readiness("apiserver", blocking_check(version))

    async def lease() -> tuple[bool, str]:
        if not service.is_leader:
            return True, "standing by: another instance holds the Lease (a warm standby)"
        watchers = dict(service.watchers)
        pending = sorted(
            f"{resource}/{namespace or '*'}"
            for (resource, namespace), watcher in watchers.items()
            if not watcher.synced.is_set()
        )
        if not watchers:
            return False, "leading: reading back what was published before"
        if pending:
            return False, f"leading: first list not published yet for {', '.join(pending)}"
        return True, f"leading: {len(watchers)} watcher(s) listed and watching"

    health.add_readiness("lease", lease)
    return health
