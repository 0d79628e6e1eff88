"""Nonces: strictly increasing per key under threads, across restarts and crashes (durable marks) and clock
steps back; one process per key per host."""

from __future__ import annotations

import os
import threading
from typing import Callable

import pytest

from conftest import KEY
from thread_client.errors import KeyInUse, StateNotWritten
from thread_client.limits.host_state import KeyState
from thread_client.limits.nonces import INT64_MAX, NonceGenerator


def test_many_threads_get_unique_increasing_nonces():
    nonces = NonceGenerator()
    per_thread: list[list[int]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def draw(out: list[int]) -> None:
        barrier.wait()
        for _ in range(2000):
            out.append(nonces.next())

    threads = [threading.Thread(target=draw, args=(out,)) for out in per_thread]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    everything = [n for out in per_thread for n in out]
    assert len(set(everything)) == 8 * 2000
    assert all(out == sorted(out) for out in per_thread)
    assert nonces.last == max(everything)


def test_a_restarted_client_starts_above_the_previous_run():
    wall = [1_700_000_000_000_000]
    first_run = NonceGenerator(clock=lambda: wall[0])
    last = [first_run.next() for _ in range(500)][-1]  # 500 in the same microsecond: the counter runs ahead
    wall[0] += 1_000  # the restart takes a millisecond
    assert NonceGenerator(clock=lambda: wall[0]).next() > last


def test_clock_stepping_back_never_repeats_a_nonce():
    wall = [5_000_000]
    nonces = NonceGenerator(clock=lambda: wall[0])
    before = nonces.next()
    wall[0] -= 3_600_000_000  # an hour back
    after = [nonces.next() for _ in range(3)]
    assert before < after[0] < after[1] < after[2]


def test_skip_ahead_jumps_past_clock_and_last():
    nonces = NonceGenerator(clock=lambda: 10)
    nonces.next()
    nonces.skip_ahead(1_000)
    assert nonces.next() == 1_011
    with pytest.raises(ValueError):
        nonces.skip_ahead(0)


def test_nonces_fit_in_a_signed_64_bit_integer():
    nonces = NonceGenerator(clock=lambda: INT64_MAX)
    assert nonces.next() == INT64_MAX
    with pytest.raises(OverflowError):
        nonces.next()


def draw(nonces: NonceGenerator) -> int:
    """The next nonce as the limiter draws it: its block reserved first, holding no lock."""
    nonces.reserve_ahead()
    nonce = nonces.next()
    assert nonce is not None
    return nonce


def test_a_nonce_never_leaves_before_a_durable_mark_covers_it():
    marks: list[int] = []
    wall = [1_000_000]

    def reserve(wanted: int) -> tuple[int, int]:
        marks.append(wanted + 100)
        return wanted, wanted + 100

    nonces = NonceGenerator(clock=lambda: wall[0], reserve=reserve)
    assert nonces.next() is None and marks == []  # nothing reserved yet: nothing handed out
    first = draw(nonces)
    assert marks == [first + 100]
    for _ in range(300):
        assert draw(nonces) <= marks[-1]
    # Blocks of 101 nonces, each reserved once the one before is half used: a fourth already waits.
    assert nonces.last == first + 300 and marks == [first + 100, first + 201, first + 302, first + 403]


def reserving(blocks: list[tuple[int, int]], paused: int) -> tuple[Callable[[int], tuple[int, int]],
                                                                    threading.Event, threading.Event]:
    """A store that grants ``blocks`` in turn and holds the one starting at ``paused`` until the test lets it
    go: the reserve function, the event set when it is held, and the event that lets it go."""
    granted, entered, go = iter(blocks), threading.Event(), threading.Event()

    def reserve(wanted: int) -> tuple[int, int]:
        block = next(granted)
        if block[0] == paused:
            entered.set()
            assert go.wait(30)  # set by the test, or its own bound (5 s) has long failed it
        return block

    return reserve, entered, go


def test_the_next_block_is_reserved_half_way_and_the_current_one_drawn_from_meanwhile():
    reserve, reserve_entered, reserve_go = reserving([(1_000, 1_099), (1_100, 1_199)], paused=1_100)
    nonces = NonceGenerator(clock=lambda: 0, reserve=reserve)
    assert [draw(nonces) for _ in range(50)] == list(range(1_000, 1_050))
    early = threading.Thread(target=nonces.reserve_ahead)  # past half-way: the next block is due
    early.start()
    try:
        assert reserve_entered.wait(5)
        nonces.reserve_ahead()  # one reservation at a time, and this one is not needed yet: no wait
        assert [nonces.next() for _ in range(50)] == list(range(1_050, 1_100))
        assert nonces.next() is None  # the block ran out before the next one is reserved: nothing handed out
    finally:
        reserve_go.set()
    early.join(5)
    assert not early.is_alive()
    assert nonces.next() == 1_100


def test_a_block_reserved_above_the_clock_moves_the_nonces_up_to_it():
    blocks = iter([(5_000, 5_009), (9_000, 9_009)])  # as the shared store grants them: above its TIME and every owner
    nonces = NonceGenerator(clock=lambda: 100, reserve=lambda wanted: next(blocks))
    assert [draw(nonces) for _ in range(11)] == [*range(5_000, 5_010), 9_000]


def test_a_lease_taken_again_reserves_a_new_block_before_the_next_nonce():
    blocks = iter([(5_000, 5_999), (9_000, 9_999)])  # another owner used 6_000-8_999 in between
    nonces = NonceGenerator(clock=lambda: 100, reserve=lambda wanted: next(blocks))
    assert [draw(nonces) for _ in range(3)] == [5_000, 5_001, 5_002]
    nonces.reserve_again()
    assert nonces.next() is None
    assert draw(nonces) == 9_000


def test_a_block_reserved_while_the_lease_was_taken_again_is_not_drawn_from():
    reserve, reserve_entered, reserve_go = reserving([(5_000, 5_009), (6_000, 6_009), (9_000, 9_009)], paused=6_000)
    nonces = NonceGenerator(clock=lambda: 100, reserve=reserve)
    assert [draw(nonces) for _ in range(5)] == list(range(5_000, 5_005))
    early = threading.Thread(target=nonces.reserve_ahead)  # the next block, under the lease held then
    early.start()
    try:
        assert reserve_entered.wait(5)
        nonces.reserve_again()  # the lease was lost and taken again meanwhile
    finally:
        reserve_go.set()
    early.join(5)
    assert not early.is_alive()
    assert draw(nonces) == 9_000  # never 6_000: another owner may have used it


def test_a_restart_starts_above_the_mark_even_with_the_clock_an_hour_back(tmp_path):
    state = KeyState(tmp_path, KEY, "UT4N...JYA6")
    hour = 3_600_000_000
    now = 1_800_000_000_000_000
    before = NonceGenerator(clock=lambda: now, reserve=state.reserve)
    before.skip_ahead(5 * hour)  # far ahead of the wall clock, as after many invalid nonces
    used = [draw(before) for _ in range(50)]
    # Killed here: no clean shutdown, only what reached the disk. The clock is set back an hour.
    again = NonceGenerator(clock=lambda: now - hour, start_above=state.read_mark(), reserve=state.reserve)
    assert draw(again) > max(used)


def test_the_mark_is_replaced_atomically(tmp_path):
    state = KeyState(tmp_path, KEY, "UT4N...JYA6")
    assert state.read_mark() == 0
    state.write_mark(42)
    state.write_mark(4242)
    assert state.read_mark() == 4242
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".nonce"]  # no temporary file left behind
    assert all(KEY not in p.name for p in tmp_path.iterdir())  # named by a hash, never the key


def test_a_mark_the_state_dir_refuses_hands_out_no_nonce(tmp_path):
    state = KeyState(tmp_path, KEY, "UT4N...JYA6")
    state.write_mark(5)
    (mark,) = tmp_path.glob("*.nonce")
    mark.with_suffix(".nonce.tmp").mkdir()  # where the next mark is written first: the state dir refuses it
    nonces = NonceGenerator(clock=lambda: 1_000, start_above=state.read_mark(), reserve=state.reserve)
    with pytest.raises(StateNotWritten, match="a nonce mark could not be written to the state dir"):
        nonces.reserve_ahead()
    assert nonces.next() is None
    assert nonces.last == 5 and state.read_mark() == 5  # nothing handed out beyond the durable mark


def test_one_process_per_key_per_host(tmp_path):
    first = KeyState(tmp_path, KEY, "UT4N...JYA6")
    first.lock()
    second = KeyState(tmp_path, KEY, "UT4N...JYA6")
    with pytest.raises(KeyInUse) as refused:
        second.lock()
    assert refused.value.holder == str(os.getpid()) and "UT4N...JYA6" in str(refused.value)
    assert KeyState(tmp_path, "ANOTHER-KEY-00000000000000000000", "ANOT...0000").lock() is None  # other keys are free
    first.unlock()
    second.lock()  # released: the next process may take it
    second.unlock()


def test_an_early_reservation_that_fails_leaves_the_current_block_to_draw_from_and_is_not_retried_at_once():
    """It raised out of acquire though the current block covered seconds of nonces: during a store blip every
    send past the half-way point was handed back (after a store timeout each); a full disk stopped the daemon."""
    calls: list[int] = []

    def reserve(wanted: int) -> tuple[int, int]:
        calls.append(wanted)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return wanted, wanted + 99

    nonces = NonceGenerator(clock=lambda: 0, reserve=reserve)
    assert [draw(nonces) for _ in range(100)] == list(range(1, 101))
    assert calls == [1, 101]  # the early try of the second block failed, once: no retry on each draw
    assert draw(nonces) == 101 and calls == [1, 101, 101]  # needed now: reserved, and it went through
