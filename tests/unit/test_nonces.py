"""Nonces: strictly increasing per key under threads, across a restart, and across a clock step back."""

from __future__ import annotations

import threading

import pytest

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
