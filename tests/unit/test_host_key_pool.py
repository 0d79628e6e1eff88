"""A host-mode daemon's keys across a stop: the sends still in doubt when it stops (watched for a late answer,
abandoned in flight, reset after they left) are written down per key, how many and until when, and the next run on
the state dir counts each as a send that may be stamped until then, in every state its key spends from (an
account's, the host's too), and sends with the rest of the budget (seed 9307: a daemon restarted while the exchange
was frozen with its sends; seed 1031: two minutes of silence once, where a key could send 14 of 20). A record
that does not say how many holds the key, and every key sharing a limit state with it, until then."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from conftest import KEY, KEYS, FakeClock
from thread_client.errors import ConfigError
from thread_client.limits.host_state import KeyState
from thread_client.limits.keys import HostKeyPool, KeyPacing, mask
from thread_client.limits.rules import LimitRule
from thread_client.limits.scopes import RuleScopes

CAP = 10.0  # the late-answer watch's cap
WINDOW = 1.0  # the ring's window: the limits' memory
BOUND = CAP + WINDOW  # the longest a send in doubt may weigh in the server's limits after its timeout
UNANSWERED_HOLD = 4.0  # how long after a send reset the limiter takes it as possibly stamped


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def open_pool(tmp_path, clock, wall):
    """Open a pool on the test's state dir, as a run of the daemon does; every pool is released after the test."""
    pools: list[HostKeyPool] = []

    def start(secrets: list[str] = [KEY], scope: str = "key", accounts: list[str] = []) -> HostKeyPool:
        limits = RuleScopes((dataclasses.replace(LimitRule.ring(5, WINDOW), scope=scope),))
        pool = HostKeyPool.open(secrets, state_dir=str(tmp_path), pacing=KeyPacing(limits, 0.0, UNANSWERED_HOLD,
                                                                                  clock=clock),
                                accounts=accounts, late_answer_cap=CAP, wall=wall)
        pools.append(pool)
        return pool

    yield start
    for pool in pools:
        pool.release()


def advance(seconds: float, *clocks: FakeClock) -> None:
    for each in clocks:
        each.advance(seconds)


def budget(key) -> int:
    """The units a send of ``key`` could spend now (its one ring of 5)."""
    [(_, units)] = key.limiter.state().remaining
    return units


def test_the_record_of_a_stop_is_durable_read_back_rounded_up_and_garbage_is_refused(tmp_path):
    state = KeyState(tmp_path, KEY, mask(KEY))
    assert state.read_stamped_until() == (0.0, None)  # none recorded
    state.write_stamped_until(1_800_000_012.3451, 3)
    assert state.read_stamped_until() == (1_800_000_012.346, 3)  # whole milliseconds, never cut short
    assert sorted(path.suffix for path in tmp_path.iterdir()) == [".stamped"]  # no temporary file left behind
    (record,) = tmp_path.glob("*.stamped")
    record.write_text("1800000012346\n")  # written before runs counted their sends in doubt
    assert state.read_stamped_until() == (1_800_000_012.346, None)
    for garbage in ("12 o'clock\n", "1800000012346 -1\n", "1800000012346 2 3\n"):
        record.write_text(garbage)
        with pytest.raises(ValueError, match=r"not a whole number of milliseconds and a count"):
            state.read_stamped_until()


@pytest.mark.parametrize("suffix, read", [(".nonce", KeyState.read_mark), (".strikes", KeyState.read_strikes)])
def test_a_nonce_mark_or_strike_count_that_is_no_number_is_refused_in_one_line_naming_its_file(tmp_path, suffix, read):
    state = KeyState(tmp_path, KEY, mask(KEY))
    path = tmp_path / f"{state.strikes_path.stem}{suffix}"
    path.write_text("garbage\n")
    with pytest.raises(ConfigError, match=rf"state file {path} holds 'garbage', not a whole number: restore it"):
        read(state)


def test_a_send_watched_at_the_stop_is_counted_in_the_next_run_until_the_cap_and_a_window_after_its_timeout(
    open_pool, clock, wall, caplog
):
    first = open_pool()
    (key,) = first
    key.limiter.acquire()
    key.watch_started(clock())  # it timed out into a frozen exchange, which may stamp it until the cap
    advance(3.0, clock, wall)
    first.release()  # the daemon stops with the watch still on
    second = open_pool()
    (again,) = second
    assert not again.limiter.state().held and budget(again) == 4  # it sends at once, with the rest of the ring
    assert (f"{mask(KEY)}: the last run on this state dir stopped with 1 sends unanswered, which the exchange may "
            "count for 8.0 s") in caplog.text
    advance(BOUND - 3.0 - WINDOW - 0.01, clock, wall)
    assert budget(again) == 4  # it may still be stamped
    advance(WINDOW + 0.02, clock, wall)
    assert budget(again) == 5  # the exchange can no longer count it: the key's whole budget is usable


def test_a_send_its_worker_abandons_in_flight_at_the_stop_counts_from_the_stop(open_pool, clock, wall):
    first = open_pool()
    (key,) = first
    key.limiter.acquire()
    key.watch_started(clock())  # timed out, watched
    advance(5.0, clock, wall)
    key.limiter.acquire()  # sent, not timed out yet: its worker did not join in time, and the process abandons it
    first.release()
    (again,) = open_pool()
    assert budget(again) == 3  # both counted
    advance(BOUND - WINDOW - 0.01, clock, wall)
    assert budget(again) == 3  # the abandoned one counts from the stop: the cap after it
    advance(WINDOW + 0.02, clock, wall)
    assert budget(again) == 5


def test_a_send_reset_after_it_left_holds_the_next_run_until_its_unanswered_hold_and_a_window(open_pool, clock, wall):
    """Reset after it left (or timed out with no connection to watch), a send is taken by the limiter as stamped up
    to the unanswered hold from then, its slot free a window after that; at the stop it is neither in flight nor
    watched, yet the exchange may still count it."""
    first = open_pool()
    (key,) = first
    permit = key.limiter.acquire()
    advance(1.0, clock, wall)
    key.limiter.release(permit, answered_at=None)  # the worker's path for a reset after the send
    advance(2.0, clock, wall)
    first.release()
    (again,) = open_pool()
    assert budget(again) == 4
    advance(UNANSWERED_HOLD + WINDOW - 2.0 + 0.01, clock, wall)
    assert budget(again) == 5


@pytest.mark.parametrize("scope, accounts, budgets", [
    ("host", ["a", "a", "b"], [4, 4, 4]),
    ("account", ["a", "a", "b"], [4, 4, 5]),
    ("account", ["", "", ""], [4, 5, 5]),  # a key with no account is its own
    ("key", ["a", "a", "b"], [4, 5, 5]),
], ids=["host", "account", "no account", "key"])
def test_a_send_in_doubt_at_the_stop_counts_in_the_next_run_in_every_state_its_key_spends_from(
    open_pool, clock, scope, accounts, budgets
):
    """The send counts in every state its key spends from: a sharer that spent the whole shared budget at the next
    start would be struck by its late stamp. Counted there, no key is held."""
    first = open_pool(KEYS[:3], scope=scope, accounts=accounts)
    in_doubt = next(iter(first))
    in_doubt.limiter.acquire()
    in_doubt.watch_started(clock())  # timed out into a frozen exchange, watched at the stop
    first.release()
    second = open_pool(KEYS[:3], scope=scope, accounts=accounts)
    assert not any(key.limiter.state().held for key in second)
    assert [budget(key) for key in second] == budgets


@pytest.mark.parametrize("scope, accounts, held", [
    ("host", ["a", "a", "b"], [BOUND, BOUND, BOUND]),
    ("account", ["a", "a", "b"], [BOUND, BOUND, 0.0]),
    ("key", ["a", "a", "b"], [BOUND, 0.0, 0.0]),
], ids=["host", "account", "key"])
def test_a_record_that_does_not_say_how_many_holds_every_key_sharing_a_limit_state_with_its_key(
    open_pool, tmp_path, wall, caplog, scope, accounts, held
):
    """Written before runs counted their sends in doubt: how many is not known, so the key, and each key sharing a
    limit state with it, sends nothing until they can no longer count."""
    KeyState(tmp_path, KEYS[0], mask(KEYS[0])).write_stamped_until(wall() + BOUND, None)
    second = open_pool(KEYS[:3], scope=scope, accounts=accounts)
    assert [key.limiter.state().held_for for key in second] == [pytest.approx(each, abs=0.002) for each in held]
    if held[1]:
        assert (f"{mask(KEYS[1])}: first send in 11.0 s: the last run on this state dir stopped with sends on "
                f"{mask(KEYS[0])} (which shares a limit with it) unanswered") in caplog.text


def test_only_the_keys_with_sends_in_doubt_count_them_and_a_passed_record_changes_nothing(open_pool, clock, wall,
                                                                                          caplog):
    first = open_pool(KEYS[:2])
    in_doubt, answered = first
    in_doubt.limiter.acquire()
    in_doubt.watch_started(clock())
    permit = answered.limiter.acquire()
    answered.limiter.release(permit, clock(), accepted=True)
    first.release()
    first.release()  # idempotent: the record stays as the first release wrote it
    second = open_pool(KEYS[:2])
    assert [budget(key) for key in second] == [4, 5]
    second.release()  # the earlier run's send is still expected: this stop records it again, for the next run
    third = open_pool(KEYS[:2])
    assert [budget(key) for key in third] == [4, 5]
    third.release()
    advance(BOUND + 0.002, clock, wall)
    caplog.clear()
    assert [budget(key) for key in open_pool(KEYS[:2])] == [5, 5]
    assert "unanswered" not in caplog.text


@pytest.mark.parametrize("record", ["garbage\n", f"{(1_800_000_000 + 86_400) * 1000}\n"], ids=["garbage", "a day on"])
def test_a_record_not_a_number_or_past_the_bound_holds_the_bound_and_is_replaced(
    open_pool, tmp_path, wall, caplog, record
):
    KeyState(tmp_path, KEY, mask(KEY)).write_stamped_until(0.0, None)  # the record's file, under its name
    (path,) = tmp_path.glob("*.stamped")
    path.write_text(record)  # by hand, or under a wall clock since set back a day
    (key,) = open_pool()
    assert key.limiter.state().held_for == pytest.approx(BOUND, abs=0.002)
    assert "first send in 11.0 s" in caplog.text
    assert KeyState(tmp_path, KEY, mask(KEY)).read_stamped_until() == (pytest.approx(wall() + BOUND, abs=0.002), None)


def test_a_record_not_a_number_is_logged_in_its_own_words_not_with_the_advice_for_a_nonce_mark(
    open_pool, tmp_path, caplog
):
    KeyState(tmp_path, KEY, mask(KEY)).write_stamped_until(0.0, None)
    (path,) = tmp_path.glob("*.stamped")
    path.write_text("garbage\n")
    open_pool()
    assert (f"{mask(KEY)}: {path} holds 'garbage', not a whole number of milliseconds and a count: taken as the longest the last "
            "run's unanswered sends may count (11.0 s), and rewritten") in caplog.text
    assert "remove it" not in caplog.text


def test_a_record_the_state_dir_refuses_at_the_stop_is_logged_and_the_key_let_go(open_pool, tmp_path, clock, caplog):
    first = open_pool()
    (key,) = first
    key.limiter.acquire()
    key.watch_started(clock())
    KeyState(tmp_path, KEY, mask(KEY)).write_stamped_until(0.0, None)
    (path,) = tmp_path.glob("*.stamped")
    path.with_suffix(".stamped.tmp").mkdir()  # where the record is written first: the state dir refuses it
    with caplog.at_level(logging.ERROR):
        first.release()
    assert "the state dir refused the record of its unanswered sends" in caplog.text
    second = KeyState(tmp_path, KEY, mask(KEY))
    second.lock()  # let go all the same
    second.unlock()
