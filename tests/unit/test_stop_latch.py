"""The stop latch: signals and threads reach the main thread without a lock a signal handler could deadlock on."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from thread_client.exits import StopReason
from thread_client.stop_latch import StopLatch


def test_a_signal_is_read_as_the_stop_reason():
    latch = StopLatch()
    latch.catch_signals(signal.SIGTERM)
    try:
        assert latch.wait(0) is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert latch.wait(5) is StopReason.SIGTERM and StopReason.SIGTERM.value == "SIGTERM"
    finally:
        latch.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_only_a_signal_that_is_a_stop_reason_can_be_caught():
    latch = StopLatch()
    with pytest.raises(ValueError, match="SIGUSR1"):
        latch.catch_signals(signal.SIGUSR1)
    latch.close()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_a_thread_request_wakes_the_waiter_and_the_first_reason_wins():
    latch = StopLatch()
    requester = threading.Thread(target=lambda: (latch.request(StopReason.ALL_KEYS_RETIRED),
                                                  latch.request(StopReason.STOPPED)))
    requester.start()
    assert latch.wait(5) is StopReason.ALL_KEYS_RETIRED
    requester.join(5)
    assert not requester.is_alive() and latch.reason is StopReason.ALL_KEYS_RETIRED
    latch.close()


def test_exactly_one_of_many_racing_requests_is_told_it_was_first():
    latch = StopLatch()
    barrier = threading.Barrier(8)
    firsts = []

    reasons = list(StopReason)[:8]

    def race(n: int) -> None:
        barrier.wait()
        if latch.request(reasons[n]):
            firsts.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()
    assert len(firsts) == 1 and latch.reason is reasons[firsts[0]]
    latch.close()


def test_waiting_times_out_with_none():
    latch = StopLatch()
    assert latch.wait(0.01) is None
    latch.close()
