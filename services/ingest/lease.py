"""One active ingest through a ``coordination.k8s.io/v1`` Lease (client-go's leader election rules).

Pure rules first, then :class:`LeaseElector` (the I/O).

- A lease is free when it does not exist, names no holder (released), or is *expired*: its
  record (holder, renewTime, transitions) has not changed for ``leaseDurationSeconds`` as
  measured by OUR monotonic clock since we first saw that record. Like client-go, this never
  compares our wall clock with the holder's, so clock skew between machines cannot make two
  leaders.
- Every write carries the ``resourceVersion`` it read: of two candidates racing for a free lease
  the apiserver accepts one and answers 409 Conflict to the other.
- The leader renews every ``retry_period``; if it cannot renew within ``renew_deadline`` (shorter
  than the lease duration) it steps down *before* anybody else may take over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from berth.logs import get_logger

from .kubeapi import LEASES, ApiException, KubeApi

log = get_logger(__name__)

Action = Literal["create", "renew", "take", "wait"]


@dataclass(frozen=True)
class LeaseRecord:
    """The parts of a Lease that decide who leads, plus the version to write against."""

    holder: str | None
    duration_s: int
    renew_time: str | None
    transitions: int
    resource_version: str

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or None,
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )

    @property
    def fingerprint(self) -> tuple[Any, ...]:
        """What changes whenever the holder renews (or a new holder takes over)."""
        return (self.holder, self.renew_time, self.transitions)


class ExpiryWatch:
    """Tracks when we first saw the current lease record, to judge expiry by our own clock."""

    def __init__(self) -> None:
        self._fingerprint: tuple[Any, ...] | None = None
        self._since: float = 0.0

    def expired(self, record: LeaseRecord, now: float) -> bool:
        """Whether ``record`` has stood unchanged for its whole duration by ``now`` (monotonic)."""
        if record.fingerprint != self._fingerprint:
            self._fingerprint, self._since = record.fingerprint, now
            return False
        return now - self._since >= record.duration_s


def decide(record: LeaseRecord | None, *, identity: str, expired: bool) -> Action:
    """What a candidate does on seeing ``record``: create a missing lease, renew its own, take a
    free one (released or expired), or wait for the holder."""
    if record is None:
        return "create"
    if record.holder == identity:
        return "renew"
    if record.holder is None or expired:
        return "take"
    return "wait"


def micro_time(when: datetime) -> str:
    """A metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(
    *,
    namespace: str,
    name: str,
    holder: str | None,
    duration_s: int,
    transitions: int,
    now: datetime,
    acquire: bool,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """The Lease to write. ``acquire`` stamps ``acquireTime`` (a new holder); ``holder`` None
    releases it (and a 1 s duration lets the next candidate in at once, as client-go does)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    spec: dict[str, Any] = {
        "leaseDurationSeconds": duration_s if holder else 1,
        "renewTime": micro_time(now),
        "leaseTransitions": transitions,
    }
    if holder:
        spec["holderIdentity"] = holder
    if acquire:
        spec["acquireTime"] = micro_time(now)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


class LeaseElector:
    """Acquire, hold and release one Lease. Methods are coroutines; API calls run in threads."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not 0 < retry_period_s < renew_deadline_s < duration_s:
            raise ValueError(
                f"need retry period ({retry_period_s} s) < renew deadline ({renew_deadline_s} s) "
                f"< lease duration ({duration_s} s), so a leader steps down before its lease "
                "can be taken"
            )
        self.api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s, self.renew_deadline_s, self.retry_period_s = duration_s, renew_deadline_s, retry_period_s
        self.monotonic, self.wall_clock = monotonic, wall_clock
        self.is_leader = False
        self._expiry = ExpiryWatch()
        self._last_renewal = 0.0
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def _path(self) -> str:
        return f"{LEASES.collection(self.namespace)}/{self.name}"

    async def try_once(self) -> bool:
        """One round: read the lease and act on it. True if we hold it afterwards."""
        try:
            obj = await asyncio.to_thread(self.api.get, self._path)
            record: LeaseRecord | None = LeaseRecord.from_object(obj)
        except ApiException as exc:
            if exc.status != 404:
                raise
            record = None
        now = self.monotonic()
        expired = record is not None and self._expiry.expired(record, now)
        action = decide(record, identity=self.identity, expired=expired)
        if action == "wait":
            return False
        assert action == "create" or record is not None
        body = lease_body(
            namespace=self.namespace,
            name=self.name,
            holder=self.identity,
            duration_s=self.duration_s,
            transitions=(record.transitions + (action == "take")) if record else 0,
            now=self.wall_clock(),
            acquire=action != "renew",
            resource_version=record.resource_version if record else None,
        )
        try:
            if action == "create":
                await asyncio.to_thread(self.api.request, "POST", LEASES.collection(self.namespace), (), body)
            else:
                await asyncio.to_thread(self.api.request, "PUT", self._path, (), body)
        except ApiException as exc:
            if exc.status in (409, 422):
                return False  # somebody else wrote first; look again next round
            raise
        if action != "renew":
            self._log.info("lease acquired", action=action)
        self._last_renewal = now
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until we hold the lease (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            try:
                if await self.try_once():
                    self.is_leader = True
                    return True
            except Exception as exc:
                self._log.warning("lease check failed", error=f"{type(exc).__name__}: {exc}"[:300])
            try:
                await asyncio.wait_for(stop.wait(), self.retry_period_s)
            except TimeoutError:
                pass
        return False

    async def hold(self) -> None:
        """Renew until the lease is lost; returns then (with ``is_leader`` False)."""
        while True:
            await asyncio.sleep(self.retry_period_s)
            try:
                if await self.try_once():
                    continue
                self._log.warning("lease taken by another instance; stepping down")
                break
            except Exception as exc:
                self._log.warning("lease renewal failed", error=f"{type(exc).__name__}: {exc}"[:300])
            if self.monotonic() - self._last_renewal >= self.renew_deadline_s:
                self._log.warning(
                    "lease not renewed within the deadline; stepping down", deadline_s=self.renew_deadline_s
                )
                break
        self.is_leader = False

    async def release(self) -> None:
        """Give the lease up (on a clean stop) so a standby takes over at once, not after expiry."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            obj = await asyncio.to_thread(self.api.get, self._path)
            record = LeaseRecord.from_object(obj)
            if record.holder != self.identity:
                return
            body = lease_body(
                namespace=self.namespace,
                name=self.name,
                holder=None,
                duration_s=1,
                transitions=record.transitions,
                now=self.wall_clock(),
                acquire=False,
                resource_version=record.resource_version,
            )
            await asyncio.to_thread(self.api.request, "PUT", self._path, (), body)
            self._log.info("lease released")
        except Exception as exc:
            self._log.warning("lease release failed; it expires by itself", error=f"{type(exc).__name__}: {exc}"[:300])
