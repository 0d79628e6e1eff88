"""An API key in use: its secret, the name it is shown by, its limiter, and whether it is retired."""

from __future__ import annotations

import threading

from .rate_limiter import ThreadSafeRateLimiter

__all__ = ["ApiKey", "mask"]


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
