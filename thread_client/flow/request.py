"""A unit of work: one request the producer created, followed until it is accepted or buried."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

__all__ = ["Request"]


@dataclass(slots=True, eq=False)
class Request:
    """Mutable, but owned by exactly one thread at a time (whoever took it from a queue).

    ``req_id`` is sent as the contract's ``req_id``. ``created_at`` and ``deadline`` are
    monotonic seconds; ``created_wall`` is kept only for the graveyard record.
    ``failures`` counts attempts that spent a retry, ``unsent`` those that could not
    be sent at all (the exchange unreachable), which cost nothing, ``ambiguous`` those
    that may have been accepted although no answer said so.
    """

    req_id: str
    created_at: float
    params: dict[str, str] = field(default_factory=dict)  # the user's parameters, sent with each attempt
    resumed: bool = False  # in flight when an earlier run crashed
    receipt: str | None = None  # what the source wants acknowledged with the final record (a stream entry id)
    deadline: float = math.inf  # set by renew() when a worker takes the request
    created_wall: float = field(default_factory=time.time)
    failures: int = 0
    unsent: int = 0
    attempts: int = 0  # attempts that went out (or tried to)
    ambiguous: int = 0  # attempts the exchange may have accepted without saying so
    last_failure: str | None = None
    # The latest attempt, for the final record: which key and nonce, and what the exchange answered.
    key: str = ""
    nonce: int | None = None
    http_status: int | None = None
    body: bytes = b""

    def note_attempt(self, key: str, nonce: int, http_status: int | None, body: bytes) -> None:
        """An attempt went out on ``key`` with ``nonce``; ``http_status`` None: no answer came."""
        self.key, self.nonce, self.http_status, self.body = key, nonce, http_status, body
        self.attempts += 1

    def note_failure(self, reason: str, spend: bool = True) -> None:
        """An attempt failed for ``reason``; ``spend`` says whether it counts against the retry budget."""
        if spend:
            self.failures += 1
        else:
            self.unsent += 1
        self.last_failure = reason

    def renew(self, now: float, ttl: float) -> None:
        """Taken by a worker: a fresh time-to-live for the wait for a slot, from ``now``."""
        self.deadline = now + ttl
