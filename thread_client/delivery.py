"""The delivery promise (``--delivery``) and everything it implies, decided in one place."""

from __future__ import annotations

from dataclasses import dataclass

from . import defaults
from .errors import ConfigError

__all__ = ["AT_LEAST_ONCE", "DELIVERIES", "Delivery", "EXACTLY_ONCE"]


@dataclass(frozen=True)
class Delivery:
    """What one delivery promise asks of every part, passed whole to each.

    An attempt is ambiguous when the request may have reached the API but no definite answer
    came back. At-least-once sends it again with a fresh nonce (it may be accepted twice, and
    is counted as ambiguous). Exactly-once leans on the nonce rule instead: it asks again with
    the *same* nonce until an answer settles it, which holds only if no other send on the key
    comes in between, and only across a crash if every send was on the disk before it left.
    """

    name: str
    #: One send in flight per key: the order gate opens only on an answer, never on a guess.
    one_in_flight: bool
    #: The send journal and the final records are on the disk (fdatasync) before the key's next send.
    durable_outputs: bool
    #: An ambiguous attempt is asked again with its own nonce until settled; after a restart the last
    #: journaled send of each key is settled first; a send another member may have made is never repeated.
    settles_ambiguous: bool

    def __str__(self) -> str:
        return self.name

    @property
    def threads_per_key(self) -> int:
        """The default number of worker threads (requests in flight at most) per key."""
        return 1 if self.one_in_flight else defaults.THREADS_PER_KEY

    @classmethod
    def named(cls, name: str) -> "Delivery":
        """The promise called ``name``; ConfigError naming the choices if there is none."""
        try:
            return DELIVERIES[name]
        except KeyError:
            raise ConfigError(f"--delivery must be one of {', '.join(DELIVERIES)}, got {name!r}") from None


AT_LEAST_ONCE = Delivery("at-least-once", one_in_flight=False, durable_outputs=False, settles_ambiguous=False)
EXACTLY_ONCE = Delivery("exactly-once", one_in_flight=True, durable_outputs=True, settles_ambiguous=True)
DELIVERIES = {delivery.name: delivery for delivery in (AT_LEAST_ONCE, EXACTLY_ONCE)}
