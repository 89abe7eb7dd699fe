"""Two Berth installations side by side on ONE broker (issue 18, point 5): each with its own topic
prefix, group prefix and audit database, each running inventory, decision and audit as processes
configured by the environment alone (``BERTH_KAFKA__TOPIC_PREFIX``, ``BERTH_KAFKA__GROUP_PREFIX``).

No crosstalk means: every topic and consumer group either installation made carries its prefix
(faust's changelogs and leader topic included, nothing named after the bare app id), each decides
and audits its own pods only, and while one works the other's source and command topics stay as
they were, record for record. The session broker is shared with other tests: the random prefixes
are what keeps this test's names apart from theirs, which is the feature under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from berth.schemas import DecisionRecord, NodeObserved, PodInfo, PodObserved
from berth.schemas.samples import T0, h100_node
from berth.schemas.topics import ALL_TOPICS, COMMANDS, DECISION_INPUTS, DECISIONS, NODES, PODS, RESULTS, KafkaNames
from berth.services.audit import db
from berth.services.audit.models import DecisionRow, InputRow
from berth.services.decision.snapshots import SNAPSHOTS
from berth_dev.demo import _replay, _wait_for_audit
from berth_dev.devstack.scratch import scratch_database
from berth_dev.supervisor import Supervisor
from pydantic import SecretStr

from berth.bus import EventConsumer, EventProducer, ensure_topics
from berth.bus.consumer import read_matching
from berth.settings import BerthSettings, DatabaseSettings, KafkaSettings

pytestmark = pytest.mark.integration

BERTH = str(Path(sys.executable).with_name("berth"))
PODS_EACH = 4
SERVICES = ("audit", "inventory", "decision")
GROUPS = ("berth-audit", "berth-inventory", "berth-decision")
#: Topics faust derives from the inventory's app id; they must carry the topic prefix.
INVENTORY_OWN = (
    "berth-inventory-node-inputs",
    "berth-inventory-nodes-changelog",
    "berth-inventory-pod-routes-changelog",
    "berth-inventory-__assignor-__leader",
)
#: What only the test publishes (sources) or only a placement makes (commands, results).
QUIET_TOPICS = (PODS, NODES, COMMANDS, RESULTS)


@dataclass
class Installation:
    team: str
    settings: BerthSettings
    env: dict[str, str]

    @property
    def names(self) -> KafkaNames:
        return self.settings.kafka.names

    @property
    def subjects(self) -> set[str]:
        return {f"{self.team}/pod-{i}" for i in range(PODS_EACH)}

    def events(self) -> list[object]:
        nodes = [NodeObserved(node=h100_node(f"{self.team}-gpu-{i}"), observed_at=T0) for i in range(2)]
        pods = [
            PodObserved(
                pod=PodInfo(
                    uid=f"uid-{self.team}-{i}",
                    namespace=self.team,
                    name=f"pod-{i}",
                    scheduler_name="berth",
                    requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": 2},
                    creation_time=T0,
                    tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
                ),
                observed_at=T0,
            )
            for i in range(PODS_EACH)
        ]
        return [*nodes, *pods]


def _installation(team: str, run: str, bootstrap: str, database_url: str) -> Installation:
    topic_prefix, group_prefix = f"t{run}-{team}.", f"g{run}-{team}."
    settings = BerthSettings(
        kafka=KafkaSettings(bootstrap=bootstrap, topic_prefix=topic_prefix, group_prefix=group_prefix),
        database=DatabaseSettings(url=SecretStr(database_url)),
    )
    env = {
        "BERTH_KAFKA_BOOTSTRAP": bootstrap,
        "BERTH_KAFKA__TOPIC_PREFIX": topic_prefix,
        "BERTH_KAFKA__GROUP_PREFIX": group_prefix,
        "BERTH_DATABASE_URL": database_url,
    }
    return Installation(team, settings, env)


async def _publish(installation: Installation) -> None:
    """The nodes, then (once they reached their cells) the pods: a pod that reached its cell before
    the nodes, which take one more hop, would wait for the cells' next ticks (30 s) to be tried
    again."""
    kafka = installation.settings.kafka
    nodes, pods = installation.events()[:2], installation.events()[2:]
    async with EventProducer(kafka, source=f"tests/{installation.team}") as producer:
        assert await producer.send_all(nodes) == 2
        await read_matching(
            kafka, DECISION_INPUTS, lambda event: isinstance(event, NodeObserved), 2, timeout_s=120, name="tests"
        )
        assert await producer.send_all(pods) == PODS_EACH


async def _placed(installation: Installation) -> set[str]:
    """Waits until every pod of ``installation`` has a ``placed`` decision on its decisions topic."""
    found = await read_matching(
        installation.settings.kafka,
        DECISIONS,
        lambda event: isinstance(event, DecisionRecord) and event.outcome == "placed",
        PODS_EACH,
        timeout_s=180,
        name=f"tests-{installation.team}",
    )
    return {item.event.subject for item in found}


async def _decision_subjects(installation: Installation) -> set[str]:
    """The subject of every decision record on ``installation``'s decisions topic."""
    subjects = set()
    async with EventConsumer(installation.settings.kafka, [DECISIONS], group_id=None, name="tests") as consumer:
        async for item in consumer.events(idle_timeout_s=3):
            if isinstance(item.event, DecisionRecord):
                subjects.add(item.event.subject)
    return subjects


async def _ends(installation: Installation) -> dict[str, int]:
    """Records on each of ``installation``'s :data:`QUIET_TOPICS` (sum of the partitions' ends)."""
    names = [installation.names.topic(topic) for topic in QUIET_TOPICS]
    consumer = AIOKafkaConsumer(**installation.settings.kafka.client_options(), enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [
            TopicPartition(name, p)
            for name, topic in zip(names, QUIET_TOPICS, strict=True)
            for p in range(topic.partitions)
        ]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return {name: sum(offset for tp, offset in ends.items() if tp.topic == name) for name in names}


async def _broker_view(kafka: KafkaSettings) -> tuple[set[str], dict[str, set[str]]]:
    """(every topic on the broker, each consumer group's topics with committed offsets)."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        topics = set(await admin.list_topics())
        groups: dict[str, set[str]] = {}
        for group_id, *_ in await admin.list_consumer_groups():
            offsets = await admin.list_consumer_group_offsets(group_id)
            groups[group_id] = {tp.topic for tp in offsets}
    finally:
        await admin.close()
    return topics, groups


def _audited(installation: Installation) -> tuple[set[str], set[str], set[str]]:
    """(decided pod subjects, input topics of the decisions, input topics of the inputs) in the
    installation's audit database."""
    engine = db.make_engine(installation.settings.database)
    try:
        with engine.connect() as connection:
            subjects = set(connection.scalars(sa.select(DecisionRow.subject)))
            decision_inputs = set(connection.scalars(sa.select(DecisionRow.input_topic).distinct()))
            inputs = set(connection.scalars(sa.select(InputRow.topic).distinct()))
    finally:
        engine.dispose()
    return subjects, decision_inputs, inputs


def _tail_pods(installation: Installation) -> list[dict]:
    """``berth tail`` of the pod topic, by its contract name, in the installation's environment."""
    env = {**os.environ, **installation.env}
    done = subprocess.run(
        [BERTH, "tail", PODS.name, "--max", "100", "--timeout", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith(f"from {installation.names.topic(PODS)}"), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _start(services: Supervisor, work: Path) -> None:
    args = {"inventory": ["run", "--data-dir", str(work / "inventory")]}
    for name in SERVICES:
        services.start(name, args.get(name, ["run"]), wait=False)


def test_two_installations_share_one_broker_without_crosstalk(
    kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    with contextlib.ExitStack() as stack:
        a, b = (
            _installation(team, run, kafka_bootstrap, stack.enter_context(scratch_database(database_url, team[-1])))
            for team in ("team-a", "team-b")
        )
        for installation in (a, b):
            asyncio.run(ensure_topics(installation.settings.kafka))
        supervisors = {}
        for installation in (a, b):
            log_dir = tmp_path / installation.team
            log_dir.mkdir()
            supervisors[installation.team] = stack.enter_context(Supervisor(log_dir, installation.env))
            _start(supervisors[installation.team], log_dir)
        for services in supervisors.values():
            for service in services.services.values():
                service.wait_ready(timeout=180)

        # A works while B idles: B's sources and commands stay empty.
        asyncio.run(_publish(a))
        assert asyncio.run(_placed(a)) == a.subjects
        assert set(asyncio.run(_ends(b)).values()) == {0}
        a_ends = asyncio.run(_ends(a))
        assert a_ends[a.names.topic(PODS)] == PODS_EACH and a_ends[a.names.topic(COMMANDS)] >= PODS_EACH

        # B works while A idles: A's sources and commands do not move.
        asyncio.run(_publish(b))
        assert asyncio.run(_placed(b)) == b.subjects
        assert asyncio.run(_ends(a)) == a_ends
        b_ends = asyncio.run(_ends(b))
        assert b_ends[b.names.topic(PODS)] == PODS_EACH and b_ends[b.names.topic(NODES)] == 2

        for installation in (a, b):
            supervisors[installation.team].check_alive()
            # Each decided its own pods only, and audited them in its own database.
            assert asyncio.run(_decision_subjects(installation)) == installation.subjects
            assert _wait_for_audit(installation.settings, timeout_s=120) >= PODS_EACH
            subjects, decision_inputs, inputs = _audited(installation)
            assert subjects == installation.subjects
            assert decision_inputs == inputs == {installation.names.topic(DECISION_INPUTS)}
            report = _replay(installation.settings)
            assert report.compared >= PODS_EACH and not report.mismatches
            tailed = _tail_pods(installation)
            assert {f"{e['event']['pod']['namespace']}/{e['event']['pod']['name']}" for e in tailed} == (
                installation.subjects
            )

        topics, groups = asyncio.run(_broker_view(a.settings.kafka))
        for installation in (a, b):
            names = installation.names
            wanted = {names.topic(t) for t in ALL_TOPICS} | {names.topic(n) for n in (*INVENTORY_OWN, SNAPSHOTS)}
            assert wanted <= topics, sorted(wanted - topics)
            # faust would name its changelogs and leader topic after the app id (the group prefix).
            assert not [t for t in topics if t.startswith(names.group_prefix)]
            for group in GROUPS:
                read = groups[names.group(group)]
                assert read and all(t.startswith(names.topic_prefix) for t in read), (group, read)
