"""The pipeline benchmark: offered load through the real stack (Kafka, inventory, decision).

See :mod:`bench.pipeline.__main__` and README.md.
"""
