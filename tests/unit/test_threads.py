"""Supervised threads: a death is restarted while the restart budget lasts, and the budget recovers over time."""

from __future__ import annotations

from conftest import FakeClock
from thread_client.threads import ManagedThread, RestartBudget

PERIOD = 600.0
BOUND = 5.0  # seconds a thread of these tests may take to end (it takes milliseconds)


def test_the_budget_allows_max_restarts_within_any_period_and_recovers_as_deaths_age(clock: FakeClock):
    budget = RestartBudget(3, PERIOD, clock)
    assert [budget.allows_restart() for _ in range(3)] == [True, True, True]
    assert not budget.allows_restart()  # a fourth death within the period
    clock.advance(PERIOD)
    assert budget.allows_restart()  # the first three have aged out
    clock.advance(PERIOD / 2)
    assert budget.allows_restart() and budget.allows_restart()
    assert not budget.allows_restart()  # three within the last period again


def test_no_restart_budget_allows_none(clock: FakeClock):
    assert not RestartBudget(0, PERIOD, clock).allows_restart()


class Dying(ManagedThread):
    """Dies ``deaths`` times (moving the fake clock ``apart`` seconds before each death), then ends cleanly."""

    def __init__(self, clock: FakeClock, deaths: int, apart: float) -> None:
        super().__init__("dying")
        self._clock = clock
        self._deaths = deaths
        self._apart = apart

    def work(self) -> None:
        if self._deaths:
            self._deaths -= 1
            self._clock.advance(self._apart)
            raise RuntimeError("a death")


def test_deaths_far_apart_are_restarted_however_many_there_are(clock: FakeClock):
    gave_up: list[ManagedThread] = []
    thread = Dying(clock, deaths=10, apart=PERIOD / 2)  # two per period: always within a budget of three
    thread.supervise(3, gave_up.append, period=PERIOD, clock=clock)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert (thread.failure, thread.restarts, gave_up) == (None, 10, [])


def test_a_thread_that_keeps_dying_is_given_up_once_its_budget_is_spent(clock: FakeClock):
    gave_up: list[ManagedThread] = []
    thread = Dying(clock, deaths=10, apart=1.0)
    thread.supervise(3, gave_up.append, period=PERIOD, clock=clock)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert isinstance(thread.failure, RuntimeError) and thread.restarts == 3 and gave_up == [thread]
