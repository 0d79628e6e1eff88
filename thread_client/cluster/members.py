"""Membership: which daemons are alive, and which keys each should drive.

Each member renews a heartbeat (its expiry, in the store's time, in one sorted
set); a member whose heartbeat ran out is dropped by the next heartbeat of any
other. Keys are spread by rendezvous hashing over the live members: every member
computes the same owner for a key from the same member list, and a member joining
or leaving moves only the keys it wins or held, not the others.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Iterable

from .scripts import Scripts

__all__ = ["Membership", "rendezvous_owner"]


def rendezvous_owner(key: str, members: Iterable[str]) -> str | None:
    """The member that wins ``key``: the highest hash of (member, key). None if there is no member."""
    def weight(member: str) -> bytes:
        return hashlib.sha256(f"{member}\0{key}".encode()).digest()
    return max(members, key=weight, default=None)


class Membership:
    """One member's heartbeat in the sorted set ``members_key`` (member -> expiry in store ms), and its claim on
    its name (``claim_key``): two processes under one name would read one consumer's pending entries and each
    take the other's for its own, so a second one is refused while the first beats."""

    def __init__(self, scripts: Scripts, members_key: str, member: str, *, ttl: float, claim_key: str) -> None:
        self.member = member
        self._key = members_key
        self._claim_key = claim_key
        self._token = secrets.token_hex(16)
        self._ttl_ms = max(1, round(ttl * 1000))
        self._scripts = scripts

    def claim(self) -> bool:
        """Claim (or renew the claim on) this member's name for this process; False if another live process has it."""
        return bool(self._scripts.claim_member(keys=[self._claim_key], args=[self._token, self._ttl_ms]))

    def __repr__(self) -> str:
        return f"<Membership {self.member}>"

    def beat(self) -> list[str]:
        """Renew this member's heartbeat; returns the live members (this one included), sorted."""
        return list(self._scripts.heartbeat(keys=[self._key], args=[self.member, 1, self._ttl_ms]))

    def leave(self) -> list[str]:
        """Drop this member at once (a clean stop), so the others take its keys without waiting, and give up
        its name, so it can be started again at once; the rest. Nothing is dropped under a name another
        process holds now."""
        if not self._scripts.claim_member(keys=[self._claim_key], args=[self._token, 0]):
            return []
        return list(self._scripts.heartbeat(keys=[self._key], args=[self.member, 0, self._ttl_ms]))

    def keys_for(self, key_ids: Iterable[str], members: Iterable[str]) -> set[str]:
        """The keys this member should drive, of ``key_ids``, given the live ``members``."""
        members = list(members)
        return {key for key in key_ids if rendezvous_owner(key, members) == self.member}
