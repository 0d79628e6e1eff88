"""A point-in-time view of a running daemon, for readers that must not reach into it (Prometheus)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..flow.outage import OutageState
from ..flow.queues import QueueCounts
from ..limits.keys import RetireReason
from .metrics import MetricsSnapshot

__all__ = ["DaemonStatus", "KeyCondition", "KeyStatus", "StatusReader"]


class KeyCondition(enum.Enum):
    """What a key does now."""

    SENDING = "sending"  # free to send as its limits allow
    PAUSED = "paused"  # paused by the operator: finishes what is in flight, sends nothing more until resumed
    HELD = "held"  # waiting out a hold (a Retry-After, a strike, the start-up window)
    PARKED = "parked"  # parked by the client for this run's strikes, until the operator un-parks it
    BLOCKED = "blocked"  # retired for good otherwise: the server refused it, its lifetime strike budget is spent
    RETIRED = "retired"  # retired by the operator, for the rest of the run
    BANNED = "banned"  # the whole host is banned: no key sends until the ban ends
    NOT_OWNED = "not owned"  # a shared key whose lease another member holds now (cluster mode)

    @classmethod
    def of(cls, retired_because: RetireReason | None, held: bool, banned: bool, *, paused: bool = False,
           owned: bool = True) -> "KeyCondition":
        """A key's condition: a retirement first, then whose it is, the operator's pause, the host's ban, and its
        own hold."""
        if retired_because is not None:
            return _RETIRED_AS.get(retired_because, cls.BLOCKED)
        if not owned:
            return cls.NOT_OWNED
        if paused:
            return cls.PAUSED
        if banned:
            return cls.BANNED
        return cls.HELD if held else cls.SENDING


#: The retirements that are no block: the client's park for this run's strikes, and the operator's retirement.
_RETIRED_AS = {RetireReason.PARKED: KeyCondition.PARKED, RetireReason.OPERATOR: KeyCondition.RETIRED}


@dataclass(frozen=True, slots=True)
class KeyStatus:
    name: str  # masked
    window: float
    order_latency: float
    condition: KeyCondition
    strikes: int  # this run's
    remaining: tuple[tuple[str, int], ...]  # each limit rule's name and the units a send could spend now
    id: str = ""  # ``key_id``: what the control API knows the key by
    held_for: float = 0.0  # seconds its hold has left (0: none)


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """Counts, metrics, keys and latency histograms (cumulative counts at the requested bounds,
    count and sum per histogram), each read under its owner's lock; together approximate.
    ``oldest_ages``: seconds the oldest request of the main queue and of the DLQ has lived (0: empty);
    ``bans``: the host's bans so far; ``lease_takes``: masked key name -> times this member took its lease."""

    counts: QueueCounts
    metrics: MetricsSnapshot
    keys: tuple[KeyStatus, ...]
    histograms: dict[str, tuple[list[int], int, float]]
    outage: OutageState
    oldest_ages: tuple[float, float] = (0.0, 0.0)
    bans: int = 0
    lease_takes: Mapping[str, int] = field(default_factory=dict)
    paused: bool = False  # the daemon paused from the control API: no key takes work, on purpose


#: Called with the histogram bucket bounds (seconds) a reader wants.
StatusReader = Callable[[Sequence[float]], DaemonStatus]
