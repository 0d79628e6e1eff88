"""One line when the store stops taking a user's calls, and one when it takes them again."""

from __future__ import annotations

import logging
import threading

from ..clock import Clock, monotonic
from ..errors import StoreUnavailable

__all__ = ["StoreWatch"]

log = logging.getLogger(__name__)


class StoreWatch:
    """What one user of the store (a loop, or the threads writing one stream) says about it: a line when its
    calls start failing, with the cause, and a line when one succeeds again, with how long the store was away.
    A caller that retries every few milliseconds never logs each try.

    A store that does not answer (restarting, the network) usually comes back by itself: WARNING. One that
    refuses writes (out of memory) waits for its operator: ERROR. A new cause within one spell (the store comes
    back from a restart out of memory) is said too. Safe from any thread.
    """

    def __init__(self, who: str, *, clock: Clock = monotonic) -> None:
        self.who = who
        self._clock = clock
        # Guards _since and _refused, so that of several threads failing (or succeeding) at once one logs.
        self._lock = threading.Lock()
        self._since: float | None = None  # when the spell began; None while the store takes the calls
        self._refused = False  # the spell's cause: refused writes (else: no answer)

    def __repr__(self) -> str:
        state = "refused" if self._refused else "no answer"
        return f"<StoreWatch {self.who}: {'away (' + state + ')' if self._since is not None else 'fine'}>"

    @property
    def away(self) -> bool:
        """Whether the last call failed (approximate: another thread's call may change it at once)."""
        return self._since is not None

    def failed(self, exc: StoreUnavailable, meanwhile: str) -> None:
        """A call failed with ``exc``; ``meanwhile`` says what the caller does until the store takes it again."""
        with self._lock:
            if self._since is not None and self._refused == exc.refused:
                return
            if self._since is None:
                self._since = self._clock()
            self._refused = exc.refused
        log.log(logging.ERROR if exc.refused else logging.WARNING, "%s: %s; %s", self.who, exc, meanwhile)

    def answered(self) -> None:
        """A call succeeded: if the store was away, say that it is back, and after how long."""
        if self._since is None:  # the common case, without the lock: a stale read only delays the line one call
            return
        with self._lock:
            since, self._since = self._since, None
            refused = self._refused
        if since is not None:
            log.warning("%s: the store %s again after %.1f s", self.who, "takes writes" if refused else "answers",
                        self._clock() - since)
