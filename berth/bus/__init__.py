"""Kafka I/O for every service: publishing events, consuming them with one dead-letter path."""

from .consumer import ConsumedEvent, EventConsumer
from .deadletter import dead_letter_for
from .producer import EventProducer
from .topics_admin import ensure_topics

__all__ = ["ConsumedEvent", "EventConsumer", "EventProducer", "dead_letter_for", "ensure_topics"]
