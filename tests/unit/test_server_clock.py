"""The learnt server clock: a robust estimate that one bad reading moves by nothing, that follows a real step
once most recent readings agree on it, and that many workers may teach at once."""

from __future__ import annotations

import threading

from conftest import FakeClock
from thread_client.limits.timestamps import RECENT, ServerClock

OFFSET = 40_250.0  # the server's clock runs this far ahead of ours, ms


def learnt_clock(ours: FakeClock, offset: float = OFFSET, readings: int = 12) -> ServerClock:
    """A clock taught by ``readings`` ms stamps, each 2 ms after its send and 3 ms before its answer."""
    clock = ServerClock(ours)
    for _ in range(readings):
        read(clock, ours, offset)
        ours.advance(97.0)
    return clock


def read(clock: ServerClock, ours: FakeClock, offset: float) -> None:
    sent = ours()
    ours.advance(2.0)
    stamp = ours() + offset
    ours.advance(3.0)
    clock.observe(stamp, sent, ours())


def test_one_reading_from_a_skewed_node_moves_the_estimate_by_nothing():
    ours = FakeClock(5_000_000.0)
    clock = learnt_clock(ours)
    at = ours() + 100.0  # one instant to compare at: the interval widens with time (the drift)
    before, offset = clock.interval(at), clock.offset_ms
    read(clock, ours, OFFSET + 7_000)  # one node's clock 7 s off
    assert clock.offset_ms == offset and before[0] <= OFFSET <= before[1]
    # A limit aligned to the clock does not bet on it while the dissent is recent (it may be a step's first sign)...
    assert clock.interval(at) is None
    for _ in range(RECENT):
        read(clock, ours, OFFSET)
    # ...and gets it back, no wider, once it has aged out.
    low, high = clock.interval(at)
    assert before[0] <= low <= OFFSET <= high <= before[1]


def test_a_real_step_is_followed_once_five_of_the_last_nine_readings_agree_on_it():
    ours = FakeClock(5_000_000.0)
    clock = learnt_clock(ours)
    before = clock.offset_ms
    for _ in range(4):
        read(clock, ours, OFFSET - 9_500)  # the server's clock was set back 9.5 s
        assert clock.offset_ms == before
    read(clock, ours, OFFSET - 9_500)
    low, high = clock.interval(ours())
    assert clock.learnt and low <= OFFSET - 9_500 <= high and high - low < 10


def test_the_estimate_is_not_used_before_three_readings_agree():
    ours = FakeClock(5_000_000.0)
    clock = learnt_clock(ours, readings=2)
    assert not clock.learnt and clock.interval(ours()) is None
    read(clock, ours, OFFSET)
    assert clock.learnt


def test_the_interval_widens_with_the_drift_between_readings():
    """Two clocks drift apart (100 ppm at most): an interval learnt an hour ago still holds the offset."""
    ours = FakeClock(5_000_000.0)
    clock = learnt_clock(ours)
    low, high = clock.interval(ours())
    later_low, later_high = clock.interval(ours() + 3_600_000)
    assert later_low <= low - 300 and later_high >= high + 300


def test_many_workers_teaching_at_once_leave_the_exact_common_part_of_their_readings():
    """Every reading holds the offset; taken at one instant, the interval is their exact intersection, whatever
    order the threads' readings came in."""
    ours = FakeClock(5_000_000.0)
    clock = ServerClock(ours)
    readings = [(thread, reading) for thread in range(8) for reading in range(200)]

    def width(thread: int, reading: int) -> float:
        return 1 + (reading * 7 + thread) % 20

    def teach(thread: int) -> None:
        for reading in range(200):  # a Date (true to 1000 ms) read 1-20 ms after its send: it holds OFFSET
            clock.observe(ours() + OFFSET - reading, ours() - width(thread, reading), ours(), resolution_ms=1000)

    threads = [threading.Thread(target=teach, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    lows = [OFFSET - reading for _, reading in readings]
    highs = [OFFSET - reading + 1000 + width(thread, reading) for thread, reading in readings]
    assert clock.interval(ours()) == (max(lows), min(highs))


def test_a_date_may_be_as_old_as_the_profile_says_and_the_interval_allows_for_it():
    """A server that renders its Date once a second (uvicorn) shows one up to a second old: readings of such a
    server must leave room for it; one that writes its Date as it answers (the reference server) need not."""
    widths = {}
    for lag_ms in (0, 1000):
        ours = FakeClock(5_000_000.0)
        clock = ServerClock(ours, date_lag_ms=lag_ms)
        for _ in range(3):
            sent = ours()
            ours.advance(4.0)
            clock.observe_date("Wed, 25 Nov 2026 06:11:05 GMT", sent, ours())
        low, high = clock.interval(ours())
        widths[lag_ms] = high - low
    assert widths[0] <= 1000 < 2000 - 10 <= widths[1000]
