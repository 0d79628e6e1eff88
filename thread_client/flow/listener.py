"""What a worker announces as it goes, to whoever listens (the metrics today; Prometheus or a console later)."""

from __future__ import annotations

from ..policy.answers import Outcome

__all__ = ["Listener", "Listeners"]


class Listener:
    """The hooks a worker calls; every one is a documented no-op here. A listener overrides the
    hooks it needs (dramatiq's middleware, in small), so the flow never imports what reports on it.
    Hooks are called from the daemon's threads, with no lock of the flow held, and must not block."""

    def attempted(self, key: str, outcome: Outcome, round_trip: float | None = None) -> None:
        """An attempt on ``key`` (masked) came to ``outcome``; ``round_trip`` is its HTTP time in
        seconds, None when nothing was timed (an expiry, a settling resend)."""

    def accepted(self, end_to_end: float) -> None:
        """A request was accepted ``end_to_end`` seconds after it was created."""

    def failed(self, key: str, request_id: str, outcome: Outcome, detail: str) -> None:
        """An attempt of ``request_id`` on ``key`` (masked) came to ``outcome`` other than accepted, for the
        reason ``detail`` (the server's words, or ours); announced after ``attempted``."""

    def retried(self) -> None:
        """A failed attempt spent one of its request's retries."""

    def stale_connection(self) -> None:
        """A kept connection the server had closed (or was about to) was replaced before a send, or by
        one resend of the same nonce; not an attempt."""

    def unmatched_answer(self, status: int) -> None:
        """An answer with ``status`` met no rule of the profile's answer table (read as "anything else")."""

    def late_answer(self, waited: float | None) -> None:
        """A send that timed out gave its slot back: the server showed it read the request ``waited``
        seconds after the timeout (a late answer, or a close), or None: it showed nothing within the cap."""


class Listeners(Listener):
    """Every hook called on each subscriber in turn, in the order they subscribed: the metrics, a console's feed.
    ``subscribe`` may be called while the workers run; the hooks read the subscribers without a lock (a tuple
    replaced whole), so a send costs one loop over them and nothing more."""

    def __init__(self, *subscribers: Listener) -> None:
        self._subscribers = subscribers

    def __repr__(self) -> str:
        return f"<Listeners {list(self._subscribers)!r}>"

    def subscribe(self, listener: Listener) -> None:
        self._subscribers = (*self._subscribers, listener)

    def attempted(self, key: str, outcome: Outcome, round_trip: float | None = None) -> None:
        for listener in self._subscribers:
            listener.attempted(key, outcome, round_trip)

    def accepted(self, end_to_end: float) -> None:
        for listener in self._subscribers:
            listener.accepted(end_to_end)

    def failed(self, key: str, request_id: str, outcome: Outcome, detail: str) -> None:
        for listener in self._subscribers:
            listener.failed(key, request_id, outcome, detail)

    def retried(self) -> None:
        for listener in self._subscribers:
            listener.retried()

    def stale_connection(self) -> None:
        for listener in self._subscribers:
            listener.stale_connection()

    def unmatched_answer(self, status: int) -> None:
        for listener in self._subscribers:
            listener.unmatched_answer(status)

    def late_answer(self, waited: float | None) -> None:
        for listener in self._subscribers:
            listener.late_answer(waited)
