"""Cluster backends of the binder that are development tooling, not product: :mod:`.sim_backend`
(the cluster simulator's API; ``berth binder run --backend sim`` finds it through the
``berth.binder_backends`` entry point) and :mod:`.fake` (in memory, for tests)."""
