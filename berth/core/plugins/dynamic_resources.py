"""DynamicResources: kube-scheduler v1.34's plugin for ResourceClaims (DRA), as far as Berth has
it. Berth's pods carry no ResourceClaims, so the plugin's only part that ever speaks is its
PostFilter, which kube runs for every unschedulable pod before preemption and which reports that
it has no claims to deallocate — a part of every FailedScheduling message users see from kube's
default profile, kept so that Berth's messages read the same word for word."""

from __future__ import annotations

from typing import ClassVar

from berth.core import messages
from berth.core.framework import CycleContext, Diagnosis, PostFilterPlugin, PostFilterResult, Status

__all__ = ["NAME", "DynamicResources"]

NAME = "DynamicResources"


class DynamicResources(PostFilterPlugin):
    NAME: ClassVar[str] = NAME

    def post_filter(self, cycle: CycleContext, diagnosis: Diagnosis) -> PostFilterResult:
        return PostFilterResult(Status.unschedulable(plugin=NAME), message=messages.DRA_NO_CLAIMS_TO_DEALLOCATE)
