"""Ingest's Prometheus metrics (``berth_ingest_*``; no object names as labels)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

WATCH_EVENTS = Counter(
    "berth_ingest_events_total",
    "Watch events received from the apiserver, by resource (pods, nodes, podgroups ...) and watch "
    "event type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).",
    ["resource", "type"],
)
RELISTS = Counter(
    "berth_ingest_relists_total",
    "Full lists after the first one of a leadership term: a 410 Gone (the resumed resourceVersion "
    "was compacted) or a failed watch; each publishes what changed while the watch was away.",
    ["resource"],
)
LEADER = Gauge(
    "berth_ingest_leader",
    "1 while this instance holds the ingest Lease (and publishes), else 0.",
)
UNCONVERTIBLE = Counter(
    "berth_ingest_unconvertible_objects_total",
    "API objects the contract converters refused (logged with the field); treated as absent.",
    ["resource"],
)
WATCH_LAG = Gauge(
    "berth_ingest_watch_lag_seconds",
    "Seconds between a watched object's last write (its newest managedFields time, 1 s "
    "resolution) and ingest handling its event; the latest value per resource.",
    ["resource"],
)
