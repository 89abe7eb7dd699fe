"""Berth's development tooling, a distribution of its own (berth-dev) beside the product (berth).

It imports the product and nothing in the product imports it: the ``berth`` command finds its
commands (``berth dev``, ``berth demo``, ``berth cluster-sim``) and the binder finds its simulator
backend through entry points (see ``dev/pyproject.toml``).
"""
