"""The running daemon as the control API sees it: its status as the contract's JSON, and its commands."""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from ..config import Config
from ..limits.keys import ApiKey
from ..observe.status import DaemonStatus, KeyStatus
from ..requeue import ask_first
from ..request import FinalOutcome, Work
from ..stop_latch import StopLatch
from .dead import DeadLetters, Page
from .feed import ConsoleFeed
from .routes import NoResults

__all__ = ["Controlled", "DaemonPanel", "SHORT_ID"]

log = logging.getLogger(__name__)

#: A key is known to the API by this many hex digits of its ``key_id``: never a piece of its secret.
SHORT_ID = 12


class Controlled(Protocol):
    """What the panel reads and commands of the daemon (``Daemon``), without importing it."""

    config: Config
    keys: Iterable[ApiKey]
    stop_latch: StopLatch

    @property
    def paused(self) -> bool: ...

    def status(self, latency_bounds: Sequence[float]) -> DaemonStatus: ...

    def key_status(self, key: ApiKey) -> KeyStatus: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def drain(self) -> None: ...

    def retire_key(self, key: ApiKey, last: bool = False) -> None: ...

    def unpark_key(self, key: ApiKey) -> None: ...

    def requeue(self, works: Sequence[Work], dead: Mapping[str, dict]) -> list[str]: ...

    @property
    def can_ask(self) -> bool:
        """Whether a send in doubt is settled by asking the exchange (the profile's [settle])."""

    def mark_under_way(self, items: Sequence[dict]) -> list[dict]: ...


class DaemonPanel:
    """A ``Panel`` over a ``Daemon``: reads its status (each part under its own lock, together approximate) and the
    console's ``feed``; pages ``dead`` letters (None: the run writes no results file). ``wall`` turns the
    daemon's monotonic seconds into Unix time, for display."""

    def __init__(self, daemon: Controlled, feed: ConsoleFeed, dead: DeadLetters | None,
                 wall: Callable[[], float] = time.time) -> None:
        self._daemon = daemon
        self._feed = feed
        self._dead = dead
        self._wall = wall

    def __repr__(self) -> str:
        return f"<DaemonPanel {self._daemon!r}>"

    def status(self) -> dict:
        daemon = self._daemon
        status = daemon.status(())
        now = self._wall()
        rates = self._feed.accepted_per_s()
        counts, snapshot = status.counts, status.metrics
        keys = [{
            "id": key.id[:SHORT_ID],
            "name": key.name,
            "state": key.condition.value,
            "held_until": round(now + key.held_for, 3) if key.held_for > 0 else None,
            "owner": None,  # a shared key's owner is the store's to say (the cluster console's)
            "accepted_per_s": rates.get(key.name, 0.0),
            "strikes": key.strikes,
            "budget": dict(key.remaining),
        } for key in status.keys]
        return {
            "version": 1,
            "profile": daemon.config.profile.name,
            "delivery": str(daemon.config.delivery),
            "uptime_s": round(snapshot.elapsed, 3),
            "paused": status.paused,
            "draining": daemon.stop_latch.reason is not None,
            "accepted_per_s": sum(rates.values()),
            "accepted_total": counts.accepted,
            "keys": keys,
            "queues": {name: {"size": size, "oldest_age_s": round(age, 3) if size else None}
                       for name, size, age in zip(("main", "dlq"), (counts.main_queue, counts.dlq), status.oldest_ages)},
            "outcomes": snapshot.outcomes,
            "recent_errors": [{"at": error.at, "key": error.key, "request": error.request, "outcome": error.outcome,
                               "detail": error.detail} for error in self._feed.recent_errors()],
        }

    def pause_key(self, key: str, paused: bool) -> str | None:
        found = self._key(key)
        if found is None:
            return None
        if paused:
            found.pause()
        else:
            found.resume()
        log.warning("key %s %s from the control API", found.name, "paused" if paused else "resumed")
        return self._state_of(found)

    def retire_key(self, key: str, last: bool) -> str | None:
        found = self._key(key)
        if found is None:
            return None
        self._daemon.retire_key(found, last)
        return self._state_of(found)

    def unpark_key(self, key: str) -> str | None:
        found = self._key(key)
        if found is None:
            return None
        self._daemon.unpark_key(found)
        return self._state_of(found)

    def _state_of(self, key: ApiKey) -> str:
        return self._daemon.key_status(key).condition.value

    def pause(self, paused: bool) -> bool:
        if paused:
            self._daemon.pause()
        else:
            self._daemon.resume()
        return self._daemon.paused

    def drain(self) -> None:
        self._daemon.drain()

    def dead(self, chosen: frozenset[FinalOutcome], limit: int, after: str | None) -> Page:
        page = self._letters().page(chosen, limit, after)
        return Page(self._daemon.mark_under_way(page.items), page.next)

    def requeue(self, ids: list[str] | None, chosen: frozenset[FinalOutcome],
                may_double: bool) -> tuple[list[str], list[str]]:
        works, dead = self._letters().requests(ids, chosen)
        works, refused = ask_first(works, dead, can_ask=self._daemon.can_ask, may_double=may_double)
        return self._daemon.requeue(works, dead), refused

    def _key(self, short_id: str) -> ApiKey | None:
        return next((key for key in self._daemon.keys if key.id[:SHORT_ID] == short_id), None) \
            if len(short_id) == SHORT_ID else None

    def _letters(self) -> DeadLetters:
        if self._dead is None:
            raise NoResults("this run writes no results file (--results): it has no dead letters to show")
        return self._dead
