"""The binder: applies the decision service's commands to a cluster and reports what came of them.

:mod:`.ports` is the cluster port (``ClusterBackend``) with its outcome values, :mod:`.applier`
applies one command (retries, gangs, rate limit), :mod:`.service` is the Kafka loop and
:mod:`.unschedulable` reports unschedulable verdicts on the pods; backends: :mod:`.kube_backend`
(Kubernetes, with the pure translation in :mod:`.kube_outcomes`), :mod:`.sim_backend` (the cluster
simulator's API) and :mod:`.fake` (in memory, for tests).
"""
