"""The Prometheus endpoint's serving thread: supervised as the daemon's own threads are."""

from __future__ import annotations

import threading
import urllib.request
from typing import Sequence

from conftest import wait_for
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.io.graveyard import Graveyard
from thread_client.observe.metrics import Metrics
from thread_client.observe.prometheus import MetricsServer
from thread_client.observe.status import DaemonStatus
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
