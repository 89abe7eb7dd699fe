"""GPU placement helpers of the decision core (pure functions over numpy arrays).

The public surface is :mod:`berth.core.gpu.fragmentation`'s, re-exported whole.
"""

from berth.core.gpu import fragmentation
from berth.core.gpu.fragmentation import *  # noqa: F403 -- the package re-exports its one module's surface

__all__ = list(fragmentation.__all__)
