"""Retry delays: exponential with jitter, honouring a server's Retry-After up to a cap."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """``delay(failures)`` is pure given the random source, so it is tested without sleeping.

    "Equal jitter": half the exponential step is kept, half is random, so a down
    server is never hammered by retries that all drew zero.
    """

    # With 5 retries: ~0.2, 0.4, 0.8, 1.6, 3.2 s (a quarter less on average), enough to ride out
    # a server restart of a few seconds before a request is buried.
    base: float = 0.2
    cap: float = 5.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.cap:
            raise ValueError(f"need 0 < base <= cap, got base={self.base} cap={self.cap}")

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        """Seconds to wait before the next attempt of a request that has failed ``failures`` times."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.cap)
        step = min(self.cap, self.base * 2 ** max(0, failures - 1))
        return step / 2 + self.rng.uniform(0, step / 2)
