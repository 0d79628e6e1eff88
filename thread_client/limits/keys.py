"""The API keys in use: each key's secret, masked name, limiter and retirement, and the pool of them."""

from __future__ import annotations

import threading
from typing import Iterable, Iterator

from ..clock import Clock, monotonic
from .limiter import ThreadSafeRateLimiter
from .nonces import NonceGenerator

__all__ = ["ApiKey", "KeyPool", "mask"]


def mask(secret: str) -> str:
    """The name a key is shown by: never the whole secret (``UT4N...JYA6``)."""
    return f"{secret[:4]}...{secret[-4:]}" if len(secret) >= 12 else "*" * len(secret)


class ApiKey:
    """Shared by the worker threads of one key. Retiring is final and closes the limiter,
    which wakes every worker waiting on it."""

    def __init__(self, secret: str, limiter: ThreadSafeRateLimiter) -> None:
        self.secret = secret
        self.name = mask(secret)
        self.limiter = limiter
        # Guards _retired_because; a key is retired at most once.
        self._lock = threading.Lock()
        self._retired_because: str | None = None

    def __repr__(self) -> str:
        state = f"retired ({self._retired_because})" if self._retired_because else "active"
        return f"<ApiKey {self.name} {state}>"

    @property
    def retired_because(self) -> str | None:
        return self._retired_because

    def retire(self, reason: str) -> bool:
        """Stop using this key for good; True for the call that retired it."""
        with self._lock:
            if self._retired_because is not None:
                return False
            self._retired_because = reason
        self.limiter.close()
        return True


class KeyPool:
    """The API keys this daemon drives, each with its own limiter.

    The daemon receives a pool rather than building keys itself, so another
    pool (keys leased from a shared store) can take this one's place.
    """

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._keys = tuple(keys)
        if not self._keys:
            raise ValueError("a key pool needs at least one key")

    @classmethod
    def local(
        cls,
        secrets: Iterable[str],
        *,
        rate: int,
        window: float,
        order_latency: float,
        unanswered_hold: float,
        clock: Clock = monotonic,
    ) -> "KeyPool":
        """Keys used by this process alone, nonces from the wall clock."""
        return cls(
            ApiKey(
                secret,
                ThreadSafeRateLimiter(
                    rate, name=mask(secret), window=window, order_latency=order_latency,
                    unanswered_hold=unanswered_hold, nonces=NonceGenerator(), clock=clock,
                ),
            )
            for secret in secrets
        )

    def __repr__(self) -> str:
        return f"<KeyPool active={len(self) - len(self.retired())}/{len(self)}>"

    def __iter__(self) -> Iterator[ApiKey]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def retired(self) -> dict[str, str]:
        """Masked name -> reason, for every retired key."""
        return {key.name: key.retired_because for key in self._keys if key.retired_because is not None}

    @property
    def all_retired(self) -> bool:
        return all(key.retired_because is not None for key in self._keys)

    def hold_all(self, seconds: float) -> None:
        for key in self._keys:
            key.limiter.hold(seconds)

    def close(self) -> None:
        """Close every limiter: each waiting worker wakes with LimiterClosed."""
        for key in self._keys:
            key.limiter.close()
