"""What a worker announces as it goes, to whoever listens (the metrics today; Prometheus or a console later)."""

from __future__ import annotations

from ..policy.answers import Outcome

__all__ = ["Listener"]


class Listener:
    """The hooks a worker calls; every one is a documented no-op here. A listener overrides the
    hooks it needs (dramatiq's middleware, in small), so the flow never imports what reports on it.
    Hooks are called from the daemon's threads, with no lock of the flow held, and must not block."""

    def attempted(self, key: str, outcome: Outcome, round_trip: float | None = None) -> None:
        """An attempt on ``key`` (masked) came to ``outcome``; ``round_trip`` is its HTTP time in
        seconds, None when nothing was timed (an expiry, a settling resend)."""

    def accepted(self, end_to_end: float) -> None:
        """A request was accepted ``end_to_end`` seconds after it was created."""

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
