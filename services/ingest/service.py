"""The ingest service: while it holds the Lease, keep the cluster topics in line with the apiserver.

A *leadership term*: acquire the Lease → read back what ingest published before
(:mod:`.published`) → one :class:`~.watch.ResourceWatcher` per resource (and namespace) lists,
publishes the difference and watches → the term ends when the Lease is lost, a publish fails, or
the service stops; then the watchers are cancelled (their streams shut) before anything else can
be published. Instances that do not hold the Lease publish nothing and wait.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from berth.schemas import Topic
from berth.schemas.topics import NODES, PODS, POLICIES

from berth.bus import EventProducer, ensure_topics
from berth.kube.capacity import SPOT_LABELS, SpotLabel
from berth.logs import get_logger
from berth.settings import KafkaSettings

from .kubeapi import PATHS, KubeApi
from .lease import LeaseElector
from .metrics import LEADER
from .published import read_published
from .translate import DEFAULT_SCHEDULER_NAMES, RESOURCES, Observation, Removal, event_identity, event_scope
from .watch import PublishError, ResourceWatcher

log = get_logger(__name__)

SOURCE = "berth/ingest"
DEFAULT_TOPICS: Mapping[str, Topic] = {"pods": PODS, "nodes": NODES, "policies": POLICIES}


@dataclass(frozen=True)
class IngestConfig:
    """What to watch, how to elect, where to publish. Durations in seconds.

    ``namespaces`` empty means all; cluster-scoped resources (nodes, PriorityClasses) are always
    watched whole. ``topic_names`` overrides contract topic names by role (pods, nodes,
    policies), e.g. for tests; ``BERTH_KAFKA__TOPIC_PREFIX`` still goes before them.
    """

    identity: str
    lease_namespace: str
    lease_name: str = "berth-ingest"
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    namespaces: tuple[str, ...] = ()
    resources: tuple[str, ...] = RESOURCES
    scheduler_names: frozenset[str] = DEFAULT_SCHEDULER_NAMES
    spot_labels: tuple[SpotLabel, ...] = SPOT_LABELS
    """The node labels that mark spot capacity (the providers' own and ``BERTH_SPOT_LABELS``)."""
    topic_names: Mapping[str, str] = field(default_factory=dict)
    source: str = SOURCE
    page_size: int = 500
    watch_timeout_s: int = 300

    def __post_init__(self) -> None:
        unknown = sorted(set(self.resources) - set(RESOURCES))
        if unknown:
            raise ValueError(f"unknown resource(s) {', '.join(unknown)}; choose from {', '.join(RESOURCES)}")
        wrong = sorted(set(self.topic_names) - set(DEFAULT_TOPICS))
        if wrong:
            raise ValueError(f"unknown topic role(s) {', '.join(wrong)}; use pods, nodes or policies")

    @property
    def topics(self) -> dict[str, Topic]:
        """Role → contract topic (renamed where ``topic_names`` says so)."""
        return {
            role: dataclasses.replace(topic, name=self.topic_names[role]) if role in self.topic_names else topic
            for role, topic in DEFAULT_TOPICS.items()
        }

    def scopes(self) -> list[tuple[str, str]]:
        """``(resource, namespace)`` of every watcher; namespace ``""`` means all (or cluster-scoped)."""
        out: list[tuple[str, str]] = []
        for resource in self.resources:
            if PATHS[resource].namespaced and self.namespaces:
                out.extend((resource, namespace) for namespace in self.namespaces)
            else:
                out.append((resource, ""))
        return out


def _role(event: Observation | Removal) -> str:
    resource, _ = event_scope(event)
    return resource if resource in ("pods", "nodes") else "policies"


def route_published(
    events: Sequence[Observation], scopes: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, Observation]]:
    """Hand each published observation to the watcher that owns its object (its namespace's, or
    the all-namespaces one); objects no watcher covers (another configuration's) are left alone."""
    wanted = set(scopes)
    out: dict[tuple[str, str], dict[str, Observation]] = {scope: {} for scope in scopes}
    for event in events:
        resource, namespace = event_scope(event)
        for scope in ((resource, namespace), (resource, "")):
            if scope in wanted:
                out[scope][event_identity(event)] = event
                break
    return out


class IngestService:
    """Runs leadership terms until stopped. ``published`` counts the events this instance sent."""

    def __init__(self, config: IngestConfig, kafka: KafkaSettings, api: KubeApi) -> None:
        self.config = config
        self.kafka = kafka
        self.api = api
        self.elector = LeaseElector(
            api,
            namespace=config.lease_namespace,
            name=config.lease_name,
            identity=config.identity,
            duration_s=config.lease_duration_s,
            renew_deadline_s=config.renew_deadline_s,
            retry_period_s=config.retry_period_s,
        )
        self.topics = config.topics
        self.watchers: dict[tuple[str, str], ResourceWatcher] = {}
        self.published = 0
        self.terms = 0
        self._log = log.bind(identity=config.identity)

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: wait for the Lease, lead, repeat. A clean stop releases the Lease
        so a standby takes over at once; a crash (or cancellation) leaves it to expire."""
        await ensure_topics(self.kafka, list(self.topics.values()))
        async with EventProducer(self.kafka, source=self.config.source) as producer:
            while not stop.is_set():
                if not await self.elector.acquire(stop):
                    break
                LEADER.set(1)
                self.terms += 1
                try:
                    await self._lead(producer, stop)
                except PublishError as exc:
                    self._log.error(
                        "publishing failed; ending the term and starting over from Kafka",
                        error=str(exc.__cause__ or exc)[:500],
                    )
                    await self.elector.release()
                    await _sleep_unless(stop, self.config.retry_period_s)
                finally:
                    LEADER.set(0)
            await self.elector.release()

    async def _lead(self, producer: EventProducer, stop: asyncio.Event) -> None:
        """One leadership term; returns when the Lease is lost or ``stop`` is set."""
        self._log.info("leading: reading back what was published")
        try:
            previous = await read_published(self.kafka, self.topics, source=self.config.source)
        except Exception as exc:
            raise PublishError(f"reading back the cluster topics: {type(exc).__name__}: {exc}") from exc
        scopes = self.config.scopes()
        known = route_published(previous, scopes)

        async def publish(events: Sequence[Observation | Removal]) -> None:
            if not self.elector.is_leader:
                # Renewal failed while this batch was being prepared: a standby may lead already.
                raise PublishError("the lease was lost before publishing")
            try:
                futures = [await producer.send(event, topic=self.topics[_role(event)].name) for event in events]
                for future in futures:
                    await future
            except Exception as exc:
                raise PublishError(f"{type(exc).__name__}: {exc}") from exc
            self.published += len(events)

        self.watchers = {
            scope: ResourceWatcher(
                self.api,
                scope[0],
                publish,
                namespace=scope[1] or None,
                known=known[scope],
                scheduler_names=self.config.scheduler_names,
                spot_labels=self.config.spot_labels,
                page_size=self.config.page_size,
                watch_timeout_s=self.config.watch_timeout_s,
            )
            for scope in scopes
        }
        tasks = {asyncio.create_task(watcher.run(), name=f"watch {scope}") for scope, watcher in self.watchers.items()}
        holder = asyncio.create_task(self.elector.hold(), name="lease")
        stopper = asyncio.create_task(stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait({*tasks, holder, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*tasks, holder, stopper):
                task.cancel()
            await asyncio.gather(*tasks, holder, stopper, return_exceptions=True)
        for task in done & tasks:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # the task is done with an exception (checked above)
        if holder in done:
            self._log.warning("lease lost; standing by")


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
