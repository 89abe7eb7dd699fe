"""What the fault tests (issue 15, ``tests/integration/test_faults_*.py``) and the crash tests
share: the simulated pipeline they run, and the invariants every one of them checks at the end.

The invariants (docs/reliability.md):

* **0 accepted events lost**: every event the cluster simulator's producer had acknowledged is on
  Kafka, once (counted by CloudEvents id);
* **0 pods bound twice**: no pod UID in two applied PlacePods commands, and the simulator's bind
  count equals the number of distinct pods those commands bound;
* **0 GPUs over-committed**: the simulator refused no bind for lack of capacity;
* **every decision audited exactly once** and ``berth audit replay`` reproduces each of them;
* **every pod decided**: bound, or unschedulable with kube-scheduler's reason (the replay checks
  that reason against the inputs, so "every pod that fits is bound").
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from berth.services.audit import db
from berth.services.audit.models import DecisionRow, InputRow
from berth_dev.demo import _kafka_counts, _replay, _status, _wait_for_audit
from berth_dev.supervisor import ServiceFailed, Supervisor

from berth.settings import BerthSettings

#: The topics the cluster simulator publishes to (it plays ingest and the gateways).
SIM_TOPICS = (
    "berth.cluster.pods.v1",
    "berth.cluster.nodes.v1",
    "berth.cluster.policies.v1",
    "berth.inference.queue.v1",
    "berth.cloud.spot.v1",
)


# --- reading Kafka -------------------------------------------------------------------------------


GONE = "conflict: pod gone"
"""The status :func:`placements` adds for a conflict that found a pod of the command deleted."""


async def placements(settings: BerthSettings) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """(pod UIDs of each PlacePods command, statuses reported for each command id) from Kafka;
    a conflict because a pod was not found is reported as :data:`GONE` as well."""
    from berth.schemas.scheduler import CommandResult, PlacePods
    from berth.schemas.topics import COMMANDS, RESULTS

    from berth.bus import EventConsumer

    commands: dict[str, list[str]] = {}
    statuses: dict[str, set[str]] = defaultdict(set)
    async with EventConsumer(settings.kafka, [COMMANDS, RESULTS], group_id=None, name="faults-kit") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            event = item.event
            if isinstance(event, PlacePods):
                commands[event.command_id] = [p.pod_uid for p in event.placements]
            elif isinstance(event, CommandResult):
                statuses[event.command_id].add(event.status)
                if event.status == "conflict" and "not found" in event.reason:
                    statuses[event.command_id].add(GONE)
    return commands, statuses


async def results(settings: BerthSettings) -> list[Any]:
    """Every CommandResult on Kafka."""
    from berth.schemas.scheduler import CommandResult
    from berth.schemas.topics import RESULTS

    from berth.bus import EventConsumer

    found = []
    async with EventConsumer(settings.kafka, [RESULTS], group_id=None, name="faults-kit") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            if isinstance(item.event, CommandResult):
                found.append(item.event)
    return found


async def record_ids(settings: BerthSettings, topics: Iterable[str]) -> Counter[str]:
    """How many records carry each CloudEvents id (``ce_id`` header) on ``topics``, read raw (a
    record no consumer could decode still counts)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from berth.bus.streams import partition_counts

    counts = await partition_counts(settings.kafka, topics)
    partitions = [TopicPartition(topic, p) for topic, count in sorted(counts.items()) for p in range(count)]
    consumer = AIOKafkaConsumer(
        **settings.kafka.client_options(), enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    ids: Counter[str] = Counter()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        remaining = {tp for tp in partitions if ends[tp] > 0}
        while remaining:
            batches = await consumer.getmany(*remaining, timeout_ms=2000)
            for tp, records in batches.items():
                for record in records:
                    headers = dict(record.headers or ())
                    ids[(headers.get("ce_id") or b"").decode() or f"{tp.topic}/{tp.partition}/{record.offset}"] += 1
                if records and records[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return ids


# --- the simulated pipeline ------------------------------------------------------------------------


@dataclass
class SimPipeline:
    """audit, inventory, token-lag, decision, ``binder --backend sim`` and ``cluster-sim`` as
    processes, the simulator playing ``max_pods`` pods of the demo workload at ``rate`` per second."""

    services: Supervisor
    sim_url: str
    settings: BerthSettings
    args: dict[str, list[str]] = field(default_factory=dict)

    def status(self) -> dict[str, Any] | None:
        return _status(self.sim_url)

    def wait_until(
        self, check: Callable[[dict[str, Any]], bool], what: str, *, timeout_s: float, all_running: bool = True
    ) -> dict[str, Any]:
        """Poll the simulator's status until ``check(status)``; fail saying ``what`` if a service
        dies (unless ``all_running`` is False: some were stopped on purpose) or ``timeout_s``
        passes."""
        deadline = time.monotonic() + timeout_s
        status = None
        while True:
            if all_running:
                self.services.check_alive()
            status = self.status()
            if status is not None and check(status):
                return status
            if time.monotonic() > deadline:
                raise ServiceFailed(
                    f"{what} not within {timeout_s:.0f} s; last status "
                    f"{ {k: v for k, v in (status or {}).items() if k != 'pods'} } "
                    "pods "
                    f"{(status or {}).get('pods', {}) and {k: v for k, v in status['pods'].items() if k != 'ledger'}}"
                )
            time.sleep(0.5)

    def wait_all_decided(self, *, timeout_s: float) -> dict[str, Any]:
        return self.wait_until(all_pods_decided, "every pod arrived and decided", timeout_s=timeout_s)

    def arrived_fraction(self, status: dict[str, Any]) -> float:
        pods = status["pods"]
        return pods["arrived"] / max(1, pods["workload"])


def all_pods_decided(status: dict[str, Any]) -> bool:
    """Every pod of the workload arrived, and none of Berth's pending pods awaits a verdict (the
    simulator's ``all_decided`` also waits for the rest of its timeline, minutes long here)."""
    pods = status["pods"]
    return pods["arrived"] >= pods["workload"] and pods["undecided"] == 0 and status["watching_decisions"]


def start_sim_pipeline(
    services: Supervisor,
    settings: BerthSettings,
    work: Path,
    *,
    max_pods: int,
    stream_s: float,
    ready_timeout: float = 150.0,
) -> SimPipeline:
    """Start the six processes (all at once, then wait for each: faust workers take a while on two
    cores) and return once the simulator answers. The caller has migrated the database and created
    the topics.

    The simulator plays the demo workload's first ``max_pods`` pods arriving evenly over
    ``stream_s`` real seconds (``--rate``; the rest of the timeline keeps its own times): a steady
    stream for the faults to land in. :func:`all_pods_decided` tells when it is over."""
    import yaml
    from berth_dev.devstack.procs import free_ports
    from berth_dev.workloads import from_documents, generated_documents, pool_policies, write_documents

    documents = generated_documents("demo:1")
    workload, pools = work / "workload.yaml", work / "pools.yaml"
    write_documents(documents, workload)
    pools.write_text(yaml.safe_dump(pool_policies(from_documents(documents, name="demo")), sort_keys=False))
    [sim_port] = free_ports(1)
    sim_url = f"http://127.0.0.1:{sim_port}"
    args = {
        "audit": ["run"],
        "inventory": ["run", "--data-dir", str(work / "inventory")],
        "token-lag": ["run", "--pools", str(pools), "--data-dir", str(work / "token-lag")],
        "decision": ["run", "--pools", str(pools)],
        "binder": ["run", "--backend", "sim", "--sim-url", sim_url],
    }
    for name, service_args in args.items():
        services.start(name, service_args, wait=False)
    for name in args:
        services.services[name].wait_ready(timeout=ready_timeout)
    args["cluster-sim"] = [
        "run",
        "--workload",
        str(workload),
        "--max-pods",
        str(max_pods),
        "--rate",
        f"{max_pods / stream_s:.4f}",
        "--port",
        str(sim_port),
        "--no-progress",
    ]
    services.start("cluster-sim", args["cluster-sim"], ready_timeout=ready_timeout)
    return SimPipeline(services, sim_url, settings, args)


# --- the invariants -------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What the end-of-run checks measured (also printed by the tests, for the report)."""

    pods: dict[str, Any]
    applied_pods: int
    decisions_on_kafka: int
    decisions_in_postgres: int
    inputs_on_kafka: int
    inputs_in_postgres: int
    replayed: int
    mismatches: list[Any]
    sim_events_acked: int
    sim_events_on_kafka: int
    duplicated_sim_events: dict[str, int]


def drain_and_check(pipeline: SimPipeline, *, min_bound: int, audit_timeout_s: float = 240.0) -> Verdict:
    """Stop the binder and the simulator (so the pipeline drains), wait until the audit holds
    everything Kafka holds, then assert every invariant of the module docstring. The audit must
    still run. Returns what was measured."""
    settings = pipeline.settings
    status = pipeline.status()
    assert status is not None and all_pods_decided(status), status
    pipeline.services.services["binder"].stop()
    # A scale command the binder applied just before it stopped creates pool replicas that stay
    # pending: the decision service (still running) places them, but no binder applies that. They
    # count as decided once their placement is on Kafka; a pod with neither a verdict nor a
    # placement after the timeout is a lost event.
    time.sleep(1.0)  # the simulator publishes each change before answering; let the last settle
    deadline = time.monotonic() + 60
    while True:
        status = pipeline.status()
        assert status is not None
        commands, statuses = asyncio.run(placements(settings))
        placed_unapplied = {uid for cid, uids in commands.items() if not statuses.get(cid) for uid in uids}
        unplaced = set(status["pods"]["undecided_uids"]) - placed_unapplied
        if not unplaced or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    status["pods"]["placed_not_applied"] = len(set(status["pods"]["undecided_uids"]) & placed_unapplied)
    status["pods"]["undecided"] = len(unplaced)
    pipeline.services.services["cluster-sim"].stop()
    # And the inventory, whose ticks are the cells' clock: a pod still unschedulable at the end is
    # retried whenever its backoff runs out (a hand-over and a verdict up to ~10 s after the
    # last activity), so while ticks flow no quiet moment is final and a count of decisions
    # taken after one can be short by such a retry.
    pipeline.services.services["inventory"].stop()
    audited = _wait_for_audit(settings, timeout_s=audit_timeout_s)
    inputs_on_kafka, decisions_on_kafka = asyncio.run(_kafka_counts(settings))
    report = _replay(settings)
    commands, statuses = asyncio.run(placements(settings))
    sim_ids = asyncio.run(record_ids(settings, SIM_TOPICS))
    verdict = check_invariants(
        settings,
        status,
        commands,
        statuses,
        min_bound=min_bound,
        audited=audited,
        decisions_on_kafka=decisions_on_kafka,
        inputs_on_kafka=inputs_on_kafka,
        report=report,
        sim_ids=sim_ids,
    )
    return verdict


def _inputs_agreeing(
    settings: BerthSettings, in_postgres: int, on_kafka: int, *, patience_s: float = 30.0
) -> tuple[int, int]:
    """Decision inputs in Postgres and on Kafka, read again until they agree or ``patience_s``
    passes. The inventory keeps publishing its cells' ticks after the run has drained, so an input
    may reach Kafka after the audit was found caught up and before Kafka was counted; the audit
    writes it within a second. An input Kafka holds and the audit never writes keeps them apart."""
    deadline = time.monotonic() + patience_s
    while in_postgres != on_kafka and time.monotonic() < deadline:
        time.sleep(1.0)
        on_kafka = asyncio.run(_kafka_counts(settings))[0]
        engine = db.make_engine(settings.database)
        try:
            with engine.connect() as connection:
                in_postgres = connection.scalar(sa.select(sa.func.count()).select_from(InputRow)) or 0
        finally:
            engine.dispose()
    return in_postgres, on_kafka


def check_invariants(
    settings: BerthSettings,
    status: dict[str, Any],
    commands: dict[str, list[str]],
    statuses: dict[str, set[str]],
    *,
    min_bound: int,
    audited: int,
    decisions_on_kafka: int,
    inputs_on_kafka: int,
    report: Any,
    sim_ids: Counter[str] | None = None,
) -> Verdict:
    pods = status["pods"]
    # (1) No pod bound twice, no GPU over-committed.
    assert status["overcommitted_binds"] == 0, status["overcommitted_binds"]
    applied_by_pod: dict[str, set[str]] = defaultdict(set)
    for command_id, uids in commands.items():
        if "applied" in statuses.get(command_id, ()):
            for uid in uids:
                applied_by_pod[uid].add(command_id)
    placed_twice = {uid: ids for uid, ids in applied_by_pod.items() if len(ids) > 1}
    assert not placed_twice, f"pods bound by more than one applied command: {placed_twice}"
    # Every pod the cluster bound has an applied result, except where the binder lost the answer
    # to its binding (killed, or the apiserver restarted) and the pod finished before the retry:
    # the retry then finds it gone and says so. Only such pods may be bound without one.
    unconfirmed = pods["bound_total"] - len(applied_by_pod)
    gone = {uid for cid, uids in commands.items() if GONE in statuses.get(cid, ()) for uid in uids}
    assert 0 <= unconfirmed <= len(gone - applied_by_pod.keys()), (pods["bound_total"], len(applied_by_pod), gone)
    # (2) Every pod decided; enough of them bound that the run meant something.
    assert pods["undecided"] == 0, {k: v for k, v in pods.items() if k != "ledger"}
    assert pods["bound_total"] >= min_bound, {k: v for k, v in pods.items() if k != "ledger"}
    # (3) No accepted event lost, none written twice.
    duplicated: dict[str, int] = {}
    acked = status.get("events_published", 0)
    on_kafka = 0
    if sim_ids is not None:
        duplicated = {event_id: n for event_id, n in sim_ids.items() if n > 1}
        on_kafka = len(sim_ids)
        assert not duplicated, f"events written twice: {list(duplicated.items())[:5]}"
        assert on_kafka >= acked, f"acknowledged {acked} events, Kafka holds {on_kafka}"
    # (4) Every decision (and every input) on Kafka is in Postgres, once.
    engine = db.make_engine(settings.database)
    try:
        with engine.connect() as connection:
            in_postgres = connection.scalar(sa.select(sa.func.count()).select_from(DecisionRow)) or 0
            distinct = connection.scalar(sa.select(sa.func.count(sa.distinct(DecisionRow.decision_id)))) or 0
            inputs_in_postgres = connection.scalar(sa.select(sa.func.count()).select_from(InputRow)) or 0
    finally:
        engine.dispose()
    assert decisions_on_kafka > 0
    assert audited == in_postgres == decisions_on_kafka == distinct, (
        audited,
        in_postgres,
        decisions_on_kafka,
        distinct,
    )
    inputs_in_postgres, inputs_on_kafka = _inputs_agreeing(settings, inputs_in_postgres, inputs_on_kafka)
    assert inputs_in_postgres == inputs_on_kafka, (inputs_in_postgres, inputs_on_kafka)
    # (5) The audit replays: every decision re-derived from Postgres alone is the same.
    assert report.compared == in_postgres, (report.compared, in_postgres)
    assert report.mismatches == [], report.mismatches[:5]
    return Verdict(
        {k: v for k, v in pods.items() if k != "ledger"},
        len(applied_by_pod),
        decisions_on_kafka,
        in_postgres,
        inputs_on_kafka,
        inputs_in_postgres,
        report.compared,
        report.mismatches,
        acked,
        on_kafka,
        duplicated,
    )


# --- logs and metrics -------------------------------------------------------------------------------


def scrape(port: int, timeout: float = 3.0) -> str:
    """A service's /metrics text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        return response.read().decode()


def metric_value(text: str, name: str, labels: str = "") -> float | None:
    """The value of sample ``name{labels}`` in a /metrics text (``labels`` as written there)."""
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else r"(?:\{\})?") + r" (\S+)"
    match = re.search(r"^" + pattern + r"$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def log_lines(path: Path, needle: str) -> list[str]:
    """Lines of a service's log holding ``needle``."""
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines() if needle in line]


def summary(verdict: Verdict, **extra: Any) -> str:
    """One line for the test's output: what the run did."""
    parts = [
        f"pods {verdict.pods.get('arrived')} arrived, {verdict.pods.get('bound_total')} bound, "
        f"{verdict.pods.get('unschedulable')} unschedulable",
        f"decisions kafka/postgres/replayed {verdict.decisions_on_kafka}/{verdict.decisions_in_postgres}/"
        f"{verdict.replayed}",
        f"mismatches {len(verdict.mismatches)}",
        f"sim events acked/on kafka {verdict.sim_events_acked}/{verdict.sim_events_on_kafka}",
    ]
    parts += [f"{key} {value}" for key, value in extra.items()]
    return "; ".join(parts)


def seq(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


# --- Berth on a real kube-apiserver ------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "deploy/helm/berth/crds"
POOL_LABEL = "berth.io/node-pool"  # = berth.schemas.cells.NODE_POOL_LABEL
GPU = "nvidia.com/gpu"
DEVICES = "berth.io/gpu-devices"
#: Started in this order (ingest last: it publishes as soon as it holds the Lease).
KUBE_SERVICES = ("audit", "inventory", "token-lag", "decision", "binder", "ingest")


def apply_crds(api: Any, timeout: float = 60.0) -> None:
    """Apply the chart's CRDs (PodGroup, AgentPool: ingest watches them) and wait until served."""
    import yaml
    from kubernetes.client import ApiextensionsV1Api

    extensions = ApiextensionsV1Api(api)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        extensions.create_custom_resource_definition(body)

    def established(name: str) -> bool:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or ()
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(lambda: all(established(name) for name in names), f"CRDs {names} established", timeout)


def kube_service_args(kubeconfig: Path, work: Path) -> dict[str, list[str]]:
    """Each service's arguments against the apiserver of ``kubeconfig`` (a short Lease, so that a
    new ingest term starts within seconds; frequent inventory ticks)."""
    return {
        "audit": ["run"],
        "inventory": ["run", "--data-dir", str(work / "inventory"), "--tick-seconds", "3"],
        "token-lag": ["run", "--data-dir", str(work / "token-lag")],
        "decision": ["run"],
        "binder": ["run", "--backend", "kube", "--kubeconfig", str(kubeconfig)],
        "ingest": [
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--lease-namespace",
            "default",
            "--lease-duration",
            "4",
            "--renew-deadline",
            "3",
            "--retry-period",
            "1",
        ],
    }


def pools_in_both_cells(prefix: str) -> tuple[str, str]:
    """Two node-pool names whose decision cells differ, so both cells take part."""
    from berth.schemas.cells import stable_hash
    from berth.schemas.topics import DECISION_INPUTS

    first = f"{prefix}-a"
    cell = stable_hash(f"pool/{first}") % DECISION_INPUTS.partitions
    second = next(
        name
        for i in range(100)
        if stable_hash(f"pool/{(name := f'{prefix}-b{i}')}") % DECISION_INPUTS.partitions != cell
    )
    return first, second


def pod_body(name: str, pool: str, *, gpus: int = 0) -> dict[str, Any]:
    """A pending pod for Berth on ``pool``'s nodes, asking for ``gpus`` whole GPUs."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "berth",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {POOL_LABEL: pool},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
        },
    }


def wait_for(check: Callable[[], Any], what: str, timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout:.0f} s")
        time.sleep(interval)


def devices_of(pod: Any) -> tuple[int, ...]:
    value = (pod.metadata.annotations or {}).get(DEVICES, "")
    return tuple(int(part) for part in value.split(",") if part.strip())


async def pod_observations(settings: BerthSettings, uids: set[str]) -> Counter[tuple[str, str, str]]:
    """How many times each (pod UID, resourceVersion, node) of ``uids`` was published as observed."""
    from berth.schemas import PodObserved
    from berth.schemas.topics import PODS

    from berth.bus import EventConsumer

    seen: Counter[tuple[str, str, str]] = Counter()
    async with EventConsumer(settings.kafka, [PODS], group_id=None, name="faults-kit") as consumer:
        async for item in consumer.events(idle_timeout_s=2):
            event = item.event
            if isinstance(event, PodObserved) and event.pod.uid in uids:
                seen[(event.pod.uid, event.resource_version, event.pod.node_name or "")] += 1
    return seen
