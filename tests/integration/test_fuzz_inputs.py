"""Bad input, fuzzed, on the real stack (issue 15, point 7).

The inventory, token-lag, decision, binder (with the cluster simulator) and audit services run as
processes on a broker of the test's own. While the simulator plays a small GPU workload (the good
records: nodes and pods, placed and bound through the whole pipeline) and the test publishes good
queue-lag observations, the test publishes a few hundred hypothesis-generated bad records on every
topic those services consume: bad JSON, wrong types, huge values, unknown types, missing or garbled
headers, impossible values (negative GPUs, NaN, integers beyond int64), a newer major version.

Then: every service is alive; the dead-letter topic holds exactly one letter per bad record and
consumer of its topic (no more: no good record refused), each with a reason; records in =
accepted + dead-lettered for every consumer group that commits to Kafka; and the good records were
processed (every pod bound, the pool's lag state published, the audit store holds the decisions).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from berth.schemas import DeadLetter, QueueLagObserved
from berth.schemas.envelope import EnvelopeError, decode, encode
from berth.schemas.samples import one_of_each
from berth.schemas.topics import (
    COMMANDS,
    DEAD_LETTER,
    DECISION_INPUTS,
    DECISIONS,
    GPU_TELEMETRY,
    HANDOVERS,
    LAG_STATE,
    NODES,
    PODS,
    POLICIES,
    QUEUE_LAG,
    RESULTS,
    SPOT,
    Topic,
)
from berth_dev.devstack.procs import free_ports
from berth_dev.supervisor import Supervisor
from berth_dev.workloads import write_documents
from berth_dev.workloads.generate import H100, gpu_node_manifest, pod_manifest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from berth.bus import ensure_topics
from berth.settings import BerthSettings

pytestmark = [pytest.mark.integration, pytest.mark.faults]

CONSUMERS: dict[Topic, frozenset[str]] = {
    PODS: frozenset({"inventory"}),
    HANDOVERS: frozenset({"inventory"}),
    NODES: frozenset({"inventory"}),
    GPU_TELEMETRY: frozenset({"inventory"}),
    SPOT: frozenset({"inventory"}),
    POLICIES: frozenset({"inventory"}),
    QUEUE_LAG: frozenset({"token-lag"}),
    DECISION_INPUTS: frozenset({"decision", "audit"}),
    COMMANDS: frozenset({"binder", "audit"}),
    RESULTS: frozenset({"audit"}),
    DECISIONS: frozenset({"audit"}),
}
"""Every topic the five services consume, and who consumes it (the dead letters' ``consumer``)."""

NS, POOL, PODS_TO_BIND = "fuzz", "chat", 12
BAD_RECORDS = 330
SAMPLES = {event.type: event for event in one_of_each()}

# --- bad records ------------------------------------------------------------------------------------

IMPOSSIBLE = st.sampled_from([-1, -8, 10**30, 2**63, -(2**63) - 1, "NaN", "Infinity", "-Infinity", "1e400"])
WRONG = st.one_of(
    st.sampled_from([[], {}, [1, 2], {"a": {"b": []}}, True, "x" * 20_000]),
    st.text(min_size=1, max_size=30).map(lambda t: {"text": t}),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _set(tree: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        tree = tree[step]
    tree[path[-1]] = value


@st.composite
def bad_record(draw: st.DrawFn, topic: Topic) -> tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """(partition, key, value, headers) of a record ``topic``'s consumers must refuse."""
    event = SAMPLES[draw(st.sampled_from(sorted(t for t in topic.event_types if t in SAMPLES)))]
    record = encode(event, source="fuzz")
    headers, key = list(record.headers), record.key
    tree = json.loads(record.value)
    kind = draw(
        st.sampled_from(
            [
                "bad-json",
                "wrong-type",
                "impossible",
                "unknown-type",
                "missing-header",
                "unknown-field",
                "huge",
                "newer-major",
                "garbled-header",
                "missing-field",
            ]
        )
    )
    value: bytes | None
    if kind == "bad-json":
        value = draw(st.sampled_from([b"{", b"not json", b"\xff\xfe\x00", b"", b'{"type": '])) or None
    elif kind in ("wrong-type", "impossible", "missing-field"):
        path = draw(st.sampled_from(_paths(tree)))
        if kind == "missing-field":
            parent = tree
            for step in path[:-1]:
                parent = parent[step]
            parent.pop(path[-1]) if isinstance(parent, dict) else parent.append({"??": 1})
        else:
            _set(tree, path, "@@")
        text = json.dumps(tree)
        value = text.replace(
            '"@@"', str(draw(IMPOSSIBLE)) if kind == "impossible" else json.dumps(draw(WRONG))
        ).encode()
    elif kind == "unknown-type":
        unknown = draw(st.sampled_from(["io.berth.unknown.v1", "io.berth.cluster.pod-exploded.v1", ""]))
        headers = [(n, unknown.encode() if n == "ce_type" else v) for n, v in headers]
        value = json.dumps(tree | {"type": unknown}).encode()
    elif kind == "missing-header":
        dropped = draw(st.sampled_from(["ce_id", "ce_source", "ce_type", "ce_specversion"]))
        headers = [(n, v) for n, v in headers if n != dropped]
        value = record.value
    elif kind == "unknown-field":  # at the consumer's own version: a typo
        value = json.dumps(tree | {draw(st.sampled_from(["typo", "observedAt", "gpus"])): 1}).encode()
    elif kind == "huge":
        value = json.dumps(tree | {"type": "x" * draw(st.sampled_from([50_000] * 5 + [900_000]))}).encode()
    elif kind == "newer-major":
        headers = [(n, v.replace(b"version=1.0", b"version=2.0") if n == "ce_dataschema" else v) for n, v in headers]
        value = record.value
    else:  # garbled-header
        name = draw(st.sampled_from(["ce_time", "ce_specversion", "ce_dataschema"]))
        headers = [(n, b"\xff garbage" if n == name else v) for n, v in headers]
        value = record.value
    if draw(st.booleans()):
        key = draw(st.sampled_from([None, b"", b"\xff\xfe", key]))
    if key is None and value is None:
        key = b"k"  # Kafka needs one of them
    partition = draw(st.integers(min_value=0, max_value=topic.partitions - 1))
    return partition, key, value, headers


def generate_bad_records(count: int) -> list[tuple[Topic, tuple[int, Any, Any, Any]]]:
    """``count`` bad records, spread over the consumed topics, drawn by hypothesis (its own run:
    this test starts a stack once, so it is not itself a ``@given`` test re-run per example)."""
    topics = sorted(CONSUMERS, key=lambda t: t.name)
    found: list[tuple[Topic, tuple[int, Any, Any, Any]]] = []

    @settings(
        max_examples=count * 3,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(index=st.integers(min_value=0, max_value=len(topics) - 1), data=st.data())
    def collect(index: int, data: st.DataObject) -> None:
        topic = topics[index]
        record = data.draw(bad_record(topic))  # always drawn: generation must not depend on ``found``
        if (
            len(found) < count
            and sum(t is topic for t, _ in found) <= count // len(topics)
            and _refused(topic, record[1], record[2], record[3])
        ):
            found.append((topic, record))

    collect()
    return found


def _refused(topic: Topic, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> bool:
    try:
        decode(topic, key, value, headers)
    except EnvelopeError:
        return True
    return False  # the mutation happened to leave a valid event (e.g. a wrong type pydantic coerces)


# --- the stack ---------------------------------------------------------------------------------------


def _documents() -> list[dict[str, Any]]:
    nodes = [gpu_node_manifest(f"gpu-{i}", H100, zone="zone-a") for i in range(3)]
    pods = [
        pod_manifest(
            f"job-{i}",
            NS,
            requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
            at_s=i * 1.5,
            gpu_toleration=True,
        )
        for i in range(PODS_TO_BIND)
    ]
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, *nodes, *pods]


def _bound(sim_url: str) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for index in range(PODS_TO_BIND):
        try:
            with urllib.request.urlopen(f"{sim_url}/api/v1/namespaces/{NS}/pods/job-{index}", timeout=5) as response:
                found[f"job-{index}"] = json.loads(response.read())["spec"].get("nodeName")
        except (urllib.error.URLError, OSError):
            found[f"job-{index}"] = None
    return found


async def _publish(
    bootstrap: str, records: list[tuple[Topic, tuple[int, Any, Any, Any]]], good: list[Any], services: Supervisor
) -> dict[tuple[str, int, int], Topic]:
    """Publish the bad records in rounds, a good queue-lag observation between rounds; returns
    the position of each bad record."""
    positions: dict[tuple[str, int, int], Topic] = {}
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, max_request_size=2_000_000, linger_ms=5, enable_idempotence=True
    )
    await producer.start()
    try:
        rounds = 6
        for round_ in range(rounds):
            chunk = records[round_::rounds]
            futures = [
                (topic, await producer.send(topic.name, value=value, key=key, headers=headers, partition=partition))
                for topic, (partition, key, value, headers) in chunk
            ]
            for topic, future in futures:
                metadata = await future
                positions[(metadata.topic, metadata.partition, metadata.offset)] = topic
            event = good[round_]
            encoded = encode(event, source="fuzz-test")
            await producer.send_and_wait(QUEUE_LAG.name, value=encoded.value, key=encoded.key, headers=encoded.headers)
            services.check_alive()
            await asyncio.sleep(1.5)
    finally:
        await producer.stop()
    return positions


async def _read_all(bootstrap: str, topics: list[str], idle_s: float = 3.0) -> list[Any]:
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_bytes=8_000_000,
        max_partition_fetch_bytes=4_000_000,
    )
    await consumer.start()
    records: list[Any] = []
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            if not batch:
                return records
            for part in batch.values():
                records.extend(part)
    finally:
        await consumer.stop()


def _dead_letters(bootstrap: str) -> list[DeadLetter]:
    records = asyncio.run(_read_all(bootstrap, [DEAD_LETTER.name]))
    return [decode(DEAD_LETTER, r.key, r.value, r.headers).event for r in records]


_SAMPLE = re.compile(
    r"^(berth_records_consumed_total|berth_dead_lettered_records_total)"
    r'\{consumer="([^"]+)",topic="([^"]+)"\} ([0-9.e+]+)$'
)


def _counters(services: Supervisor) -> dict[str, Counter[tuple[str, str]]]:
    """Each service's ``berth_records_consumed_total`` and ``berth_dead_lettered_records_total``
    by (consumer, topic), from their /metrics."""
    found: dict[str, Counter[tuple[str, str]]] = {"consumed": Counter(), "dead_lettered": Counter()}
    for service in services.services.values():
        if service.name == "cluster-sim":
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{service.metrics_port}/metrics", timeout=5) as response:
            for line in response.read().decode().splitlines():
                match = _SAMPLE.match(line)
                if match:
                    kind = "consumed" if match.group(1) == "berth_records_consumed_total" else "dead_lettered"
                    found[kind][(match.group(2), match.group(3))] += int(float(match.group(4)))
    return found


def _wait(services: Supervisor, predicate: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        services.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


def test_bad_records_on_every_consumed_topic_are_dead_lettered_and_the_services_carry_on(
    own_kafka: str, fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env = {"BERTH_KAFKA_BOOTSTRAP": own_kafka, "BERTH_DATABASE_URL": fresh_database}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings_ = BerthSettings()
    asyncio.run(ensure_topics(settings_.kafka))

    bad = generate_bad_records(BAD_RECORDS)
    assert len(bad) >= BAD_RECORDS * 0.9, len(bad)
    random.Random(15).shuffle(bad)
    lag_sample = SAMPLES["io.berth.inference.queue-lag.v1"]
    good = [
        QueueLagObserved(
            pool=POOL,
            namespace=NS,
            tokens_in_queue=1000 * (i + 1),
            token_rate=500.0,
            observed_at=lag_sample.observed_at + timedelta(seconds=i),
        )
        for i in range(6)
    ]

    workload = tmp_path / "workload.yaml"
    write_documents(_documents(), workload)
    [sim_port] = free_ports(1)
    sim_url = f"http://127.0.0.1:{sim_port}"
    with Supervisor(tmp_path / "logs", {**env, "BERTH_LOG_LEVEL": "info"}) as services:
        services.start("inventory", ["run", "--data-dir", str(tmp_path / "inventory")])
        services.start("token-lag", ["run", "--data-dir", str(tmp_path / "token-lag")])
        services.start("decision", ["run"])
        services.start("binder", ["run", "--backend", "sim", "--sim-url", sim_url])
        services.start("audit", ["run"])
        services.start(
            "cluster-sim",
            ["run", "--workload", str(workload), "--speed", "1", "--port", str(sim_port), "--no-progress"],
        )

        positions = asyncio.run(_publish(own_kafka, bad, good, services))
        expected = {(t, p, o, consumer) for (t, p, o), topic in positions.items() for consumer in CONSUMERS[topic]}

        def all_bound() -> bool:
            return all(_bound(sim_url).values())

        _wait(services, all_bound, f"the {PODS_TO_BIND} good pods bound", timeout=90)
        letters: list[DeadLetter] = []

        def all_dead_lettered() -> bool:
            letters[:] = _dead_letters(own_kafka)
            return len(letters) >= len(expected)

        _wait(services, all_dead_lettered, f"{len(expected)} dead letters", timeout=60)
        records_in: Counter[str] = Counter()
        counters: dict[str, Counter[tuple[str, str]]] = {}

        def all_consumed() -> bool:
            # Both read afresh each time: the inventory's cell ticks keep adding inputs.
            records_in.clear()
            records_in.update(r.topic for r in asyncio.run(_read_all(own_kafka, [t.name for t in CONSUMERS], idle_s=1)))
            counters.update(_counters(services))
            return all(
                counters["consumed"][(consumer, topic.name)] == records_in[topic.name]
                for topic, consumers in CONSUMERS.items()
                for consumer in consumers
            )

        time.sleep(3)  # anything beyond the expected dead letters would show up now
        letters[:] = _dead_letters(own_kafka)
        _wait(services, all_consumed, "every record consumed", timeout=45)
        lag_states = [
            decode(LAG_STATE, r.key, r.value, r.headers).event
            for r in asyncio.run(_read_all(own_kafka, [LAG_STATE.name], idle_s=2))
        ]
        services.check_alive()

    found = Counter((d.source_topic, d.source_partition, d.source_offset, d.consumer) for d in letters)
    duplicates = {k: n for k, n in found.items() if n > 1}
    unexpected = sorted(set(found) - expected)
    missing = sorted(expected - set(found))
    assert not unexpected, f"{len(unexpected)} records dead-lettered that were not bad: {unexpected[:5]}"
    assert not missing, f"{len(missing)} bad records not dead-lettered: {missing[:5]}"
    assert not duplicates, f"dead-lettered more than once: {list(duplicates)[:5]}"
    assert all(letter.reason for letter in letters)
    assert any("truncated" in letter.reason for letter in letters) or not any(
        len(value or b"") > 600_000 for _, (_, _, value, _) in bad
    )
    by_topic = Counter(topic.name for topic in positions.values())
    assert set(by_topic) == {topic.name for topic in CONSUMERS}, by_topic
    # Records in = accepted + dead-lettered, for every consumer of every topic: each consumed every
    # record of the topic once (the services' counters), dead-lettered exactly the bad ones, and
    # accepted the rest (the good records: the pipeline's own events and the test's).
    bad_on = Counter(topic.name for topic in positions.values())
    for topic, consumers in CONSUMERS.items():
        for consumer in consumers:
            consumed = counters["consumed"][(consumer, topic.name)]
            refused = counters["dead_lettered"][(consumer, topic.name)]
            assert (consumed, refused) == (records_in[topic.name], bad_on[topic.name]), (consumer, topic.name)
            assert consumed - refused == records_in[topic.name] - bad_on[topic.name] >= 0
    # The good records went through: pods bound (inventory → decision → binder), the pool's lag
    # state published (token-lag), and the audit store holds the decisions and the bind results.
    assert any(state.pool == POOL and state.tokens_in_queue == 6000 for state in lag_states), lag_states[-3:]
    _assert_audited(fresh_database)


def _assert_audited(database_url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            decisions = connection.execute(text("select count(*) from decisions")).scalar_one()
            results = connection.execute(text("select count(*) from command_results")).scalar_one()
    finally:
        engine.dispose()
    assert decisions >= PODS_TO_BIND and results >= 1, (decisions, results)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
