"""The shared store's building blocks against a real Valkey: leases with fencing and self-fencing, nonce blocks
above every earlier owner's, membership heartbeats; all of it still right after Valkey restarts, and going on
while Valkey is out of memory, when the data scripts are refused whole."""

from __future__ import annotations

import json
import time

import pytest

from conftest import KEYS, FakeClock, wait_for
from fakes import ScriptedTransport
from thread_client.cluster.address import StoreAddress, store_call
from thread_client.cluster.keyspace import Keyspace
from thread_client.clock import Clock, monotonic
from thread_client.cluster.leased_keys import LeasedKeyPool
from thread_client.cluster.leases import KeyLease
from thread_client.cluster.members import Membership
from thread_client.cluster.nonce_blocks import NonceBlocks
from thread_client.cluster.scripts import Scripts
from thread_client.defaults import LATE_ANSWER_CAP
from thread_client.config import Config, default_state_dir
from thread_client.daemon import Daemon
from thread_client.errors import KeyCommandRefused, KeyNotHeld, StoreUnavailable
from thread_client.io.graveyard import Graveyard
from thread_client.io.sources import SyntheticSource
from thread_client.limits.keys import KeyPacing, RetireReason, Strike
from thread_client.limits.scopes import RuleScopes
from thread_client.policy.retry import RetryPolicy

NAMES = Keyspace("test").key(KEYS[0])
QUIET = 2.0  # a window plus the unanswered hold


def lease(store, member: str, ttl: float = 5.0, margin: float = 0.5, clock=None) -> KeyLease:
    extra = {"clock": clock} if clock is not None else {}
    return KeyLease(Scripts(store), NAMES, member, ttl=ttl, quiet=QUIET, margin=margin, **extra)


def test_one_holder_at_a_time_and_a_new_fence_for_each(valkey):
    store = valkey.client()
    first, second = lease(store, "a"), lease(store, "b")
    grant = first.acquire()
    assert grant is not None and grant.fence == 1 and first.may_send()
    assert second.acquire() is None and not second.may_send()
    began = time.monotonic()
    first.release()
    assert not first.may_send()
    taken = second.acquire()
    passed = time.monotonic() - began
    # Released just now: the new owner keeps quiet for the whole window plus hold, less what passed since.
    assert taken is not None and taken.fence == 2 and QUIET - passed <= taken.quiet_for <= QUIET
    assert not first.renew() and not first.may_send()


def test_a_holder_stops_sending_before_its_lease_ends_by_its_own_clock(valkey):
    clock = FakeClock()
    holder = lease(valkey.client(), "a", ttl=10.0, margin=1.0, clock=clock)
    holder.acquire()
    clock.advance(8.99)
    assert holder.may_send()
    clock.advance(0.01)
    assert not holder.may_send()  # the store still says it is ours: the margin is this side's safety
    assert holder.renew() and holder.may_send()


def test_a_lease_counts_from_before_each_call_to_the_store_however_long_the_call_takes(valkey):
    """The store's clock starts the lease when the script runs, somewhere in the call: the holder's own clock
    must count from before it sent the call. Each call here takes 2 s of the holder's clock."""
    clock = FakeClock()
    scripts = Scripts(valkey.client())
    for name in ("acquire_lease", "renew_lease"):
        def slow(*, keys, args, call=getattr(scripts, name)):
            clock.advance(2.0)
            return call(keys=keys, args=args)
        setattr(scripts, name, slow)
    holder = KeyLease(scripts, NAMES, "a", ttl=10.0, quiet=QUIET, margin=1.0, clock=clock)
    asked_at = clock.now
    assert holder.acquire() is not None
    clock.now = asked_at + 8.99
    assert holder.may_send()
    clock.now = asked_at + 9.0  # 10 s less the margin from the ask, not from the answer (that would be 11 s)
    assert not holder.may_send()
    asked_at = clock.now
    assert holder.renew()
    clock.now = asked_at + 8.99
    assert holder.may_send()
    clock.now = asked_at + 9.0
    assert not holder.may_send()


def test_an_expired_lease_goes_to_the_next_member_and_the_old_one_learns_it(valkey):
    store = valkey.client()
    old, new = lease(store, "a", ttl=0.3, margin=0.1), lease(store, "b")
    old.acquire()
    grants = []
    wait_for(lambda: grants.append(new.acquire()) or grants[-1] is not None, timeout=5)
    assert grants[-1].fence == 2
    assert not old.renew() and not old.may_send()


def test_nonce_blocks_start_above_the_store_clock_and_every_earlier_block(valkey):
    store = valkey.client()
    old, new = lease(store, "a"), lease(store, "b")
    old.acquire()
    old_blocks = NonceBlocks(Scripts(store), NAMES, old, size=100)
    seconds, micros = store.time()
    first, last = old_blocks.reserve(1)
    assert first >= seconds * 1_000_000 + micros and last == first + 99
    ahead = old_blocks.reserve(first + 10**9)  # a skip-ahead asks for more: granted above it
    assert ahead[0] == first + 10**9
    old.release()
    new.acquire()
    with pytest.raises(KeyNotHeld):
        old_blocks.reserve(1)  # a stale owner gets no more nonces
    taken_over = NonceBlocks(Scripts(store), NAMES, new, size=100).reserve(1)
    assert taken_over[0] > ahead[1]


def test_members_see_each_other_and_a_silent_one_drops_out(valkey):
    store = valkey.client()
    steady = Membership(Scripts(store), "test:members", "steady", ttl=5.0, claim_key="test:member:steady")
    brief = Membership(Scripts(store), "test:members", "brief", ttl=1.0, claim_key="test:member:brief")
    brief.beat()
    assert steady.beat() == ["brief", "steady"]
    wait_for(lambda: steady.beat() == ["steady"], timeout=5)
    brief.beat()
    assert brief.leave() == ["steady"]


def test_leases_and_nonces_survive_a_valkey_restart(valkey):
    store = valkey.client()
    holder = lease(store, "a", ttl=60.0)  # outlives the restart however slow it is
    holder.acquire()
    blocks = NonceBlocks(Scripts(store), NAMES, holder, size=100)
    before = blocks.reserve(1)
    valkey.restart()  # a clean stop writes the append-only file; the script cache is empty afterwards
    assert holder.renew()
    assert blocks.reserve(1)[0] > before[1]
    holder.release()
    assert lease(store, "b").acquire().fence == 2


def test_out_of_memory_the_leases_nonces_and_heartbeats_go_on_and_a_data_script_is_refused_whole(valkey):
    store = valkey.client()
    scripts = Scripts(store)
    holder = lease(store, "a")
    holder.acquire()
    blocks = NonceBlocks(scripts, NAMES, holder, size=100)
    store.xgroup_create("work", "g", id="0", mkstream=True)
    entry = store.xadd("work", {"request": json.dumps({"id": "r-1", "params": {}})})
    store.xreadgroup("g", "c", {"work": ">"})
    valkey.limit_memory(valkey.used_memory() // 2)
    with pytest.raises(StoreUnavailable, match="the store refuses writes: out of memory") as refused, store_call():
        store.hset("work:sent", entry, "key 1")  # a journal line
    assert refused.value.refused
    # Coordination (a fixed handful of small keys) goes on: nobody loses a key to the store's memory.
    assert holder.renew() and holder.may_send()
    assert blocks.reserve(1)[1] > 0
    assert Membership(scripts, "test:members", "m", ttl=5.0, claim_key="test:member:m").beat() == ["m"]
    record = json.dumps({"id": "r-1", "outcome": "accepted"})
    with pytest.raises(StoreUnavailable) as refused:
        scripts.write_results(keys=["work", "work:results", "work:dead", "work:sent"],
                              args=["g", "c", "0", entry, "r-1", "accepted", record, "0"])
    assert refused.value.refused
    # Refused before it ran: no record, and the entry is still pending (not acknowledged without its record).
    assert store.xlen("work:results") == 0 and store.xpending("work", "g")["pending"] == 1
    valkey.limit_memory(0)
    assert scripts.write_results(keys=["work", "work:results", "work:dead", "work:sent"],
                                 args=["g", "c", "0", entry, "r-1", "accepted", record, "0"]) == []
    assert store.xlen("work:results") == 1 and store.xpending("work", "g")["pending"] == 0


def test_touching_held_entries_keeps_this_member_s_and_never_takes_back_another_s(valkey):
    """The keeper's touch resets the idle time of an entry pending with this member only: one another member
    took over is reported and left with it (a claim with min-idle 0 took it back, and both sent it)."""
    store = valkey.client()
    store.xgroup_create("work", "g", id="0", mkstream=True)
    mine, theirs, recorded = (store.xadd("work", {"request": "{}"}) for _ in range(3))
    store.xreadgroup("g", "m1", {"work": ">"}, count=3)
    store.xclaim("work", "g", "m2", 0, [theirs], justid=True)  # m2 took it over while it waited in m1's queue
    store.xack("work", "g", recorded)
    scripts = Scripts(store)
    taken_over, gone = scripts.touch_held(keys=["work"], args=["g", "m1", mine, theirs, recorded])
    assert (taken_over, gone) == ([theirs], [recorded])
    pending = {entry["message_id"]: entry["consumer"] for entry in store.xpending_range("work", "g", "-", "+", 10)}
    assert pending == {mine: "m1", theirs: "m2"}


def test_a_send_is_journaled_only_while_its_entry_is_pending_with_the_sender(valkey):
    store = valkey.client()
    store.xgroup_create("work", "g", id="0", mkstream=True)
    entry = store.xadd("work", {"request": "{}"})
    store.xreadgroup("g", "m1", {"work": ">"}, count=1)
    scripts = Scripts(store)
    assert scripts.journal_send(keys=["work", "work:sent"], args=["g", "m1", entry, "k 7"]) == 1
    assert scripts.journal_send(keys=["work", "work:sent"], args=["g", "m1", entry, "k 8"]) == 1  # its own retry
    store.xclaim("work", "g", "m2", 0, [entry], justid=True)
    assert scripts.journal_send(keys=["work", "work:sent"], args=["g", "m1", entry, "k 9"]) == 0
    assert store.hget("work:sent", entry) == "k 8 m1"  # m1's send was refused before anything was written
    assert scripts.journal_send(keys=["work", "work:sent"], args=["g", "m2", entry, "k 10"]) == 0  # m1 may have sent
    # An entry m1 held unsent, taken over and sent by m2, and back with m1 (m2 died): m1's old copy stays unsent.
    other = store.xadd("work", {"request": "{}"})
    store.xreadgroup("g", "m1", {"work": ">"}, count=1)
    store.xclaim("work", "g", "m2", 0, [other], justid=True)
    assert scripts.journal_send(keys=["work", "work:sent"], args=["g", "m2", other, "k 12"]) == 1
    store.xclaim("work", "g", "m1", 0, [other], justid=True)
    assert scripts.journal_send(keys=["work", "work:sent"], args=["g", "m1", other, "k 13"]) == 0


def leased_pool(valkey, member: str, strike_budget: int = 7, clock: Clock = monotonic, **extra) -> LeasedKeyPool:
    """A member's pool of one key; the test runs its keeper's rounds (``_round``)."""
    pool = LeasedKeyPool(StoreAddress.parse(valkey.url), KEYS[:1], member,
                         pacing=KeyPacing(RuleScopes.ring(20, 1.0), 0.0, 1.0, clock=clock), strike_budget=strike_budget,
                         state_dir=str(default_state_dir()), keyspace=Keyspace("test"), **extra)
    pool.start()
    return pool


def test_strikes_live_with_the_key_in_the_store_and_a_key_at_its_budget_is_not_used(valkey):
    """The server never forgets a strike, whichever member earned it: the next owner carries the count on, and
    a key whose count reached the budget is retired by the member that takes it, before any send."""
    first = leased_pool(valkey, "a", strike_budget=3)
    first._round()  # the only member: it takes the key
    key = next(iter(first))
    assert first.held() and key.strike() == Strike(1, 1, unparks=0) and key.strike() == Strike(2, 2, unparks=0)
    first.release()
    second = leased_pool(valkey, "b", strike_budget=3)
    second._round()
    key = next(iter(second))
    assert second.held() and key.lifetime_strikes == 2 and key.retired_because is None
    assert key.strike() == Strike(1, 3, unparks=0)  # one in this run, three in the key's life
    second.release()
    third = leased_pool(valkey, "c", strike_budget=3)
    third._round()
    key = next(iter(third))
    assert key.retired_because is RetireReason.STRIKE_BUDGET_SPENT and key.lifetime_strikes == 3
    assert not key.may_send() and not third.held()  # handed back at once: no member sends on it
    third.release()


def test_the_next_owner_waits_until_the_old_owner_s_unanswered_sends_can_no_longer_be_stamped(valkey):
    """A send watched for its late answer (a frozen server) may be stamped until the watch's cap, long after
    the HTTP timeout: its member keeps that bound with the key, and the next owner keeps quiet until it has
    passed, plus a window (the stamp's time in the server's ring)."""
    clock = FakeClock()
    first = leased_pool(valkey, "a", clock=clock)
    first._round()
    key = next(iter(first))
    key.watch_started(clock())  # a send timed out: the server may stamp it until the cap, 120 s
    clock.advance(0.5)
    first._round()  # the keeper renews the lease, and the key's bound with it
    began = time.monotonic()
    first.release()
    second = leased_pool(valkey, "b")
    second._round()
    quiet = next(iter(second)).limiter.state().ready_in
    passed = time.monotonic() - began
    # A window after the cap, less the 0.5 s that passed on the first member's clock and what passed since.
    assert LATE_ANSWER_CAP + 0.5 - passed <= quiet <= LATE_ANSWER_CAP + 1.0


def test_a_watch_that_ended_no_longer_holds_the_next_owner_after_a_clean_release(valkey):
    """A holder's bound is its own last word: once its watched send's late answer came, a renewal and a clean
    release leave the next owner only the ordinary quiet period (a window plus the unanswered hold)."""
    clock = FakeClock()
    first = leased_pool(valkey, "a", clock=clock)
    first._round()
    key = next(iter(first))
    key.watch_started(clock())  # a send timed out: the server may stamp it until the cap
    first._round()  # renewed while it is watched
    key.watch_ended(clock())  # its late answer came: it can no longer be stamped
    first._round()  # renewed once it is not
    first.release()
    second = leased_pool(valkey, "b")
    second._round()
    assert next(iter(second)).limiter.state().ready_in <= QUIET


def test_an_earlier_owner_s_bound_outlives_a_next_owner_that_dies_in_its_quiet_period(valkey):
    """The bound a holder leaves is what it says last (a watch that ended no longer counts), and it stays with the
    key until it has passed: an owner that dies in its quiet period sent nothing, and the one after it still waits."""
    clock = FakeClock()
    first = leased_pool(valkey, "a", clock=clock)
    first._round()
    key = next(iter(first))
    key.watch_started(clock())  # a send timed out: stampable until the cap, and a window more: 121 s
    first._round()
    clock.advance(90.0)
    key.watch_ended(clock.now - 90.0)  # its late answer came
    key.watch_started(clock())  # another send timed out: 121 s from here
    clock.advance(10.0)
    first.release()  # its last word: 111 s from now
    store = valkey.client()
    dying = lease(store, "b", ttl=0.3, margin=0.1)
    grant = dying.acquire()
    assert grant is not None and LATE_ANSWER_CAP - 12.0 <= grant.quiet_for <= LATE_ANSWER_CAP - 9.0
    grants = []  # "b" never renews: its lease runs out while it keeps quiet
    wait_for(lambda: grants.append(lease(store, "c").acquire()) or grants[-1] is not None, timeout=5)
    assert grants[-1].fence == grant.fence + 1
    assert LATE_ANSWER_CAP - 14.0 <= grants[-1].quiet_for <= LATE_ANSWER_CAP - 9.0


def test_a_lease_that_runs_out_unreleased_makes_the_next_owner_wait_out_the_late_answer_cap(valkey):
    """A holder cut off from the store (or killed) never tells it about the sends that timed out after its last
    renewal: any send it made before its lease ended may be watched, and stamped, until the cap. The next owner
    waits that out from the lease's end: the unanswered hold, the cap, then a window."""
    store = valkey.client()
    old, new = lease(store, "a", ttl=0.3, margin=0.1), lease(store, "b")
    assert old.acquire().quiet_for == 0 and old.may_send()  # a fresh key: it sends at once
    grants = []
    wait_for(lambda: grants.append(new.acquire()) or grants[-1] is not None, timeout=5)
    assert grants[-1].fence == 2 and LATE_ANSWER_CAP <= grants[-1].quiet_for <= LATE_ANSWER_CAP + QUIET


def test_a_lease_taken_again_never_lets_a_block_of_the_earlier_lease_be_drawn_from(valkey):
    """The earlier blocks were forgotten only after the lease was held: a worker waking in between (a quiet
    period of 0) could draw a nonce below the last owner's, and a 400 to it could settle as an accept."""
    pool = leased_pool(valkey, "a")
    key = next(iter(pool))
    lease = pool._leases[key.id]
    held_when_forgotten: list[bool] = []
    forget = key.limiter.nonces.reserve_again

    def reserve_again() -> None:
        held_when_forgotten.append(lease.held)
        forget()

    key.limiter.nonces.reserve_again = reserve_again
    pool._round()  # takes the key
    assert pool.held() and held_when_forgotten == [False]
    pool.release()


def test_each_take_of_a_lease_is_counted_and_a_refused_one_is_not(valkey):
    store = valkey.client()
    first, second = lease(store, "a"), lease(store, "b")
    first.acquire()
    assert second.acquire() is None and (first.takes, second.takes) == (1, 0)
    first.release()
    second.acquire()
    second.release()
    first.acquire()
    assert (first.takes, second.takes) == (2, 1)  # three holders in turn: the key changed hands twice


def test_a_member_refuses_to_retire_a_shared_key_which_another_member_would_go_on_sending_on(valkey, tmp_path):
    """Retired on one member, a shared key is only handed to another (a keeper lets go of a retired key) while the
    command answers ``retired``: the member's control API refuses it (409), naming the way that stops the key on
    every member."""
    pool = leased_pool(valkey, "a")
    pool._round()  # the only member: it takes the key
    key = next(iter(pool))
    daemon = Daemon(Config(threads_per_key=1, state_dir=str(tmp_path / "state")), source=SyntheticSource(),
                    graveyard=Graveyard(None), keys=pool, transports=lambda key: ScriptedTransport([]),
                    policy=RetryPolicy())
    try:
        with pytest.raises(KeyCommandRefused, match="cluster console"):
            daemon.retire_key(key, last=True)
        pool._round()
        assert key.retired_because is None and pool.held() and daemon.stop_latch.reason is None
    finally:
        pool.release()


def test_the_cluster_console_s_pause_and_a_member_s_own_are_lifted_each_by_its_own_resume(valkey):
    """A member's operator pauses a key on its own control API, the cluster console pauses and resumes it: the
    member's pause stays. And the other way round: the member's resume leaves the console's pause."""
    pool = leased_pool(valkey, "m1")
    store, flags = valkey.client(), Keyspace("test").paused
    key = next(iter(pool))
    try:
        key.pause()  # the member's own control API
        store.hset(flags, key.id, "1")  # the cluster console's pause ...
        pool._round()
        store.hdel(flags, key.id)  # ... and its resume
        pool._round()
        assert key.paused, "the member's own pause was lifted by the cluster console's resume"
        key.resume()
        assert not key.paused
        store.hset(flags, key.id, "1")
        pool._round()
        key.resume()  # the member's own resume, with nothing of its own to lift
        assert key.paused, "the member's own resume lifted the cluster console's pause"
    finally:
        pool.release()

