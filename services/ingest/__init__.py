"""The ingest service: Kubernetes → Kafka, one active instance through a Lease.

:mod:`.translate` turns API objects into contract events (pure); :mod:`.watch` lists and watches
one resource (resourceVersion, 410 Gone → relist); :mod:`.lease` elects the publishing instance;
:mod:`.published` reads back what was published; :mod:`.service` runs leadership terms;
:mod:`.kubeapi` is the thin raw-JSON layer over the official client; ``berth ingest run`` (:mod:`.cli`).
"""
