"""Pod label selectors (metav1.LabelSelector), compiled once and matched per object.

Semantics are Kubernetes' ``labels.Requirement`` ones:

- ``In``: the key is present and its value is listed; ``NotIn``: the key is absent or its value is
  not listed; ``Exists`` / ``DoesNotExist``: presence.
- Requirements of one selector are ANDed.
- A ``LabelSelector`` with no requirement matches every object; where Kubernetes treats a *nil*
  selector as "nothing" (affinity terms, spread constraints) callers use :data:`NOTHING`.

Node selectors, which run over the ClusterState's label index rather than per object, are in
:mod:`berth.core.node_selectors`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from berth.schemas.cluster import LabelSelector

__all__ = [
    "EVERYTHING",
    "NOTHING",
    "CompiledSelector",
    "Requirement",
    "compile_selector",
]


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op == "NotIn":
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        raise ValueError(f"unsupported operator {op!r} in a label selector")


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A pod label selector ready for matching. ``nothing`` is kube's ``labels.Nothing()``."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def is_empty(self) -> bool:
        """kube's ``Selector.Empty()``: no requirement at all (and not Nothing)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for requirement in self.requirements:
            if not requirement.matches(labels):
                return False
        return True

    def with_requirements(self, extra: Iterable[Requirement]) -> CompiledSelector:
        """This selector ANDed with more requirements (used for ``matchLabelKeys``)."""
        extra = tuple(extra)
        if self.nothing or not extra:
            return self
        return CompiledSelector(tuple(sorted({*self.requirements, *extra}, key=_requirement_key)))

    def index_hint(self) -> tuple[str, frozenset[str] | None] | None:
        """The most selective requirement usable with an index of placed pods by label:
        ``(key, values)`` for ``In``, ``(key, None)`` for ``Exists``; None when there is none
        (then every pod of the namespace must be checked)."""
        best: tuple[str, frozenset[str] | None] | None = None
        for requirement in self.requirements:
            if requirement.operator == "In":
                if best is None or best[1] is None or len(requirement.values) < len(best[1]):
                    best = (requirement.key, requirement.values)
            elif requirement.operator == "Exists" and best is None:
                best = (requirement.key, None)
        return best


def _requirement_key(requirement: Requirement) -> tuple[str, str, tuple[str, ...]]:
    return (requirement.key, requirement.operator, tuple(sorted(requirement.values)))


EVERYTHING = CompiledSelector()
NOTHING = CompiledSelector(nothing=True)


def compile_selector(selector: LabelSelector | None, *, nil_matches: bool = False) -> CompiledSelector:
    """Compile a ``LabelSelector``. ``None`` gives :data:`NOTHING` unless ``nil_matches``."""
    if selector is None:
        return EVERYTHING if nil_matches else NOTHING
    requirements = [Requirement(key, "In", frozenset((value,))) for key, value in selector.match_labels.items()]
    requirements += [Requirement(e.key, e.operator, frozenset(e.values)) for e in selector.match_expressions]
    # Sorted so that equal selectors compile to equal values (hashable, cacheable).
    return CompiledSelector(tuple(sorted(set(requirements), key=_requirement_key)))
