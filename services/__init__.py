"""Berth services: thin processes that do I/O and call the pure core."""
