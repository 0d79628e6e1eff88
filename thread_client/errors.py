"""The package's exception family: one base class, a leaf per failure a caller can act on."""

from __future__ import annotations

__all__ = ["ConfigError", "KeyInUse", "KeyNotHeld", "LimiterClosed", "LimiterTimeout", "ThreadClientError", "TransportError"]


class ThreadClientError(Exception):
    """Base class of every error raised by thread_client."""


class ConfigError(ThreadClientError, ValueError):
    """Raised when the command line, the environment or a keys file is invalid."""


class LimiterTimeout(ThreadClientError):
    """Raised when no rate-limit slot can be had before the request's deadline."""

    def __init__(self, key: str, delay: float) -> None:
        super().__init__(f"no slot for {key} within the deadline (next in {delay:.3f} s)")
        self.key = key
        self.delay = delay


class LimiterClosed(ThreadClientError):
    """Raised when a limiter is closed (key retired, or shutdown) before or while waiting for a slot."""

    def __init__(self, key: str) -> None:
        super().__init__(f"rate limiter of {key} is closed")
        self.key = key


class TransportError(ThreadClientError):
    """Raised when an HTTP attempt got no answer: ``kind`` is "timeout", "refused" (the request
    surely never left) or "connection" (reset or dropped: it may have been processed)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class KeyInUse(ThreadClientError):
    """Raised when another process on this host already drives an API key (its lock file is held)."""

    def __init__(self, key: str, holder: str) -> None:
        super().__init__(f"key {key} is in use by another thread-client on this host (pid {holder}): nothing sent")
        self.key = key
        self.holder = holder


class KeyNotHeld(ThreadClientError):
    """Raised when this daemon does not (or no longer) hold a shared key's lease: nothing may be sent on it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the lease of {key} is not ours")
        self.key = key
