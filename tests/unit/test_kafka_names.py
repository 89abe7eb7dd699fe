"""Shared Kafka: one installation's names on the brokers (schemas.topics.KafkaNames), the settings
that give its prefixes, and the clients, faust apps and commands that use them. Empty prefixes
must give the contract names exactly (existing installations keep their topics and groups)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from berth.schemas.topics import (
    ALL_TOPICS,
    COMMANDS,
    CONTRACT_NAMES,
    DEAD_LETTER,
    DECISION_INPUTS,
    PREFIX_MAX_LENGTH,
    QUEUE_LAG,
    KafkaNames,
    check_kafka_prefix,
)
from berth.services.inventory.app import APP_ID as INVENTORY_APP_ID
from berth.services.inventory.app import NODE_INPUTS, Layout, create_app
from berth.services.token_lag.app import APP_ID as TOKEN_LAG_APP_ID
from berth.services.token_lag.app import Layout as LagLayout
from berth.services.token_lag.app import create_app as create_token_lag_app
from berth.services.token_lag.fold import LagSettings
from pydantic import ValidationError
from typer.testing import CliRunner

from berth.bus import EventConsumer, EventProducer
from berth.bus.streams import FaustOutbox, faust_app_options, internal_topics
from berth.cli import app
from berth.settings import BerthSettings, KafkaSettings

TEAM_A = KafkaNames(topic_prefix="team-a.", group_prefix="grp-a.")


# --- the naming function -------------------------------------------------------------------------


def test_empty_prefixes_are_the_contract_names():
    for topic in ALL_TOPICS:
        assert CONTRACT_NAMES.topic(topic) == topic.name
        assert CONTRACT_NAMES.topic(topic.name) == topic.name
    assert CONTRACT_NAMES.group("berth-decision") == "berth-decision"
    assert KafkaSettings().names == CONTRACT_NAMES


def test_prefixes_start_topic_and_group_names():
    assert TEAM_A.topic(COMMANDS) == "team-a.berth.scheduler.commands.v1"
    assert TEAM_A.topic(NODE_INPUTS) == "team-a.berth-inventory-node-inputs"
    assert TEAM_A.group("berth-binder") == "grp-a.berth-binder"


def test_a_topic_is_found_by_its_contract_name_or_its_name_on_the_brokers():
    assert TEAM_A.contract_topic("berth.scheduler.inputs.v1") is DECISION_INPUTS
    assert TEAM_A.contract_topic("team-a.berth.scheduler.inputs.v1") is DECISION_INPUTS
    assert TEAM_A.contract_name("team-a.berth.deadletter.v1") == DEAD_LETTER.name
    with pytest.raises(KeyError, match="does not start with"):
        TEAM_A.contract_name("team-b.berth.deadletter.v1")
    with pytest.raises(KeyError, match="Berth's topics are"):
        TEAM_A.contract_topic("team-b.berth.deadletter.v1")


@pytest.mark.parametrize(
    ("prefix", "says"),
    [
        ("team a.", "character(s) ' '"),
        ("team/a", "character(s) '/'"),
        ("équipe.", "character(s) 'é'"),
        ("x" * (PREFIX_MAX_LENGTH + 1), f"at most {PREFIX_MAX_LENGTH}"),
        (".", "would make Kafka topic names it refuses"),
    ],
)
def test_a_prefix_kafka_would_refuse_is_refused_saying_why(prefix: str, says: str):
    with pytest.raises(ValueError, match="topic prefix") as refused:
        check_kafka_prefix(prefix, what="topic prefix")
    assert says in str(refused.value)
    with pytest.raises(ValueError):
        KafkaNames(group_prefix=prefix)


def test_the_longest_names_fit_kafkas_limit():
    longest = KafkaNames("p" * PREFIX_MAX_LENGTH, "g" * PREFIX_MAX_LENGTH)
    assert max(len(longest.topic(topic)) for topic in ALL_TOPICS) <= 249
    assert len(longest.topic(f"{INVENTORY_APP_ID}-pod-routes-changelog")) <= 249
    check_kafka_prefix("Team_A-1.", what="topic prefix")  # every allowed character class


# --- settings and the command line ---------------------------------------------------------------


def test_the_prefixes_come_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BERTH_KAFKA__TOPIC_PREFIX", "team-a.")
    monkeypatch.setenv("BERTH_KAFKA__GROUP_PREFIX", "grp-a.")
    assert BerthSettings().kafka.names == TEAM_A


def test_a_bad_prefix_in_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BERTH_KAFKA__GROUP_PREFIX", "grp a")
    with pytest.raises(ValidationError, match="BERTH_KAFKA__GROUP_PREFIX 'grp a' has character"):
        BerthSettings()


def test_config_show_and_topics_list_show_the_prefixes(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BERTH_KAFKA__TOPIC_PREFIX", "team-a.")
    monkeypatch.setenv("BERTH_KAFKA__GROUP_PREFIX", "grp-a.")
    runner = CliRunner()
    shown = runner.invoke(app, ["config", "show", "--output", "json"])
    assert shown.exit_code == 0, shown.output
    kafka = json.loads(shown.output)["kafka"]
    assert (kafka["topic_prefix"], kafka["group_prefix"]) == ("team-a.", "grp-a.")
    listed = runner.invoke(app, ["topics", "list"], env={"COLUMNS": "300"})
    assert listed.exit_code == 0, listed.output
    assert "team-a.berth.scheduler.commands.v1" in listed.output


def test_berth_exits_4_with_one_line_on_a_bad_prefix(tmp_path: Path):
    env = {**os.environ, "BERTH_KAFKA__TOPIC_PREFIX": "team a."}
    env.pop("BERTH_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "berth.cli", "config", "show"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 4, done.stderr
    assert done.stderr.count("\n") == 1 and "BERTH_KAFKA__TOPIC_PREFIX" in done.stderr
    assert "Traceback" not in done.stderr


# --- the clients ---------------------------------------------------------------------------------


def test_consumers_and_producers_use_the_installations_names():
    kafka = KafkaSettings(bootstrap="127.0.0.1:9", topic_prefix="team-a.", group_prefix="grp-a.")
    consumer = EventConsumer(kafka, [COMMANDS, QUEUE_LAG.name], group_id="berth-binder", name="test")
    assert sorted(consumer._topics) == ["team-a.berth.inference.queue.v1", "team-a.berth.scheduler.commands.v1"]
    assert consumer._options["group_id"] == "grp-a.berth-binder"
    assert EventConsumer(kafka, [COMMANDS], group_id=None, name="test")._options["group_id"] is None
    producer = EventProducer(kafka, source="test", transactional_id="berth-decision-cell-0")
    assert producer._options["transactional_id"] == "grp-a.berth-decision-cell-0"
    assert producer.names == kafka.names


# --- the faust services --------------------------------------------------------------------------


def _faust_topics(faust_app) -> set[str]:
    topics = {name for agent in faust_app.agents.values() for name in agent.channel.topics}
    topics |= {spec.name for spec in internal_topics(faust_app)}
    topics.add(faust_app._leader_assignor._leader_topic_name)
    return topics


def test_the_inventory_app_carries_both_prefixes_on_every_name_faust_derives():
    kafka = KafkaSettings(bootstrap="127.0.0.1:9", topic_prefix="team-a.", group_prefix="grp-a.")
    options = {**faust_app_options(kafka), "store": "memory://"}
    inventory = create_app(Layout(cells=2, pod_partitions=3, node_partitions=5), app_options=options, names=kafka.names)
    assert inventory.app.conf.id == "grp-a.berth-inventory"  # faust's consumer group
    topics = _faust_topics(inventory.app)
    assert all(name.startswith("team-a.") for name in topics), topics
    assert {
        "team-a.berth-inventory-nodes-changelog",
        "team-a.berth-inventory-pod-routes-changelog",
        "team-a.berth-inventory-node-inputs",
        "team-a.berth-inventory-__assignor-__leader",
        "team-a.berth.cluster.pods.v1",
    } <= topics
    assert isinstance(inventory.outbox, FaustOutbox)


def test_the_token_lag_app_carries_both_prefixes_and_empty_ones_keep_fausts_names():
    kafka = KafkaSettings(bootstrap="127.0.0.1:9", topic_prefix="team-a.", group_prefix="grp-a.")
    options = {**faust_app_options(kafka), "store": "memory://"}
    layout = LagLayout(cells=2, queue_partitions=2)
    lag = create_token_lag_app(layout, LagSettings(), app_options=options, names=kafka.names)
    assert lag.app.conf.id == "grp-a.berth-token-lag"
    assert _faust_topics(lag.app) == {
        "team-a.berth.inference.queue.v1",
        "team-a.berth-token-lag-pools-changelog",
        "team-a.berth-token-lag-__assignor-__leader",
    }
    plain = create_token_lag_app(layout, LagSettings(), app_options=options)
    assert plain.app.conf.id == TOKEN_LAG_APP_ID
    assert _faust_topics(plain.app) == {
        "berth.inference.queue.v1",
        "berth-token-lag-pools-changelog",
        "berth-token-lag-__assignor-__leader",
    }
