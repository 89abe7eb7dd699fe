"""The cluster simulator: plays a cluster for the demo, the tests and the benchmarks.

:mod:`.state` is the source of truth (as kube-apiserver), :mod:`.api` its HTTP API for the binder,
:mod:`.player` plays a :class:`berth_dev.workloads.Workload` over simulated time (:mod:`.clock`),
:mod:`.outbox` publishes changes in order, :mod:`.decisions` reads the scheduler's verdicts, and
:mod:`.service` runs it all as ``berth cluster-sim run``.
"""
