"""Which nodes are spot capacity: the labels each provider puts on its spot nodes.

A node is spot when any of these labels has one of its spot values (Kubernetes label values are
compared exactly, as a node selector compares them):

======================================  ==============  =====================================
label                                   spot value      who sets it
======================================  ==============  =====================================
``karpenter.sh/capacity-type``          ``spot``        Karpenter (any cloud)
``eks.amazonaws.com/capacityType``      ``SPOT``        EKS managed node groups
``cloud.google.com/gke-spot``           ``true``        GKE Spot VMs
``cloud.google.com/gke-preemptible``    ``true``        GKE preemptible VMs
``kubernetes.azure.com/scalesetpriority`` ``spot``      AKS spot node pools
======================================  ==============  =====================================

Other providers' labels are added with ``BERTH_SPOT_LABELS`` (``key=value[|value],...``), read by
the services that translate nodes (ingest) and place pool replicas by capacity class (decision).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["SPOT_LABELS", "SpotLabel", "is_spot", "parse_spot_labels", "with_spot_labels"]


@dataclass(frozen=True, order=True)
class SpotLabel:
    """A node label and the values of it that mean spot capacity."""

    key: str
    spot_values: tuple[str, ...]


SPOT_LABELS: tuple[SpotLabel, ...] = (
    SpotLabel("karpenter.sh/capacity-type", ("spot",)),
    SpotLabel("eks.amazonaws.com/capacityType", ("SPOT",)),
    SpotLabel("cloud.google.com/gke-spot", ("true",)),
    SpotLabel("cloud.google.com/gke-preemptible", ("true",)),
    SpotLabel("kubernetes.azure.com/scalesetpriority", ("spot",)),
)
"""The providers' labels Berth knows without configuration, Karpenter's first."""


def is_spot(labels: Mapping[str, str], spot_labels: Iterable[SpotLabel] = SPOT_LABELS) -> bool:
    """Whether a node with ``labels`` is spot capacity by any of ``spot_labels``."""
    return any(labels.get(label.key) in label.spot_values for label in spot_labels)


def parse_spot_labels(text: str) -> tuple[SpotLabel, ...]:
    """``"example.com/lifecycle=spot|preemptible,other/key=yes"`` → labels, one per key (values
    of a repeated key are merged). Raises ValueError naming the item that is not ``key=value``."""
    values: dict[str, list[str]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value_text = item.partition("=")
        spot_values = [v.strip() for v in value_text.split("|") if v.strip()]
        if not sep or not key.strip() or not spot_values:
            raise ValueError(
                f"spot label {item!r}: expected KEY=VALUE (several values: KEY=V1|V2), e.g. example.com/lifecycle=spot"
            )
        values.setdefault(key.strip(), []).extend(spot_values)
    return tuple(SpotLabel(key, tuple(dict.fromkeys(found))) for key, found in values.items())


def with_spot_labels(extra: Iterable[SpotLabel]) -> tuple[SpotLabel, ...]:
    """The built-in labels followed by ``extra`` (an extra label for a built-in key adds values)."""
    merged: dict[str, list[str]] = {label.key: list(label.spot_values) for label in SPOT_LABELS}
    for label in extra:
        merged.setdefault(label.key, []).extend(v for v in label.spot_values if v not in merged.get(label.key, ()))
    return tuple(SpotLabel(key, tuple(values)) for key, values in merged.items())
