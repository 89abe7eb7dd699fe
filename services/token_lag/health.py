"""The token-lag faust worker's readiness (``/readyz``), served on faust's own loop.

- ``kafka-group``: the app's consumer group has assigned this worker partitions and is not
  rebalancing. A worker that came out of a rebalance with none (more workers than partitions) is a
  warm standby and ready: it takes partitions over when another worker goes away.
- ``tables``: the recovery of the app's tables from their changelogs has completed (faust
  processes no event before), and no recovery is under way after a later rebalance.

See :func:`berth.health.faust_checks` and :func:`berth.health.attach_to_faust` (the server starts
with the app, before its tables recover, so that /livez answers during a long recovery).
"""

from __future__ import annotations

from typing import Any

from berth.health import HealthServer, attach_to_faust, faust_checks


def serve_health(app: Any, port: int | None) -> HealthServer:
    """Register the readiness checks of faust ``app`` and serve them on ``port`` (None: not
    served) from the app's start until it stops."""
    health = HealthServer("token-lag")
    for name, check in faust_checks(app):
        health.add_readiness(name, check)
    attach_to_faust(app, health, port)
    return health
