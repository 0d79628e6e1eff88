"""Key leases: one daemon drives an API key only while it holds that key's lease in the store.

A lease is ``SET lease token NX PX ttl``, renewed by a script that checks the
token, with a fencing counter bumped on every acquisition. Any lease can run out
while its holder is paused (GC, SIGSTOP, a slow disk), and the exchange cannot
reject a stale holder's request for spending a rate-limit slot, so the holder
fences itself: it sends only before a deadline on its own monotonic clock,
counted from *before* the request that granted or renewed the lease, less a
margin, checked as the last step before the bytes leave (``may_send``, asked by
the transport after the request is built and its connection made); a failed
renewal ends it at once. The next owner then keeps quiet for a window plus the
unanswered hold after the old lease ended (in the store's time), and until the
old owner's sends watched for a late answer can no longer fill the ring, so every
stamp the old owner may have left in the server's ring has expired before its first
send. A holder that releases the key says how long its watched sends last (none:
nothing more); one whose lease runs out unreleased (killed, paused, cut off from
the store) cannot, so any send it made before its lease ended may be watched up to
the late-answer cap, and the next owner waits the cap out too: about two minutes
before a crashed member's key sends again, the price of never meeting its stamps.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import defaults
from ..clock import Clock, monotonic
from .keyspace import KeyNames, Keyspace
from .scripts import Scripts

if TYPE_CHECKING:
    import redis

__all__ = ["KeyHold", "KeyLease", "LeaseGrant", "key_holds", "lease_holders"]

@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """An acquired lease: its fencing token, how long to keep quiet before the first send, and the key's
    rate-limit strikes so far (every member's: the server counts them all)."""

    fence: int
    quiet_for: float
    strikes: int


class KeyLease:
    """This member's hold on one API key. ``acquire``/``renew``/``release`` are called by one thread
    (the member's lease keeper); ``may_send`` by the key's workers, right before each send.

    ``quiet``: a window plus the unanswered hold, the time a previous owner's stamps can outlive its
    lease. ``late_answer_cap``: how long a send that timed out is watched for its late answer: if this
    lease runs out unreleased, the next owner keeps quiet that much longer. ``margin``: how long before
    the lease's end (by this process's clock) sends stop.
    """

    def __init__(
        self,
        scripts: Scripts,
        names: KeyNames,
        member: str,
        *,
        ttl: float,
        quiet: float,
        margin: float,
        late_answer_cap: float = defaults.LATE_ANSWER_CAP,
        clock: Clock = monotonic,
    ) -> None:
        if not 0 <= margin < ttl:
            raise ValueError("the margin must be shorter than the lease")
        self._names = names
        self.token = f"{member}:{secrets.token_hex(8)}"  # what the store holds while the lease is ours
        self._ttl_ms = max(1, round(ttl * 1000))
        self._ttl = ttl
        self._quiet_ms = _ms(quiet)
        self._outlive_ms = _ms(quiet + late_answer_cap)  # after the lease's end, by the store: timeout, watch, window
        self._margin = margin
        self._clock = clock
        self._scripts = scripts
        # Written by the keeper, read by workers: a float swap is atomic, and a stale read can only be older.
        self._send_from = math.inf  # the end of the quiet period after an acquisition
        self._send_before = -math.inf
        self.fence: int | None = None
        self.handing_over = False  # still ours, but no new send: its last answers are awaited before the release
        self.takes = 0  # acquisitions so far: each is the key changing hands (written by the keeper, read by metrics)

    def __repr__(self) -> str:
        return f"<KeyLease {self._names.lease} fence={self.fence} held={self.may_send()}>"

    def may_send(self) -> bool:
        """Whether a send may leave now: the lease is held, its quiet period over, it is not being handed
        over, and its end (less the margin) is not reached."""
        return not self.handing_over and self._send_from <= self._clock() < self._send_before

    @property
    def held(self) -> bool:
        return self.fence is not None

    def epoch(self) -> object:
        """The key's ``ApiKey.epoch``: the fence while the lease is held by this side's clock (its end less the
        margin not reached), else a new object, equal to no earlier value. Past that end another member may
        have taken the key and sent on it, though the fence is unchanged: it is not updated while the store
        cannot be reached."""
        fence = self.fence
        return fence if fence is not None and self._clock() < self._send_before else object()

    def acquire(self) -> LeaseGrant | None:
        """Take the lease if nobody holds it; None if somebody does."""
        asked_at = self._clock()
        names = self._names
        reply = self._scripts.acquire_lease(
            keys=[names.lease, names.lease_until, names.fence, names.strikes, names.stamped_until, names.holder_sends],
            args=[self.token, self._ttl_ms, self._quiet_ms, self._outlive_ms])
        if reply is None:
            return None
        fence, sends_from_ms, now_ms, strikes = (int(value) for value in reply)
        quiet_for = (sends_from_ms - now_ms) / 1000
        self.fence, self.handing_over = fence, False
        self.takes += 1
        self._send_from = self._clock() + quiet_for  # counted from the reply: later than the store's now, so safe
        self._send_before = asked_at + self._ttl - self._margin
        return LeaseGrant(fence, quiet_for, strikes)

    def renew(self) -> bool:
        """Extend the lease; False (and no further send) if it is no longer ours. Nothing is said of the sends
        watched for a late answer: should the lease run out unreleased, the next owner waits out the cap anyway."""
        asked_at = self._clock()
        renewed = self._scripts.renew_lease(
            keys=[self._names.lease, self._names.lease_until], args=[self.token, self._ttl_ms])
        if renewed == 1:
            self._send_before = asked_at + self._ttl - self._margin
            return True
        self.lost()
        return False

    def lost(self) -> None:
        """Stop sending at once (a renewal failed or the store cannot be reached)."""
        self._send_before = -math.inf
        self.fence = None
        self.handing_over = False

    def release(self, stamped_for: float = 0.0) -> None:
        """Give the lease up (after the key's last answer), so the next owner's quiet period starts now, or
        once this holder's unanswered sends can no longer fill the ring (``stamped_for`` seconds from now),
        or an earlier owner's, whichever is later."""
        self.lost()
        names = self._names
        self._scripts.release_lease(
            keys=[names.lease, names.lease_until, names.stamped_until, names.holder_sends],
            args=[self.token, _ms(stamped_for)])


def _ms(seconds: float) -> int:
    """Whole milliseconds, rounded up: a bound kept in the store is never cut short."""
    return max(0, math.ceil(seconds * 1000))


@dataclass(frozen=True, slots=True)
class KeyHold:
    """What the store says of one API key: who holds its lease now (None: nobody), its fence so far, its
    rate-limit strikes from every member, and whether the operator paused it (``Keyspace.paused``)."""

    id: str
    name: str  # masked
    owner: str | None
    fence: int
    strikes: int
    paused: bool


def key_holds(store: "redis.Redis", keyspace: Keyspace) -> list[KeyHold]:
    """Every key a member has registered, sorted by masked name, read in one round trip after the names; a
    lease's token is ``<member>:<random>``. Read by ``status`` and the cluster console."""
    names = store.hgetall(keyspace.key_names)
    paused = set(store.hkeys(keyspace.paused))
    ids = sorted(names, key=names.__getitem__)
    reads = store.pipeline(transaction=False)
    for key in ids:
        of = keyspace.of_id(key)
        reads.get(of.lease).get(of.fence).get(of.strikes)
    found = reads.execute()
    return [KeyHold(key, names[key], token.rsplit(":", 1)[0] if token else None, int(fence or 0),
                    int(strikes or 0), key in paused)
            for key, token, fence, strikes in zip(ids, found[0::3], found[1::3], found[2::3])]


def lease_holders(store: "redis.Redis", keyspace: Keyspace) -> dict[str, tuple[str | None, int]]:
    """Masked key name -> (the member holding its lease now, or None; its fence so far), for every key
    a member has registered (read by the tools)."""
    return {hold.name: (hold.owner, hold.fence) for hold in key_holds(store, keyspace)}
