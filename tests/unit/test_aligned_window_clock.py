"""An aligned fixed window against the server's own fixed window when the server's clock is not what a
fresh, steady Date says: a Date rendered once a second (uvicorn's), a clock that runs fast or slow (ntpd
slews at up to 500 ppm; the learnt clock allows for 1000), a clock that was set. One key sends as the
window allows, a random think time after each answer; every answer's Date teaches the learnt clock, as
the transport does. Found by a review: each case struck the server before."""

from __future__ import annotations

import math
import random

import pytest

from thread_client.limits.rules.aligned_window import AlignedWindow
from thread_client.limits.timestamps import ServerClock
from original_server import FixedWindow

LIMIT, PERIOD_MS = 10, 1000


def refusals(ppm: float = 0.0, step_ms: float = 0.0, date_refresh_s: float = 0.0, seconds: float = 120.0,
             seed: int = 1) -> int:
    """The server's refusals of ``seconds`` of one key's sends (stamps 1-10 ms after the send, answers 1-10 ms
    after the stamp); the server's clock runs ``ppm`` fast, steps by ``step_ms`` 30 s in, and renders its Date
    every ``date_refresh_s`` (0: as it answers, the learnt clock then told so)."""
    rng = random.Random(seed)
    ours = [1000.0]  # s
    base = 1_700_000_000_000.0 + rng.uniform(0, 1000)

    def server_ms(at: float) -> float:
        return base + 1000 * (at - 1000.0) * (1 + ppm * 1e-6) + (step_ms if at >= 1030.0 else 0.0)

    lag_ms = 1000 if date_refresh_s else 0  # what the profile says of the server's Date
    clock = ServerClock(lambda: ours[0] * 1000, date_lag_ms=lag_ms)

    def read(sent: float, stamp: float, received: float) -> None:
        shown = stamp
        if date_refresh_s:  # the Date rendered at the last refresh, shown until the next
            shown = 0.37 + date_refresh_s * math.floor((stamp - 0.37) / date_refresh_s)
        date = math.floor(server_ms(shown) / 1000) * 1000
        clock.observe(date, sent * 1000, received * 1000, resolution_ms=1000 + lag_ms)  # as observe_date reads a Date

    for n in range(12):  # as the daemon reads the clock at start: twelve readings, 0.1 s apart after the third
        sent = ours[0]
        ours[0] += 0.004
        read(sent, sent + 0.002, ours[0])
        if n >= 2:
            ours[0] += 0.1
    state, server = AlignedWindow(LIMIT, PERIOD_MS / 1000, clock), FixedWindow(LIMIT, PERIOD_MS, 0)
    refused, end = 0, ours[0] + seconds
    while ours[0] < end:
        ours[0] = max(ours[0] + rng.uniform(0, 0.2), state.ready_at(ours[0], 1))
        token, sent = state.take(ours[0], 1), ours[0]
        stamp = sent + rng.uniform(0.001, 0.010)
        answered = stamp + rng.uniform(0.001, 0.010)
        refused += not server.admit(int(server_ms(stamp)), 1)
        ours[0] = answered
        read(sent, stamp, answered)
        state.settle(token, answered)
    return refused


def test_a_steady_fresh_clock_brings_no_refusal():
    assert refusals() == 0


def test_a_date_rendered_once_a_second_brings_no_refusal_when_the_profile_allows_for_it():
    assert refusals(date_refresh_s=1.0) == 0


@pytest.mark.parametrize("ppm", [100, -100, 500, -500, 1000, -1000])
def test_a_server_clock_that_runs_fast_or_slow_brings_no_refusal(ppm):
    assert refusals(ppm=ppm) == 0


@pytest.mark.parametrize("step_ms", [300, -300, 1500])
def test_a_server_clock_that_was_set_hands_the_window_back_to_the_ring_until_it_is_known_again(step_ms):
    assert refusals(step_ms=step_ms) == 0


def test_sends_settled_while_the_clock_was_unknown_still_count_once_the_windows_take_over():
    limit, period, offset_ms = 2, 1.0, 1_700_000_000_400.0
    clock = ServerClock(lambda: 0.0)
    state = AlignedWindow(limit, period, clock)
    stamps = []
    for token in [state.take(0.0, 1) for _ in range(limit)]:  # the ring's: the clock is unknown
        stamps.append(0.005)
        state.settle(token, 0.010)
    for at in (0.02, 0.03, 0.04):  # three exact readings: learnt
        clock.observe(math.floor(1000 * at + offset_ms), 1000 * at, 1000 * at + 0.5)
    now = 0.05
    while len(stamps) < 4 and now < 0.5:
        if state.ready_at(now, 1) <= now:
            token = state.take(now, 1)
            stamps.append(now)
            state.settle(token, now + 0.001)
        now += 0.001
    windows = [math.floor((1000 * stamp + offset_ms) / 1000) for stamp in stamps]
    assert max(windows.count(window) for window in windows) <= limit, windows
