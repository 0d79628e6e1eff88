"""Keys shared by several daemons through the store: each key is driven by one member at a time, under its lease.

Every member builds workers for every configured key; a worker sends only while its
key's lease says so (``ApiKey.may_send``). A keeper thread beats the member's
heartbeat, works out which keys this member wins over the live members
(rendezvous hashing), takes their leases (then keeps quiet for a window plus the
unanswered hold after the previous lease ended), renews them, and hands over
those it no longer wins once their last answers are in.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Iterable

from .. import defaults
from ..clock import Clock, monotonic
from ..errors import ConfigError, StoreUnavailable
from ..limits.keys import ApiKey, BaseKeyPool, shown_names
from ..limits.limiter import ThreadSafeRateLimiter
from ..limits.nonces import NonceGenerator
from ..limits.timestamps import ServerTimestamps
from ..limits.order_rule import OrderRule
from ..threads import LoopThread, ManagedThread
from .address import StoreAddress, store_call
from .keyspace import Keyspace
from .leases import KeyLease
from .members import Membership
from .nonce_blocks import NonceBlocks
from .scripts import Scripts
from .store_watch import StoreWatch

if TYPE_CHECKING:
    import redis

__all__ = ["LeasedKeyPool"]

log = logging.getLogger(__name__)


class LeasedKeyPool(BaseKeyPool):
    """The configured keys, each usable only under its lease in the store at ``address``.

    ``lease_ttl``: how long a lease (and a heartbeat) lasts unrenewed; renewed every third of it.
    A member that stops (SIGKILL, SIGSTOP, cut off from the store) loses its keys after at most
    ``lease_ttl``, by the store's clock; by its own clock it stops sending ``margin`` earlier.
    """

    def __init__(
        self,
        address: StoreAddress,
        secrets: Iterable[str],
        member: str,
        *,
        rate: int,
        window: float,
        order_latency: float,
        unanswered_hold: float,
        order_rule: OrderRule | None = None,
        timestamps: ServerTimestamps | None = None,
        lease_ttl: float = defaults.LEASE_TTL,
        keyspace: Keyspace = Keyspace(),
        clock: Clock = monotonic,
    ) -> None:
        self._store: "redis.Redis" = address.connect(timeout=lease_ttl / 6)
        scripts = Scripts(self._store)  # one registration for every lease, nonce block and heartbeat
        self._keyspace = keyspace
        self.member = member
        self._every = lease_ttl / 3
        self._leases: dict[str, KeyLease] = {}  # key id -> lease
        keys = []
        for secret, name in shown_names(secrets).items():
            names = keyspace.key(secret)
            lease = KeyLease(scripts, names, member, ttl=lease_ttl, quiet=window + unanswered_hold,
                             margin=max(0.05, lease_ttl / 10), clock=clock)
            nonces = timestamps or NonceGenerator(reserve=NonceBlocks(scripts, names, lease).reserve)
            limiter = ThreadSafeRateLimiter(
                rate, name=name, window=window, order_latency=order_latency, order_rule=order_rule,
                unanswered_hold=unanswered_hold, nonces=nonces, clock=clock,
            )
            key = ApiKey(secret, limiter, may_send=lease.may_send, name=name, epoch=partial(getattr, lease, "fence"))
            self._leases[key.id] = lease
            keys.append(key)
        super().__init__(keys)
        self._key_of = {key.id: key for key in keys}
        self._membership = Membership(scripts, keyspace.members, member, ttl=lease_ttl,
                                      claim_key=keyspace.member_claim(member))
        self._lease_ttl = lease_ttl
        self._watch = StoreWatch(member)
        self._stop = threading.Event()
        self._closing = False  # shutting down: keep (renew) what is held until the last answers, take nothing new
        self._keeper = LoopThread("lease-keeper", self._keep)  # started by the daemon, supervised

    def __repr__(self) -> str:
        return f"<LeasedKeyPool {self.member} holds {sorted(self.held())}>"

    def held(self) -> dict[str, int]:
        """Masked key name -> fence, for the keys whose lease this member holds now."""
        return {self._key_of[kid].name: lease.fence for kid, lease in self._leases.items() if lease.fence is not None}

    def threads(self) -> list[ManagedThread]:
        """The lease keeper: the daemon starts it after ``start()``, supervises it and names it in the summary
        if it died; ``release()`` stops it."""
        return [self._keeper]

    def start(self) -> None:
        """Claim this member's name and register the keys' masked names (for ``status``). A name another
        process holds is waited for one heartbeat (a crashed process's claim runs out by then), then
        refused (ConfigError); StoreUnavailable if the store does not answer."""
        deadline = time.monotonic() + self._lease_ttl * 1.5
        while not self._membership.claim():
            if time.monotonic() >= deadline:
                raise ConfigError(f"--member {self.member}: another running daemon uses this name (its heartbeat is "
                                  "live); give each daemon a name of its own")
            time.sleep(self._every / 2)
        with store_call():
            self._store.hset(self._keyspace.key_names, mapping={kid: key.name for kid, key in self._key_of.items()})

    def _keep(self) -> None:
        """The keeper loop: one round every third of a lease; a store that does not answer is logged once
        (the leases then run out by this side's clock, and every send on them stops). Safe to run again
        after it raised: its state is the pool's."""
        while not self._stop.is_set():
            try:
                self._round()
                self._watch.answered()
            except StoreUnavailable as exc:
                self._watch.failed(exc, "no send on a key past its lease")
            self._stop.wait(self._every)

    def _round(self) -> None:
        if not self._membership.claim():  # it reads the same consumer's entries: this daemon must not go on
            for lease in self._leases.values():
                lease.lost()
            raise ConfigError(f"--member {self.member}: another daemon runs under this name now (this one was silent "
                              "past its heartbeat); this one stops")
        members = self._membership.beat()
        wanted = self._membership.keys_for(self._leases, members)
        for kid, lease in self._leases.items():
            key = self._key_of[kid]
            if key.retired_because is not None:  # parked or refused here: let another member try it
                wanted.discard(kid)
            if lease.held and kid in wanted:
                fence = lease.fence
                if not lease.renew():
                    log.error("%s: lost the lease of %s (fence %s ended): no more sends on it", self.member, key.name,
                              fence)
            elif lease.held:
                self._hand_over(key, lease)
            elif kid in wanted and not self._closing:
                grant = lease.acquire()
                if grant is not None:
                    key.limiter.nonces.reserve_again()  # a block from an earlier lease may lie below the last owner's
                    key.limiter.hold(grant.quiet_for)
                    log.info("%s: took the lease of %s, fence %d; first send in %.2f s (%d members)", self.member,
                             key.name, grant.fence, grant.quiet_for, len(members))

    def _hand_over(self, key: ApiKey, lease: KeyLease) -> None:
        """Another member wins this key now: send nothing new, and release it once its last answer is in."""
        lease.handing_over = True
        if key.limiter.state().in_flight:
            lease.renew()
            return
        fence = lease.fence
        lease.release()
        log.info("%s: handed over %s (fence %s)", self.member, key.name, fence)

    def close(self) -> None:
        self._closing = True
        super().close()

    def release(self) -> None:
        """Leave: stop the keeper, release every lease and the membership, so the others take over at once.
        If the store does not take it (or a bug gets in the way), the leases and the heartbeat run out by
        themselves: the shutdown goes on."""
        self._stop.set()
        if self._keeper.is_alive():
            self._keeper.join()
        try:
            for lease in self._leases.values():
                if lease.held:
                    lease.release()
            self._membership.leave()
        except StoreUnavailable as exc:
            log.warning("%s: could not release the leases (%s); they run out by themselves", self.member, exc)
        except Exception:
            log.exception("%s: could not release the leases; they run out by themselves", self.member)
        self._store.close()
