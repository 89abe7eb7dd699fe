"""The binder: applies the decision service's commands to a cluster and reports what came of them.

:mod:`.ports` is the cluster port (``ClusterBackend``) with its outcome values, :mod:`.applier`
applies one command (retries, gangs, rate limit), :mod:`.service` is the Kafka loop and
:mod:`.unschedulable` reports unschedulable verdicts on the pods; the backend here is
:mod:`.kube_backend` (Kubernetes: bindings there, the other write-backs in :mod:`.kube_writebacks`,
events in :mod:`.kube_events`, the pure translation in :mod:`.kube_outcomes`). The cluster
simulator's backend and an in-memory fake for tests are development tooling (``berth_dev.binder``);
``berth binder run --backend sim`` finds the former through the ``berth.binder_backends`` entry point.
"""
