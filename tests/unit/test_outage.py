"""The outage gate: entered only after a silence, logged sparingly, one probe per key, left on the first answer."""

from __future__ import annotations

import logging
import threading

import pytest

from conftest import FakeClock
from thread_client.flow.outage import OutageGate


def gate(clock: FakeClock, **kwargs) -> OutageGate:
    return OutageGate(5.0, probe_base=0.5, probe_cap=2.0, repeat_log=60.0, clock=clock, **kwargs)


def test_failures_within_the_silence_limit_are_no_outage(clock):
    outage = gate(clock)
    clock.advance(4.9)
    outage.failed("connection refused")
    assert not outage.active and outage.may_take("k", timeout=0)


def failing_for(outage: OutageGate, clock: FakeClock, seconds: float, cause: str = "timeouts") -> None:
    """Attempts that fail from now on, for ``seconds``: the last of them is the one the silence is long enough for."""
    outage.failed(cause)
    clock.advance(seconds)


def test_an_outage_is_logged_once_with_its_cause_then_at_most_once_a_minute(clock, caplog):
    outage = gate(clock)
    failing_for(outage, clock, 5.0, "connection refused")
    with caplog.at_level(logging.ERROR):
        outage.failed("connection refused")
        clock.advance(30)
        outage.failed("connection refused")
        clock.advance(30)
        outage.failed("name not resolved")
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lines) == 2
    assert "connection refused" in lines[0] and "name not resolved" in lines[1]
    state = outage.state()
    assert state.active and state.cause == "name not resolved" and state.since == pytest.approx(60)


def test_a_time_with_no_attempt_is_no_silence_of_the_exchange_s(clock):
    """A key held 60 s at start (the last run's sends may still land) sends nothing: its first failure then
    starts the silence, instead of reading as 60 s with no answer (an outage at once)."""
    outage = gate(clock)
    clock.advance(60)
    outage.failed("connection reset")
    assert not outage.active
    clock.advance(4.9)
    outage.failed("connection reset")
    assert not outage.active
    clock.advance(0.1)
    outage.failed("connection reset")
    assert outage.active
    outage.answered()
    clock.advance(100)  # idle: no input
    outage.failed("connection reset")
    assert not outage.active
    clock.advance(3600)  # an hour more with no attempt, after that one failure
    outage.failed("connection reset")
    assert not outage.active


def test_during_an_outage_each_key_probes_at_a_growing_capped_interval(clock):
    outage = gate(clock)
    failing_for(outage, clock, 5)
    outage.failed("timeouts")
    assert outage.may_take("a", timeout=0)  # this key's first probe
    assert not outage.may_take("a", timeout=0)  # nothing more until the next one
    gaps = []
    for _ in range(4):
        waited = 0.0
        while not outage.may_take("a", timeout=0):
            clock.advance(0.25)
            waited += 0.25
        gaps.append(waited)
    assert gaps == [0.5, 1.0, 2.0, 2.0]
    assert outage.may_take("b", timeout=0)  # every key has a probe of its own


def test_the_first_answer_ends_the_outage_and_wakes_waiting_workers(clock, caplog):
    read_elsewhere = threading.Event()
    main = threading.get_ident()

    def probing_clock() -> float:
        if threading.get_ident() != main:
            read_elsewhere.set()
        return clock()

    outage = OutageGate(5.0, probe_base=30.0, probe_cap=30.0, clock=probing_clock)
    failing_for(outage, clock, 5, "connection refused")
    outage.failed("connection refused")
    assert outage.may_take("a", timeout=0)  # the probe; the next is 30 s away
    result = []
    waiter = threading.Thread(target=lambda: result.append(outage.may_take("a", timeout=60)))
    waiter.start()
    assert read_elsewhere.wait(5)
    assert result == []  # waiting for the next probe
    with caplog.at_level(logging.WARNING):
        outage.answered()
    waiter.join(5)
    assert not waiter.is_alive() and result == [True]
    assert not outage.active and outage.state().ever_answered
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_nonsense_settings_are_refused():
    with pytest.raises(ValueError):
        OutageGate(0)
    with pytest.raises(ValueError):
        OutageGate(5, probe_base=2, probe_cap=1)
