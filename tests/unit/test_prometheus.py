"""The Prometheus endpoint: the families it serves, by the book, and its serving thread, supervised as the
daemon's own threads are."""

from __future__ import annotations

import dataclasses
import threading
import urllib.request
from typing import Sequence

import pytest
from prometheus_client.core import Metric

from conftest import FakeClock, wait_for
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.io.graveyard import Graveyard
from thread_client.limits.host_ban import HostBan
from thread_client.limits.keys import RetireReason
from thread_client.observe.metrics import Metrics
from thread_client.observe.prometheus import DaemonCollector, MetricsServer
from thread_client.observe.status import DaemonStatus, KeyCondition, KeyStatus
from thread_client.policy.answers import Outcome
from thread_client.request import Request
from thread_client.threads import ManagedThread

BOUND = 5.0


def idle_status(bounds: Sequence[float]) -> DaemonStatus:
    """What a daemon that has done nothing yet shows."""
    counts = QueueManager(Graveyard(None), queue_size=1, ttl=1.0).counts()
    return DaemonStatus(counts, Metrics().snapshot(), (), {}, OutageGate().state())


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=BOUND) as answer:
        return answer.read().decode()


def test_the_serving_thread_is_restarted_after_it_died_and_serves_again():
    server = MetricsServer(idle_status, 0)
    [thread] = server.threads()
    gave_up: list[ManagedThread] = []
    thread.supervise(3, gave_up.append)
    died = threading.Event()

    def die_once() -> None:  # called after every pass of the serving loop: fails once, as a failing select would
        if not died.is_set():
            died.set()
            raise OSError(9, "Bad file descriptor")

    server._server.service_actions = die_once
    thread.start()
    scrape(server.port)  # served; the loop dies right after
    wait_for(lambda: thread.restarts == 1, timeout=BOUND)
    assert "thread_client_created_total 0.0" in scrape(server.port)
    server.close()
    thread.join(BOUND)
    assert not thread.is_alive() and thread.failure is None and gave_up == []


def test_closing_a_server_whose_thread_never_started_does_not_hang():
    server = MetricsServer(idle_status, 0)
    closing = threading.Thread(target=server.close)
    closing.start()
    closing.join(BOUND)
    assert not closing.is_alive()


def families(status: DaemonStatus, wall: float = 1_700_000_000.0) -> dict[str, Metric]:
    """What one scrape of ``status`` serves, by family name (a counter's without its ``_total``)."""
    return {family.name: family for family in DaemonCollector(lambda bounds: status, lambda: wall).collect()}


def samples(family: Metric) -> dict[tuple[str, ...], float]:
    return {tuple(sample.labels.values()): sample.value for sample in family.samples if not sample.name.endswith("_created")}


def running_status() -> DaemonStatus:
    """Two keys, one held after a strike and one parked, work waiting in both queues, an accept 4 s ago."""
    clock = FakeClock()
    metrics = Metrics(clock)
    metrics.attempted("UT4N...JYA6", Outcome.ACCEPTED, 0.05)
    metrics.accepted(1.0)
    clock.advance(4.0)
    keys = (
        KeyStatus("UT4N...JYA6", 1.001, 0.05, KeyCondition.HELD, 1, (("per key", 19), ("host", 80))),
        KeyStatus("A7QK...MZ22", 1.001, 0.05, KeyCondition.PARKED, 3, (("per key", 20), ("host", 80))),
    )
    counts = QueueManager(Graveyard(None), queue_size=1, ttl=1.0).counts()
    return DaemonStatus(counts, metrics.snapshot(), keys, {}, OutageGate().state(), oldest_ages=(2.5, 0.0), bans=1,
                        lease_takes={"UT4N...JYA6": 3})


def test_every_name_is_prefixed_counters_end_in_total_and_times_are_in_seconds():
    served = families(running_status())
    for name, family in served.items():
        assert name.startswith("thread_client_")
        exposed = {sample.name for sample in family.samples}
        if family.type == "counter":
            assert exposed <= {f"{name}_total", f"{name}_created"}
        assert not any(unit in name for unit in ("_ms", "_millis", "_minutes", "_kib"))
    assert {"thread_client_key_retired", "thread_client_blocked_keys", "thread_client_graveyard",
            "thread_client_retried", "thread_client_queue_size", "thread_client_in_flight"}.isdisjoint(served)


def test_a_key_the_operator_paused_is_served_in_the_paused_state():
    counts = QueueManager(Graveyard(None), queue_size=5, ttl=60.0).counts()
    paused = KeyStatus("UT4N...JYA6", 1.0, 0.05, KeyCondition.PAUSED, 0, ())
    state = samples(families(DaemonStatus(counts, Metrics().snapshot(), (paused,), {}, OutageGate().state()))[
        "thread_client_key_state"])
    assert [labels for labels, value in state.items() if value == 1] == [("UT4N...JYA6", "paused")]


def test_a_daemon_paused_from_the_control_api_is_served_so_the_stall_alerts_can_skip_it():
    """A deliberate pause stalls every key: without this gauge the stall alerts page for it."""
    assert samples(families(running_status())["thread_client_paused"]) == {(): 0}
    paused = dataclasses.replace(running_status(), paused=True)
    assert samples(families(paused)["thread_client_paused"]) == {(): 1}


def test_key_states_strikes_budgets_bans_and_leases_are_served():
    served = families(running_status())
    state = samples(served["thread_client_key_state"])
    assert {labels[1] for labels in state} == {"sending", "paused", "held", "parked", "blocked", "retired", "banned",
                                               "not owned"}
    assert [labels for labels, value in state.items() if value == 1] == [("UT4N...JYA6", "held"),
                                                                          ("A7QK...MZ22", "parked")]
    assert samples(served["thread_client_strikes"]) == {("UT4N...JYA6",): 1, ("A7QK...MZ22",): 3}
    assert samples(served["thread_client_limit_remaining"])[("UT4N...JYA6", "per key")] == 19
    assert samples(served["thread_client_bans"]) == {(): 1}
    assert samples(served["thread_client_lease_takes"]) == {("UT4N...JYA6",): 3}
    assert samples(served["thread_client_queue_oldest_age_seconds"]) == {("main",): 2.5, ("dlq",): 0.0}


def test_the_last_accept_is_a_unix_timestamp_and_zero_before_any():
    assert samples(families(running_status(), wall=1_700_000_000.0)["thread_client_last_accepted_timestamp_seconds"]) \
        == {(): 1_700_000_000.0 - 4.0}
    assert samples(families(idle_status(()))["thread_client_last_accepted_timestamp_seconds"]) == {(): 0.0}


def test_every_outcome_of_every_key_is_declared_at_zero_before_it_happens():
    attempts = samples(families(running_status())["thread_client_attempts"])
    assert len(attempts) == 2 * len(Outcome)
    assert attempts[("UT4N...JYA6", "accepted")] == 1
    assert attempts[("A7QK...MZ22", "rate_limited")] == 0


@pytest.mark.parametrize("retired_because, held, banned, condition", [
    (None, False, False, KeyCondition.SENDING),
    (None, True, False, KeyCondition.HELD),
    (None, True, True, KeyCondition.BANNED),
    (RetireReason.PARKED, True, True, KeyCondition.PARKED),
    (RetireReason.STRIKE_BUDGET_SPENT, False, False, KeyCondition.BLOCKED),  # for good: no un-park
    (RetireReason.KEY_BLOCKED, False, True, KeyCondition.BLOCKED),
    (RetireReason.OUTPUT_FAILED, False, False, KeyCondition.BLOCKED),
    (RetireReason.OPERATOR, False, True, KeyCondition.RETIRED),  # no block: the alert on blocked keys stays quiet
])
def test_a_key_s_condition_puts_its_retirement_first_then_the_ban_then_its_hold(retired_because, held, banned,
                                                                                 condition):
    assert KeyCondition.of(retired_because, held, banned) is condition


def test_the_oldest_queued_request_s_age_is_read_from_both_queues():
    clock = FakeClock()
    queues = QueueManager(Graveyard(None), queue_size=5, ttl=60.0, clock=clock)
    assert queues.oldest_ages() == (0.0, 0.0)
    first, second = Request("a", clock()), Request("b", clock() + 1.0)
    queues.submit(first)
    clock.advance(1.0)
    queues.submit(second)
    taken = queues.take(timeout=0)
    queues.retry(taken, Outcome.TIMEOUT, delay=30.0)
    clock.advance(2.0)
    assert queues.oldest_ages() == (2.0, 3.0)


def test_a_ban_is_active_until_its_end():
    clock = FakeClock()
    ban = HostBan(lambda seconds: None, clock=clock)
    assert not ban.active
    ban.banned(10.0)
    clock.advance(9.9)
    assert ban.active
    clock.advance(0.2)
    assert not ban.active
