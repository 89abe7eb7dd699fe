"""topics_admin: CreateTopics answers per topic, so its errors must be read from the answer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiokafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError

from berth.bus.topics_admin import _raise_for_topic_errors


def test_a_topic_error_in_the_answer_is_raised_as_its_exception() -> None:
    answer = SimpleNamespace(topic_errors=[("berth.pods.v1", 38, "Replication factor: 3 larger than brokers: 1")])
    with pytest.raises(InvalidReplicationFactorError, match="berth.pods.v1: Replication factor: 3"):
        _raise_for_topic_errors(answer)


def test_an_existing_topic_raises_what_the_race_handler_catches() -> None:
    with pytest.raises(TopicAlreadyExistsError):
        _raise_for_topic_errors(SimpleNamespace(topic_errors=[("t", 36, None)]))


def test_no_error_codes_no_exception() -> None:
    _raise_for_topic_errors(SimpleNamespace(topic_errors=[("t", 0, None), ("u", 0)]))
