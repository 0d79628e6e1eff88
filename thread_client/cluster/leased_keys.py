"""Keys shared by several daemons through the store: each key is driven by one member at a time, under its lease.

Every member builds workers for every configured key; a worker sends only while its
key's lease says so (``ApiKey.may_send``). A keeper thread beats the member's
heartbeat, works out which keys this member wins over the live members
(rendezvous hashing), takes their leases (then keeps quiet for a window plus the
unanswered hold after the previous lease ended, or until the previous owner's sends
watched for a late answer can no longer be stamped: up to the late-answer cap after
a lease that ran out unreleased), renews them, and hands over
those it no longer wins once their last answers are in. A key's strikes live with
it in the store: whichever member reads a 429 counts it there, the next owner
carries the count on, and a key whose count reached the strike budget is retired
by each member that takes it, before anything is sent. The operator's pause of a key lives there too (the cluster
console's): every keeper reads the flags each round, and whichever member holds a paused key sends nothing on it.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Iterable, Sequence

from .. import defaults
from ..errors import ConfigError, StoreUnavailable
from ..limits.host_state import KeyState
from ..limits.keys import ApiKey, BaseKeyPool, KeyPacing, RetireReason, shown_names
from ..limits.limiter import PausedBy
from ..threads import LoopThread, ManagedThread
from .address import StoreAddress, store_call
from .keyspace import KeyNames, Keyspace
from .leases import KeyLease, LeaseGrant
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
    ``strike_budget``: the strikes a key may have in its whole life, from every member (``Config.strike_budget``).
    ``late_answer_cap``: how long a send that timed out is watched for its late answer (``LateAnswers``): the server
    may stamp it until then, so the key's next owner waits that out (and a window more); after a member that
    stopped without releasing a key (killed, paused, cut off), its next owner waits the whole cap (``KeyLease``).
    ``state_dir``: where each key's host lock is, held shared for the life of the process: the other members on
    this host share it, a host-mode daemon on the same key is refused it (KeyInUse, both ways round).
    """

    def __init__(
        self,
        address: StoreAddress,
        secrets: Iterable[str],
        member: str,
        *,
        pacing: KeyPacing,
        accounts: Sequence[str] = (),
        strike_budget: int,
        state_dir: str,
        lease_ttl: float = defaults.LEASE_TTL,
        late_answer_cap: float = defaults.LATE_ANSWER_CAP,
        keyspace: Keyspace = Keyspace(),
    ) -> None:
        secrets = list(secrets)
        account_of = dict(zip(secrets, accounts))
        memory = pacing.limits.memory  # how long the server's limit states may remember a send
        clock = pacing.clock
        named = shown_names(secrets)
        self._host_locks = _lock_on_host(state_dir, named)
        self._store: "redis.Redis" = address.connect(timeout=lease_ttl / 6)
        scripts = Scripts(self._store)  # one registration for every lease, nonce block and heartbeat
        self._keyspace = keyspace
        self.member = member
        self._every = lease_ttl / 3
        self._leases: dict[str, KeyLease] = {}  # key id -> lease
        keys = []
        for secret, name in named.items():
            names = keyspace.key(secret)
            lease = KeyLease(scripts, names, member, ttl=lease_ttl, quiet=memory + pacing.unanswered_hold,
                             margin=max(0.05, lease_ttl / 10), late_answer_cap=late_answer_cap, clock=clock)
            account = account_of.get(secret, "")
            limiter = pacing.limiter(name, account, NonceBlocks(scripts, names, lease).reserve)
            key = ApiKey(secret, limiter, may_send=lease.may_send, name=name, epoch=lease.epoch,
                         remember_strikes=partial(_count_strike, scripts, names), account=account)
            self._leases[key.id] = lease
            keys.append(key)
        super().__init__(keys)
        self._key_of = {key.id: key for key in keys}
        self._membership = Membership(scripts, keyspace.members, member, ttl=lease_ttl,
                                      claim_key=keyspace.member_claim(member))
        self._lease_ttl = lease_ttl
        self._strike_budget = strike_budget
        # From a watched send's timeout, how long its stamp may weigh in the server's limits: the watch's cap, then
        # the limits' memory.
        self._stamps_last = late_answer_cap + memory
        self._clock = clock
        self._watch = StoreWatch(member)
        self._stop = threading.Event()
        self._paused_here: set[str] = set()  # key ids paused by the store's flag: the keeper's alone (no lock)
        self._closing = False  # shutting down: keep (renew) what is held until the last answers, take nothing new
        self._keeper = LoopThread("lease-keeper", self._keep)  # started by the daemon, supervised

    def __repr__(self) -> str:
        return f"<LeasedKeyPool {self.member} holds {sorted(self.held())}>"

    def held(self) -> dict[str, int]:
        """Masked key name -> fence, for the keys whose lease this member holds now."""
        return {self._key_of[kid].name: lease.fence for kid, lease in self._leases.items() if lease.fence is not None}

    def lease_takes(self) -> dict[str, int]:
        """Masked key name -> the times this member took the key's lease (every member's together: how often
        the key changed hands)."""
        return {self._key_of[kid].name: lease.takes for kid, lease in self._leases.items()}

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
        with store_call():
            self._follow_pauses(set(self._store.hkeys(self._keyspace.paused)))
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
                # Before the lease: a block from an earlier lease of this member may lie below the last owner's
                # nonces, and a worker may draw as soon as the lease is held (a quiet period of 0).
                key.limiter.nonces.reserve_again()
                grant = lease.acquire()
                if grant is not None and self._spent(key, grant):
                    self._hand_over(key, lease)
                elif grant is not None:
                    key.limiter.hold(grant.quiet_for)
                    log.info("%s: took the lease of %s, fence %d; first send in %.2f s (%d members)", self.member,
                             key.name, grant.fence, grant.quiet_for, len(members))

    def _follow_pauses(self, flagged: set[str]) -> None:
        """The operator's pauses in the store (key ids, ``Keyspace.paused``, set by the cluster console): each key
        flagged there is paused here, owned now or not, so whichever member holds it stops sending on it (what
        is in flight finishes; its work goes to this member's other keys); one no longer flagged is resumed. It is a
        pause of its own (``PausedBy.CLUSTER``): this member's own control API neither lifts it nor has its own
        pause lifted by it."""
        for kid, key in self._key_of.items():
            if kid in flagged:
                if kid not in self._paused_here:
                    key.limiter.pause(PausedBy.CLUSTER)
                    self._paused_here.add(kid)
                    log.warning("%s: key %s paused from the store (the cluster console)", self.member, key.name)
            elif kid in self._paused_here:
                self._paused_here.discard(kid)
                key.limiter.resume(PausedBy.CLUSTER)
                log.warning("%s: key %s resumed from the store (the cluster console)", self.member, key.name)

    def retire_refused(self, key: ApiKey) -> str | None:
        """Every key: retired here, it would only be handed over (the keeper lets go of a retired key) and another
        member would go on sending on it."""
        return (f"key {key.name} is shared with the other members of the work stream: retired here, another member "
                "would take it over and go on sending on it; pause it from the cluster console (thread-client "
                "console) to stop it on every member, or take it out of every member's keys file")

    def _spent(self, key: ApiKey, grant: LeaseGrant) -> bool:
        """Carry on the key's strikes from the store; True (and the key retired here) if they reached the budget."""
        if key.carry_strikes(grant.strikes) < self._strike_budget:
            return False
        if key.retire(RetireReason.STRIKE_BUDGET_SPENT):
            log.error("%s: key %s retired (strike budget spent: %d rate-limit strikes from every member in every run, "
                      "one short of the server's block); left to the others, who retire it too", self.member,
                      key.name, key.lifetime_strikes)
        return True

    def _hand_over(self, key: ApiKey, lease: KeyLease) -> None:
        """Another member wins this key now: send nothing new, and release it once its last answer is in."""
        lease.handing_over = True
        if key.limiter.state().in_flight:
            lease.renew()
            return
        fence = lease.fence
        lease.release(self._stamped_for(key))
        log.info("%s: handed over %s (fence %s)", self.member, key.name, fence)

    def _stamped_for(self, key: ApiKey) -> float:
        """How long from now this member's unanswered sends on ``key`` may still fill the server's ring, told
        the store as the lease is released: one watched for its late answer may be stamped until the watch's
        cap, and fills the ring a window more (a send not yet timed out is covered by the next owner's quiet
        period)."""
        since = key.watched_since()
        return 0.0 if since is None else max(0.0, since + self._stamps_last - self._clock())

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
            for kid, lease in self._leases.items():
                if lease.held:
                    lease.release(self._stamped_for(self._key_of[kid]))
            self._membership.leave()
        except StoreUnavailable as exc:
            log.warning("%s: could not release the leases (%s); they run out by themselves", self.member, exc)
        except Exception:
            log.exception("%s: could not release the leases; they run out by themselves", self.member)
        self._store.close()
        for state in self._host_locks:
            state.unlock()


def _count_strike(scripts: Scripts, names: KeyNames, total: int) -> int:
    """Count one strike in the store (``ApiKey``'s ``remember_strikes``): ``total``, this member's count, is
    not written, since the store's count holds every member's; it returns that one."""
    return int(scripts.count_strike(keys=[names.strikes], args=[]))


def _lock_on_host(state_dir: str, named: dict[str, str]) -> list[KeyState]:
    """Each key's host lock in ``state_dir`` (secret -> shown name), shared with the other members on this host;
    KeyInUse if a host-mode daemon holds one (then none is kept): it would drive the key beside the members."""
    states: list[KeyState] = []
    try:
        for secret, name in named.items():
            state = KeyState(state_dir, secret, name)
            state.lock(shared=True)
            states.append(state)
    except BaseException:
        for state in states:
            state.unlock()
        raise
    return states
