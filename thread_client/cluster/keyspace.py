"""The names of everything the daemons keep in the store.

Every name that belongs to one API key carries that key's hash tag ``{k:<id>}``,
so a script touching several of them stays in one Redis Cluster slot. The id is
a hash of the secret: the store never sees a key itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..limits.keys import key_id

__all__ = ["KeyNames", "Keyspace"]


@dataclass(frozen=True, slots=True)
class KeyNames:
    """The store's names for one API key."""

    lease: str  # the owner's token, expiring with the lease
    lease_until: str  # when the current or last lease ends or ended (store time, ms): the next owner's quiet period
    fence: str  # incremented on every acquisition: the fencing token
    nonce_mark: str  # the highest nonce any owner may have used
    strikes: str  # the key's rate-limit strikes, from every member in every run: the server forgets none
    stamped_until: str  # until when (store ms) earlier owners' unanswered sends may still fill the server's ring
    holder_sends: str  # from its acquisition to its release: when the holder may first send, how long its sends last


@dataclass(frozen=True, slots=True)
class Keyspace:
    """All names under one ``prefix``, so several deployments can share a store."""

    prefix: str = "tc"

    def key(self, secret: str) -> KeyNames:
        return self.of_id(key_id(secret))

    def of_id(self, key: str) -> KeyNames:
        """The names of the API key whose ``key_id`` is ``key``."""
        tag = f"{self.prefix}:{{k:{key}}}"
        return KeyNames(f"{tag}:lease", f"{tag}:lease-until", f"{tag}:fence", f"{tag}:nonce-mark", f"{tag}:strikes",
                        f"{tag}:stamped-until", f"{tag}:holder-sends")

    @property
    def members(self) -> str:
        """Sorted set: member id -> when its heartbeat runs out (store time, ms)."""
        return f"{self.prefix}:members"

    def member_claim(self, member: str) -> str:
        """String: the token of the process running as ``member``, expiring with its heartbeat."""
        return f"{self.prefix}:member:{member}"

    @property
    def key_names(self) -> str:
        """Hash: key id -> masked key name, for ``status``."""
        return f"{self.prefix}:key-names"

    @property
    def paused(self) -> str:
        """Hash: key id -> "1" while the operator has the key paused (``console``); every member's lease keeper
        reads it each round, so whichever member owns the key stops sending on it."""
        return f"{self.prefix}:paused"
