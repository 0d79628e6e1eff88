"""A point-in-time view of a running daemon, for readers that must not reach into it (Prometheus)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..flow.outage import OutageState
from ..flow.queues import QueueCounts
from .metrics import MetricsSnapshot

__all__ = ["DaemonStatus", "KeyStatus", "StatusReader"]


@dataclass(frozen=True, slots=True)
class KeyStatus:
    name: str  # masked
    window: float
    order_latency: float
    retired: bool


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """Counts, metrics, keys and latency histograms (cumulative counts at the requested bounds,
    count and sum per histogram), each read under its owner's lock; together approximate."""

    counts: QueueCounts
    metrics: MetricsSnapshot
    keys: tuple[KeyStatus, ...]
    histograms: dict[str, tuple[list[int], int, float]]
    outage: OutageState


#: Called with the histogram bucket bounds (seconds) a reader wants.
StatusReader = Callable[[Sequence[float]], DaemonStatus]
