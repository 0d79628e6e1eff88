"""The limits an API sets, each as the client's safe-side model of the server's state (see ``base``)."""

from .aligned_window import AlignedWindow
from .base import MS_GUARD, RuleState
from .gcra import Gcra
from .spec import ALGORITHMS, SCOPES, LimitRule, memory_of
from .window_ring import WindowRing

__all__ = [
    "ALGORITHMS", "MS_GUARD", "SCOPES", "AlignedWindow", "Gcra", "LimitRule", "RuleState", "WindowRing", "memory_of",
]
