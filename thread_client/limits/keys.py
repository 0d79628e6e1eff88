"""The API keys in use: each key's secret, id, shown name, limiter and retirement, and the pool of them."""

from __future__ import annotations

import collections
import enum
import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from .. import defaults
from ..clock import Clock, monotonic
from .host_state import KeyState
from .limiter import PausedBy, ThreadSafeRateLimiter
from .nonces import NonceGenerator, Reserve
from .timestamps import ServerTimestamps
from .order_rule import OrderRule
from .scopes import RuleScopes

__all__ = ["ApiKey", "BaseKeyPool", "HostKeyPool", "KeyPacing", "RetireReason", "Strike", "key_id", "mask",
           "shown_names"]

log = logging.getLogger(__name__)


def key_id(secret: str) -> str:
    """A stable, non-reversible id of an API key, the same on every host: what the send journal, a
    restart and the shared store know a key by (two keys can share a masked name)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


def mask(secret: str) -> str:
    """A key as people see it: never the whole secret (``UT4N...JYA6``)."""
    return f"{secret[:4]}...{secret[-4:]}" if len(secret) >= 12 else "*" * len(secret)


def shown_names(secrets: Iterable[str]) -> dict[str, str]:
    """The name each key is shown by in logs, metrics and records: its mask, followed by the start
    of its id where another key would show the same (keys alike at both ends, short keys)."""
    secrets = list(secrets)
    masks = collections.Counter(mask(secret) for secret in secrets)
    return {secret: mask(secret) if masks[mask(secret)] == 1 else f"{mask(secret)}#{key_id(secret)[:6]}"
            for secret in secrets}


class RetireReason(enum.Enum):
    """Why a key sends nothing more, in the words records and the summary show it by. Every reason is final but
    ``PARKED``: the client's own stop of the key for this run's strikes, which the operator may lift (``unpark``)."""

    PARKED = "parked"  # too many strikes this run (``RetryPolicy.parks``)
    STRIKE_BUDGET_SPENT = "strike budget spent"  # too many strikes in all runs: one more could block it for good
    KEY_BLOCKED = "key_blocked"  # the server blocked it
    INVALID_KEY = "invalid_key"  # the server does not know it (401)
    FORBIDDEN = "forbidden"  # the server refuses it (403)
    OUTPUT_FAILED = "output failed"  # what a restart would need of its sends could not be written down
    OPERATOR = "retired by the operator"  # from the control API

    @property
    def final(self) -> bool:
        return self is not RetireReason.PARKED


#: The retirements that pause the key's limiter instead of closing it: a park, which the operator may lift, and the
#: operator's own retirement, which lets a send already out be settled (what it has in flight finishes).
_PAUSED_AS = {RetireReason.PARKED: PausedBy.PARKED, RetireReason.OPERATOR: PausedBy.RETIRED}
#: The operator's pauses of one key: from the daemon's own control API, and from the cluster console.
_OPERATOR_PAUSES = frozenset({PausedBy.OPERATOR, PausedBy.CLUSTER})


@dataclass(frozen=True, slots=True)
class Strike:
    """One unexplained 429 as counted: the key's strikes in this run and in all runs (every member's, for a
    shared key) with it, and the un-parks of the key before it (which strike budget of this run it counts in)."""

    this_run: int
    lifetime: int
    unparks: int


class ApiKey:
    """Shared by the worker threads of one key. Retiring is final: the server's refusals (and a spent strike
    budget, a failed output) close the limiter, which wakes every worker waiting on it; the operator's pauses it
    for good (``PausedBy.RETIRED``: what it has in flight finishes, a send in doubt is still settled). Parking
    pauses it (``PausedBy.PARKED``: nothing at all leaves it) until ``unpark``, and the operator's ``pause`` until
    ``resume``. ``id`` identifies the key; ``name`` shows it; ``account``: the keys file's account of it ("": none,
    it is its own)."""

    def __init__(
        self, secret: str, limiter: ThreadSafeRateLimiter, may_send: Callable[[], bool] = lambda: True, *,
        name: str | None = None, strikes_before: int = 0, remember_strikes: Callable[[int], int] = lambda total: total,
        epoch: Callable[[], object] = lambda: None, account: str = "",
    ) -> None:
        self.secret = secret
        self.id = key_id(secret)
        self.name = name if name is not None else mask(secret)
        self.account = account
        self.limiter = limiter
        # Asked right before each send: a key shared with other daemons may be sent on only under its lease.
        self.may_send = may_send
        # Changes whenever another sender may have used the key since (a shared key's lease fence, and a new value
        # once the lease's deadline has passed): a 400 to a nonce sent again proves its first copy accepted only if
        # nobody else sent on the key in between.
        self.epoch = epoch
        # Held by the one worker thread of the key that waits for its next send (from before it takes work until
        # the bytes of its send left): the key's other threads are in an exchange or parked on it, woken one at
        # a time, and the key's nonces leave in the order they were drawn.
        self.turn = threading.Lock()
        # Guards _retired_because (and the limiter's pause or close that goes with it), the strike counts, _unparks
        # and _watched; a key is retired for good at most once, parked while it is not.
        self._lock = threading.Lock()
        self._retired_because: RetireReason | None = None
        self._strikes = 0
        self._unparks = 0  # each gives the key a fresh strike budget for this run
        self._lifetime_strikes = strikes_before  # this run's and every earlier run's (the server forgets none)
        # Called once per strike with the lifetime count after it, before the strike is acted on (it is durable
        # then); one call at a time, so the count remembered last is never a smaller one. Returns the lifetime
        # count remembered: a store shared with other members counts theirs too, so it may be larger.
        self._remember_strikes = remember_strikes
        self._remembering = threading.Lock()
        # When each send on this key still watched for its late answer timed out (a server may stamp it until
        # the watch's cap): what a shared key's next owner must wait out.
        self._watched: collections.Counter[float] = collections.Counter()

    def __repr__(self) -> str:
        state = f"retired ({self._retired_because.value})" if self._retired_because else "active"
        return f"<ApiKey {self.name} {state}>"

    @property
    def retired_because(self) -> RetireReason | None:
        """Why the key sends nothing more (``PARKED`` until un-parked); None while it may send."""
        return self._retired_because

    @property
    def strikes(self) -> int:
        """Unexplained 429s in this run."""
        return self._strikes

    @property
    def lifetime_strikes(self) -> int:
        """Unexplained 429s in this run and every earlier one that kept its state here."""
        return self._lifetime_strikes

    def strike(self) -> Strike:
        """Count one unexplained 429 on this key and remember it across runs; returns it as counted (the
        park it may call for is ``retire``'s, with it). Raises OSError (a file) or StoreUnavailable (the
        shared store) if the count could not be made durable (it is counted in this run all the same)."""
        with self._lock:
            self._strikes += 1
            self._lifetime_strikes += 1
            strikes, unparks = self._strikes, self._unparks
        with self._remembering:
            with self._lock:
                latest = self._lifetime_strikes
            remembered = self._remember_strikes(latest)
        return Strike(strikes, self.carry_strikes(remembered), unparks)

    def carry_strikes(self, lifetime: int) -> int:
        """Take on the lifetime count the key's durable record holds (a shared key's, when its lease is
        taken: other members' strikes count too); a smaller one changes nothing. Returns the count."""
        with self._lock:
            self._lifetime_strikes = max(self._lifetime_strikes, lifetime)
            return self._lifetime_strikes

    def watch_started(self, timed_out_at: float) -> None:
        """A send on this key got no answer by ``timed_out_at`` (this process's clock); its connection is now
        watched for the server's late sign."""
        with self._lock:
            self._watched[timed_out_at] += 1

    def watch_ended(self, timed_out_at: float) -> None:
        """The watch of the send that timed out at ``timed_out_at`` ended: a sign came, or the cap passed."""
        with self._lock:
            self._watched[timed_out_at] -= 1
            if not self._watched[timed_out_at]:
                del self._watched[timed_out_at]

    def watched_since(self) -> float | None:
        """When the latest send still watched for its late answer timed out; None if none is."""
        with self._lock:
            return max(self._watched, default=None)

    @property
    def watching(self) -> int:
        """The sends on this key still watched for their late answer."""
        with self._lock:
            return sum(self._watched.values())

    @property
    def paused(self) -> bool:
        """Paused by the operator, here or from the cluster console (the daemon's own pause is the daemon's to
        show)."""
        return bool(self.limiter.paused_by & _OPERATOR_PAUSES)

    def pause(self) -> None:
        """The operator's pause: what the key has in flight finishes, it sends nothing more and takes no work (the
        other keys take its queue) until ``resume()``. Idempotent."""
        self.limiter.pause(PausedBy.OPERATOR)

    def resume(self) -> None:
        """Lift the operator's pause. Idempotent; a retired key stays retired."""
        self.limiter.resume(PausedBy.OPERATOR)

    def retire(self, reason: RetireReason, strike: Strike | None = None) -> bool:
        """Stop using this key: for good, or parked (``RetireReason.PARKED``, for ``strike``: refused if an
        un-park since gave the key a fresh budget). The operator's retirement and a park pause its limiter (what it
        has in flight finishes), any other closes it. True for the call that retired it; a parked key may still be
        retired for good, nothing else changes a retirement."""
        with self._lock:
            if self._retired_because is not None and (self._retired_because.final or not reason.final):
                return False
            if not reason.final and strike is not None and strike.unparks != self._unparks:
                return False
            self._retired_because = reason
            paused_by = _PAUSED_AS.get(reason)
            if paused_by is None:
                self.limiter.close()
            else:
                self.limiter.pause(paused_by)
        return True

    def unpark(self) -> bool:
        """Send again after a park, with a fresh strike budget for this run (the lifetime count stays, and so
        does the hold its last strike set: nothing is sent into the window that strike came from). True if the
        key was parked; whether its lifetime count allows it is the caller's to decide first (``RetryPolicy``)."""
        with self._lock:
            if self._retired_because is not RetireReason.PARKED:
                return False
            self._retired_because = None
            self._strikes = 0
            self._unparks += 1
            self.limiter.resume(PausedBy.PARKED)
        return True


class BaseKeyPool:
    """What every ``KeyPool`` shares: the keys, each with its own limiter, and their retirements.
    The daemon receives a pool rather than building keys itself, so keys of this host alone
    (``HostKeyPool``) and keys leased from a shared store are one and the same to it."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._keys = tuple(keys)
        if not self._keys:
            raise ValueError("a key pool needs at least one key")
        self._by_id = {key.id: key for key in self._keys}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} active={len(self) - len(self.retired())}/{len(self)}>"

    def __iter__(self) -> Iterator[ApiKey]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def by_id(self, key_id: str) -> ApiKey | None:
        """The key whose id is ``key_id``; None if this pool has none (a key an earlier run drove)."""
        return self._by_id.get(key_id)

    def retired(self) -> dict[str, RetireReason]:
        """Masked name -> reason, for every retired (or parked) key."""
        return {key.name: key.retired_because for key in self._keys if key.retired_because is not None}

    @property
    def all_retired(self) -> bool:
        return all(key.retired_because is not None for key in self._keys)

    def retire_refused(self, key: ApiKey) -> str | None:
        """Why the operator may not retire ``key`` on this process (None: it may, as here: no other drives it)."""
        return None

    def start(self) -> None:
        """Begin whatever keeps the keys usable (nothing here)."""

    def lease_takes(self) -> dict[str, int]:
        """Masked key name -> the times this process took the key's lease from a shared store: none here (the
        keys of one host never change hands)."""
        return {}

    def hold_all(self, seconds: float) -> None:
        self.hold_keys(lambda key: True, seconds)

    def hold_keys(self, shares: Callable[[ApiKey], bool], seconds: float) -> None:
        """Allow no send for ``seconds`` on each key ``shares`` picks (the keys a 429 of their account's limit
        or their host's stands for)."""
        for key in self._keys:
            if shares(key):
                key.limiter.hold(seconds)

    def close(self) -> None:
        """Close every limiter: each waiting worker wakes with LimiterClosed."""
        for key in self._keys:
            key.limiter.close()

    def release(self) -> None:
        """Let the keys go; after the workers are joined. Idempotent."""


@dataclass(frozen=True)
class KeyPacing:
    """How each key of a pool paces its sends, the same for every key and for both kinds of pool: the limit
    rules' states ``limits`` gives a key's account, the order gap (``order_latency`` until ``order_rule`` has
    learnt one), how long an unanswered send holds its slot, the server's timestamps where they are the
    nonces, and the clock."""

    limits: RuleScopes
    order_latency: float
    unanswered_hold: float
    order_rule: OrderRule | None = None
    timestamps: ServerTimestamps | None = None
    clock: Clock = monotonic

    def limiter(self, name: str, account: str, reserve: Reserve, start_above: int = 0) -> ThreadSafeRateLimiter:
        """The limiter of the key shown as ``name`` of ``account``; its counter nonces (where the server's
        timestamps are not the nonces) start above ``start_above`` in blocks from ``reserve``."""
        return ThreadSafeRateLimiter(
            name=name, rules=self.limits.states_of(account), endpoint=self.limits.endpoint,
            order_latency=self.order_latency, order_rule=self.order_rule, unanswered_hold=self.unanswered_hold,
            nonces=self.timestamps or NonceGenerator(start_above=start_above, reserve=reserve), clock=self.clock,
        )


class HostKeyPool(BaseKeyPool):
    """Keys driven by this process alone on this host: each is locked in the state dir for the life of
    the process (a second daemon on the same key is refused), its nonces start above its durable mark,
    its strikes are remembered across runs, and so is until when the sends a run left unanswered at its
    stop may weigh in the server's limits: the next run holds the key, and every key sharing a limit state
    with it, until then (as a shared key's next owner waits, ``LeasedKeyPool``).

    ``late_answer_cap``: from a send's timeout, how long it may be stamped (the late-answer watch's cap);
    ``memory``: how long a stamp then weighs in the server's limits. ``wall``: the clock of the records (they
    outlive the process, and its monotonic clock with it).
    """

    def __init__(
        self, keys: Iterable[ApiKey], states: Iterable[KeyState], *, late_answer_cap: float, memory: float,
        clock: Clock = monotonic, wall: Clock = time.time,
    ) -> None:
        super().__init__(keys)
        self._states = tuple(states)
        self._late_answer_cap = late_answer_cap
        self._memory = memory
        self._clock = clock
        self._wall = wall
        self._released = False

    @classmethod
    def open(
        cls,
        secrets: Iterable[str],
        *,
        state_dir: str,
        pacing: KeyPacing,
        accounts: Sequence[str] = (),
        late_answer_cap: float = defaults.LATE_ANSWER_CAP,
        wall: Clock = time.time,
    ) -> "HostKeyPool":
        """Lock each key in ``state_dir`` (KeyInUse if another process holds one; then none is kept)
        and give it a limiter as ``pacing`` says, whose nonces start above the key's durable mark
        (``accounts``: each key's account, in the order of ``secrets``), held until the sends the last run
        left unanswered on it, or on a key sharing a limit state with it, can no longer weigh in the server's
        limits. ``late_answer_cap``: how long a send that timed out is watched for its late answer
        (``LateAnswers``)."""
        memory = pacing.limits.memory
        # The longest a record can rightly reach past the stop: a send timed out then, or reset then.
        bound = max(late_answer_cap, pacing.unanswered_hold) + memory
        now = wall()
        secrets = list(secrets)
        account_of = dict(zip(secrets, accounts))
        states: list[KeyState] = []
        keys = []
        records: list[tuple[float, int | None]] = []  # until when (wall clock) each key's last run may count, how many
        try:
            for secret, name in shown_names(secrets).items():
                state = KeyState(state_dir, secret, name)
                state.lock()
                states.append(state)
                account = account_of.get(secret, "")
                # A counter's nonces start above the key's durable mark.
                limiter = pacing.limiter(name, account, state.reserve, start_above=state.read_mark())
                keys.append(ApiKey(secret, limiter, name=name, strikes_before=state.read_strikes(),
                                   remember_strikes=state.write_strikes, account=account))
                records.append(_last_run_record(state, bound, now))
        except BaseException:
            for state in states:
                state.unlock()
            raise
        _hold_for_last_run(keys, records, pacing.limits, now, memory, pacing.clock)
        return cls(keys, states, late_answer_cap=late_answer_cap, memory=memory, clock=pacing.clock, wall=wall)

    def release(self) -> None:
        """Record, for each key with sends still in doubt, until when they may weigh in the server's limits,
        then let the keys go on this host (their locks); after the workers are joined, before the late-answer
        watches are closed. A record the state dir refuses is logged, and the keys are let go all the same.
        Idempotent."""
        if self._released:
            return
        self._released = True
        now, wall_now = self._clock(), self._wall()
        for key, state in zip(self._keys, self._states):
            units, stamped_for = self._in_doubt(key, now)
            if stamped_for > 0:
                try:
                    state.write_stamped_until(wall_now + stamped_for, units)
                except OSError as exc:
                    log.error("%s: the state dir refused the record of its unanswered sends (%s): a run started "
                              "within %.0f s may be refused for them", key.name, exc, stamped_for)
            state.unlock()

    def _in_doubt(self, key: ApiKey, now: float) -> tuple[int | None, float]:
        """What the key's sends still in doubt weigh, in usual sends (None: one spent of a rule the usual send does
        not, and the next run holds the key instead of counting them), and how long from ``now`` they may weigh in the server's
        limits (0: none does), a stamp weighing the limits' memory: one watched for its late answer may be stamped
        until the watch's cap, one in flight unwatched (its worker did not stop in time: the process abandons it)
        until the cap from now, one given back unanswered (reset after it left, or an earlier run's, still
        expected) until its limiter's bound for it. Every send of this run came after what its start expected, so
        this outlasts the last run's record: a key with no send in doubt leaves that record as it is."""
        watching, in_flight = key.watching, key.limiter.state().in_flight
        since = now if in_flight > watching else key.watched_since()
        watched_until = -math.inf if since is None else since + self._late_answer_cap
        units, unanswered_until = key.limiter.in_doubt()
        return units, max(0.0, max(watched_until, unanswered_until) + self._memory - now)


def _last_run_record(state: KeyState, bound: float, now: float) -> tuple[float, int | None]:
    """Until when (wall-clock seconds) the sends the last run left unanswered on ``state``'s key may weigh in the
    server's limits, as that run recorded, and how many they were (None: not known); ``bound`` from ``now`` at
    most, the longest they can. A record past it (written under a wall clock since set back) or not a number is
    taken at the bound, the safe side, and replaced with it (how many then not known): the next run reads a true
    one. OSError if the state dir cannot read or write it (as for the nonce mark)."""
    try:
        until, units = state.read_stamped_until()
    except ValueError as exc:
        until, units = math.inf, None
        log.warning("%s: %s: taken as the longest the last run's unanswered sends may count (%.1f s), and rewritten",
                    state.name, exc, bound)
    if until > now + bound + 0.001:  # a millisecond: the record is rounded up
        until, units = now + bound, None
        state.write_stamped_until(until, units)
    return until, units


def _hold_for_last_run(keys: Sequence[ApiKey], records: Sequence[tuple[float, int | None]], limits: RuleScopes,
                       now: float, memory: float, clock: Clock) -> None:
    """Make each key wait for the sends the last run left unanswered on it (``records``: each key's, in wall-clock
    seconds, with how many they were). Where the run counted them and the key's rules can hold them, each is
    counted as a send that may be stamped until its bound (``expect_late_stamps``), in every state its key spends
    from (an account's, the host's too): the key and its sharers send with the rest. Else the key is held until
    the latest record of itself and of the keys sharing a limit state with it: a sharer that spent a shared budget
    at once would be struck by the late stamp."""
    expected = set()
    for key, (until, units) in zip(keys, records):
        if until > now and units is not None and key.limiter.expect_late_stamps(units, clock() + until - memory - now):
            expected.add(key)
            log.warning("%s: the last run on this state dir stopped with %d sends unanswered, which the exchange may "
                        "count for %.1f s: each is counted as a send until then, and the key sends with the rest",
                        key.name, units, until - now)
    for key in keys:
        until, by = max(((until, other) for other, (until, _) in zip(keys, records) if other not in expected
                         and (other is key or limits.share_state(key.account, other.account))),
                        key=lambda pair: (pair[0], pair[1] is key), default=(-math.inf, key))
        if until > now:
            key.limiter.hold(until - now)
            whose = "on it" if by is key else f"on {by.name} (which shares a limit with it)"
            log.warning("%s: first send in %.1f s: the last run on this state dir stopped with sends %s unanswered, "
                        "which the exchange may count so long", key.name, until - now, whose)
