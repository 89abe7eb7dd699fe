"""Berth: an event-sourced, GPU-aware scheduler for Kubernetes on Kafka."""

__version__ = "0.1.0"
