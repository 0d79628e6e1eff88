"""Nonces across processes and hosts: blocks reserved atomically in the store, per key.

A block starts above the key's stored high-water mark and above the store's
``TIME`` in microseconds, and only the current lease holder may reserve one. So
host clocks and their skew never matter, and a stale owner's nonces (from blocks
it reserved while it held the lease) are always below the new owner's.
Microseconds since the epoch (~1.8e15) stay below 2^53, where Lua's doubles are exact.
"""

from __future__ import annotations

from ..errors import KeyNotHeld, StoreUnavailable
from ..limits.nonces import BLOCK
from .keyspace import KeyNames
from .leases import KeyLease
from .scripts import Scripts

__all__ = ["NonceBlocks"]


class NonceBlocks:
    """Reserves blocks of ``size`` nonces for one key, while ``lease`` holds it. Nonces follow the clock in
    microseconds, so the size is time: the default, 10 s of it, is one round trip per key every 10 s."""

    def __init__(self, scripts: Scripts, names: KeyNames, lease: KeyLease, *, size: int = BLOCK) -> None:
        if size < 1:
            raise ValueError("a block holds at least one nonce")
        self._names = names
        self._lease = lease
        self._size = size
        self._scripts = scripts

    def reserve(self, wanted: int) -> tuple[int, int]:
        """A block (first, last) with ``first >= wanted``; KeyNotHeld if the lease is not ours, or the
        store cannot say so right now."""
        try:
            reply = self._scripts.reserve_nonces(keys=[self._names.lease, self._names.nonce_mark],
                                                 args=[self._lease.token, wanted, self._size])
        except StoreUnavailable as exc:
            raise KeyNotHeld(self._names.lease) from exc
        if reply is None:
            raise KeyNotHeld(self._names.lease)
        first, last = (int(value) for value in reply)
        return first, last
