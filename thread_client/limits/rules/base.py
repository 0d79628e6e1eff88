"""What every limit's client-side state answers: when a send of some cost fits, whatever the server does.

The server applies a limit at an instant ``s`` the client cannot see: after the request left (``s >=`` its
send) and before its answer came back (``s <=`` the answer). Until the answer, ``s`` may be any later time.
Each state keeps, for every send it allowed, only these bounds, and allows a new send only if the limit
holds for *every* placement of every stamp within its bounds: no rejection, by construction. A send whose
answer never came is settled with a later bound (the unanswered hold), which only delays the next sends.

The server counts whole milliseconds: two real instants a little under 1 ms apart may read as one more
millisecond apart, so a state adds ``MS_GUARD`` where a spacing is required, and ``ROUNDING_GUARD`` besides:
the float sum of an answer's time and a period may land one ulp short of the millisecond the server needs
(hypothesis found 50.05 + 1.001 stamped at 51050 ms, one step after a stamp at 50050: refused).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable

__all__ = ["MS_GUARD", "ROUNDING_GUARD", "RuleState"]

MS_GUARD = 0.001  # seconds
ROUNDING_GUARD = 1e-6  # seconds


class RuleState(ABC):
    """One limit's state as this client knows it; not thread-safe (the limiter holding it takes the lock).

    ``ready_at(now, cost)``: the earliest instant a send of ``cost`` fits (``-inf``: any time; ``inf``:
    only an answer can tell); ``take`` spends it and returns the token ``settle`` and ``cancel`` give back.
    """

    @abstractmethod
    def ready_at(self, now: float, cost: int) -> float:
        """The earliest instant (this client's clock) from which a send of ``cost`` fits."""

    @abstractmethod
    def least_ready_at(self, now: float, cost: int) -> float:
        """A lower bound of ``ready_at``: as if every send in flight were answered right now."""

    @abstractmethod
    def available(self, now: float) -> int:
        """The most units a send could spend now (``ready_at(now, units) <= now``): the budget left, for metrics."""

    @abstractmethod
    def take(self, now: float, cost: int) -> Hashable:
        """Spend ``cost`` for a send now (``ready_at(now, cost) <= now``); returns its token."""

    @abstractmethod
    def settle(self, token: Hashable, stamped_by: float) -> None:
        """The send of ``token`` was stamped no later than ``stamped_by`` (its answer's arrival, or a later bound)."""

    @abstractmethod
    def cancel(self, token: Hashable) -> None:
        """The send of ``token`` surely never reached the server: nothing of it was spent."""

    @abstractmethod
    def widen(self) -> float:
        """A rejection came that this model forbids (the server is stricter than it says): be a little more
        careful from now on. Returns the new ``pace``."""

    @property
    @abstractmethod
    def pace(self) -> float:
        """The state's characteristic period in seconds (a ring's window, a bucket's interval), for metrics."""

    @property
    @abstractmethod
    def forget_after(self) -> float:
        """How long after its last stamp the server's state can still refuse a send: what a client that does
        not know the server's state (a restart, a key taken over from another daemon) waits out first."""
