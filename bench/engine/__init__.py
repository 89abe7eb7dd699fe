"""Benchmarks of the placement engine (``python -m bench.engine --case <name>``)."""
