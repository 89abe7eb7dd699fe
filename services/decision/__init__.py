"""The decision service: runs decision cells on Kafka with exactly-once output."""
