"""The Kubernetes API paths the binder writes to and reads from (pure functions).

Names are escaped as path segments: an object name is a DNS subdomain or label, but a path built
from a name that is not must fail on the apiserver, not address another object.
"""

from __future__ import annotations

from urllib.parse import quote


def _segment(value: str) -> str:
    return quote(value, safe="")


def pod(namespace: str, name: str, subresource: str | None = None) -> str:
    """``/api/v1/namespaces/{namespace}/pods/{name}[/{subresource}]`` (binding, status, eviction)."""
    path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}"
    return f"{path}/{subresource}" if subresource else path


def node(name: str) -> str:
    """``/api/v1/nodes/{name}``."""
    return f"/api/v1/nodes/{_segment(name)}"


def events(namespace: str) -> str:
    """The events.k8s.io/v1 collection of ``namespace`` (kube-scheduler writes its events there)."""
    return f"/apis/events.k8s.io/v1/namespaces/{_segment(namespace)}/events"


def scale(group: str, version: str, plural: str, namespace: str, name: str) -> str:
    """The ``scale`` subresource of a namespaced object of ``group``/``version`` (``""`` for core)."""
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return f"{prefix}/namespaces/{_segment(namespace)}/{plural}/{_segment(name)}/scale"
