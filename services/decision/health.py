"""The decision service's readiness (``/readyz``), from its public state.

- ``kafka-group``: the consumer group ``berth-decision`` has assigned this worker its cells
  (partitions of ``berth.scheduler.inputs.v1``). Not ready while joining or while Kafka cannot be
  reached. A member the group left without any cell (more workers than cells) is ready: it is a
  warm standby that takes cells over when another worker goes away, so it must not be killed
  and must not hold a rollout back.
- ``cells``: every assigned cell has its worker, i.e. its rebuild from the cell's log is done and
  its transactional producer is up (``service.workers`` holds the partition). A cell's backlog
  of new inputs is not waited for: deciding it is the worker's job, not a reason to stop it.
"""

from __future__ import annotations

from typing import Any

from berth.health import ConsumerReadiness, HealthServer, group_assignment

from .service import GROUP


def register(health: HealthServer, service: Any) -> HealthServer:
    """Add the decision service's readiness checks to ``health``."""
    group = service.settings.kafka.names.group(GROUP)
    health.add_readiness("kafka-group", ConsumerReadiness(service.consumer.raw, group=group, max_lag=None))

    async def cells() -> tuple[bool, str]:
        assigned = group_assignment(service.consumer.raw)
        if assigned is None:
            return False, f"no cells assigned yet by consumer group {group}"
        if not assigned:
            return True, "no cells assigned: a standby worker"
        partitions = sorted(tp.partition for tp in assigned)
        missing = [p for p in partitions if p not in service.workers]
        if missing:
            return False, (
                f"rebuilding cell(s) {missing} ({len(partitions) - len(missing)} of {len(partitions)} taken over)"
            )
        return True, f"cell(s) {partitions} taken over"

    health.add_readiness("cells", cells)
    return health
