"""What a rate-limit rejection (a 429) means beyond the key that read it: whose keys it holds, whether it strikes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .keys import ApiKey

__all__ = ["HOLDS", "RateLimitScope"]


#: What a rate-limit rejection may hold: the key that read it, every key of its account, every key of the host.
HOLDS = ("key", "account", "host")


@dataclass(frozen=True)
class RateLimitScope:
    """The profile's ``[penalty]`` word on a 429, compiled: the refusal of a limit of ``holds`` (a limit's
    scope: ``key``, the key that read it; ``account``, every key of its account, a key with none being its own;
    ``host``, every key this daemon sends with: an IP's limit), and a strike toward the server's block of the
    key unless ``strikes`` is false. ``hold_keys`` is the key pool's; ``memory``: how long the server's limits
    may remember a send, the hold when the server names no pause."""

    holds: str = "key"
    strikes: bool = True
    memory: float = 0.0
    hold_keys: Callable[[Callable[[ApiKey], bool], float], None] = field(
        default=lambda shares, seconds: None, repr=False)

    def hold_sharers(self, key: ApiKey, pause: float | None) -> float:
        """A 429 read on ``key``: hold every key that shares the refused limit with it, so nothing more is sent
        into it, for ``pause`` (the server's, capped; None or 0: it named none) or else ``memory``. Returns that hold;
        0 when no other key shares it (the worker holds ``key`` itself, as for any 429)."""
        if self.holds == "host":
            shares: Callable[[ApiKey], bool] = lambda other: True
        elif self.holds == "account" and key.account:
            shares = lambda other: other.account == key.account
        else:
            return 0.0
        # A pause of nothing (Retry-After: 0, or a date our clock has passed) is no pause: the limits' memory.
        seconds = self.memory if pause is None or pause <= 0 else pause
        self.hold_keys(shares, seconds)
        return seconds
