"""The outage gate: when the exchange has not answered anyone for a while, stop burning work on it and probe."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass

from .. import defaults
from ..clock import Clock, monotonic

__all__ = ["OutageGate", "OutageState"]

#: A spell this long between two failures is a time with no attempt (idle input, a key held), not retries backing
#: off (their backoff is capped far below it): the second failure starts a silence anew.
_IDLE = 60.0

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OutageState:
    """A snapshot for metrics: ``since`` is how long the outage has lasted (0 when there is none)."""

    active: bool
    cause: str
    since: float
    ever_answered: bool


class OutageGate:
    """Shared by every worker. Workers report each attempt (``answered()`` / ``failed()``)
    and ask ``may_take()`` before taking a request from the queue.

    When attempts have failed for ``outage_after`` seconds with no answer to any
    key meanwhile, the gate closes (a time with no attempt, such as a hold at
    start or an idle input, is no silence of the exchange's): one ERROR line names the cause (repeated at most
    every ``repeat_log`` seconds), workers stop taking work, so the main queue
    fills and the producer waits, and each key sends one probe at a growing
    interval (``probe_base`` doubling up to ``probe_cap``). The first answer opens
    the gate again at once.
    """

    def __init__(
        self,
        outage_after: float = defaults.OUTAGE_AFTER,
        *,
        probe_base: float = 0.5,
        probe_cap: float = 5.0,
        repeat_log: float = 60.0,
        clock: Clock = monotonic,
    ) -> None:
        if outage_after <= 0 or not 0 < probe_base <= probe_cap:
            raise ValueError("need outage_after > 0 and 0 < probe_base <= probe_cap")
        self._outage_after = outage_after
        self._probe_base = probe_base
        self._probe_cap = probe_cap
        self._repeat_log = repeat_log
        self._clock = clock
        # Guards every field below; `_changed` is notified when the outage ends, so waiting workers resume,
        # and on close, so they stop.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._failing_since: float | None = None  # the first attempt that failed since the last answer
        self._last_failure = -math.inf
        self._ever_answered = False
        self._cause = ""
        self._outage_since: float | None = None
        self._logged_at = -math.inf
        self._next_probe: dict[str, float] = {}
        self._probes: dict[str, int] = {}
        self._closed = False

    def __repr__(self) -> str:
        state = self.state()
        return f"<OutageGate {'outage: ' + state.cause if state.active else 'open'}>"

    @property
    def active(self) -> bool:
        return self._outage_since is not None

    def answered(self) -> None:
        """The exchange answered (any HTTP status): it is reachable."""
        with self._changed:
            now = self._clock()
            self._failing_since = None
            self._ever_answered = True
            if self._outage_since is None:
                return
            lasted = now - self._outage_since
            self._outage_since = None
            self._next_probe.clear()
            self._probes.clear()
            self._changed.notify_all()
        log.warning("the exchange answers again after an outage of %.1f s: full speed", lasted)

    def failed(self, cause: str) -> None:
        """An attempt got no answer (``cause``: connection refused, name not resolved, TLS error, timeout...)."""
        with self._lock:
            now = self._clock()
            self._cause = cause
            if self._failing_since is None or now - self._last_failure > max(self._outage_after, _IDLE):
                self._failing_since = now  # a failure after a long spell with no attempt starts a silence anew
            self._last_failure = now
            if self._outage_since is None and now - self._failing_since < self._outage_after:
                return
            if self._outage_since is None:
                self._outage_since = now
            if now - self._logged_at < self._repeat_log:
                return
            self._logged_at = now
            silent = now - self._failing_since
        log.error(
            "outage: every attempt for %.0f s got no answer from the exchange (%s); taking no work, probing once per "
            "key", silent, cause,
        )

    def may_take(self, key: str, timeout: float | None = None) -> bool:
        """True if a worker of ``key`` may take a request now: always outside an outage, and during
        one only for the key's next probe. Waits up to ``timeout`` seconds (None: as long as it
        takes) for either; False at once when the gate is closed (the daemon stops)."""
        with self._changed:
            now = self._clock()
            deadline = math.inf if timeout is None else now + timeout
            while True:
                if self._closed:
                    return False
                if self._outage_since is None:
                    return True
                due = self._next_probe.get(key, now)
                if due <= now:
                    tries = self._probes.get(key, 0)
                    self._probes[key] = tries + 1
                    self._next_probe[key] = now + min(self._probe_cap, self._probe_base * 2**tries)
                    return True
                if now >= deadline:
                    return False
                self._changed.wait(min(due, deadline) - now)
                now = self._clock()

    def close(self) -> None:
        """Let no worker take work any more, and wake every one waiting for a probe. Idempotent."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def state(self) -> OutageState:
        with self._lock:
            since = 0.0 if self._outage_since is None else self._clock() - self._outage_since
            return OutageState(self._outage_since is not None, self._cause, since, self._ever_answered)
