"""The watch of a timed-out send's connection: its slot frees on the server's sign, never on a guess."""

from __future__ import annotations

import socket
import threading

import pytest

from thread_client.errors import LimiterTimeout
from thread_client.io.late_answers import LateAnswers
from thread_client.limits.limiter import ThreadSafeRateLimiter


class Settled:
    """A ``settle`` callback that records what it was told, and lets a test wait for it."""

    def __init__(self) -> None:
        self.told: list[float | None] = []
        self.thread: str | None = None
        self._done = threading.Event()

    def __call__(self, seen_at: float | None) -> None:
        self.told.append(seen_at)
        self.thread = threading.current_thread().name
        self._done.set()

    def wait(self) -> list[float | None]:
        assert self._done.wait(10), "settle was never called"
        return self.told


@pytest.fixture
def late_answers():
    watcher = LateAnswers(cap=30)
    [thread] = watcher.threads()
    thread.start()
    yield watcher
    watcher.close()
    thread.join(5)
    assert not thread.is_alive()


def test_a_late_answer_settles_with_the_time_it_came_and_closes_the_connection(late_answers):
    client, server = socket.socketpair()
    settled = Settled()
    late_answers.watch(client, settled)
    assert late_answers.watching == 1
    server.sendall(b"HTTP/1.1 200 OK\r\n")
    [seen_at] = settled.wait()
    assert seen_at is not None and settled.thread == "late-answers"
    assert client.fileno() == -1 and late_answers.watching == 0
    server.close()


def test_the_connection_closing_is_a_sign_too(late_answers):
    client, server = socket.socketpair()
    settled = Settled()
    late_answers.watch(client, settled)
    server.close()  # the server read the request and dropped it: whatever stamp it made came before this
    assert settled.wait()[0] is not None


def test_nothing_is_settled_while_the_server_shows_nothing(late_answers):
    """A frozen server shows nothing: the slot stays held, however long, until the cap."""
    client, server = socket.socketpair()
    settled = Settled()
    late_answers.watch(client, settled)
    other, other_server = socket.socketpair()
    second = Settled()
    late_answers.watch(other, second)
    other_server.sendall(b"x")
    second.wait()  # the watching thread has run past the silent connection at least once
    assert settled.told == [] and late_answers.watching == 1
    server.close()
    other_server.close()
    settled.wait()


def test_no_sign_within_the_cap_settles_with_none():
    watcher = LateAnswers(cap=0.05)
    [thread] = watcher.threads()
    thread.start()
    client, server = socket.socketpair()
    settled = Settled()
    watcher.watch(client, settled)
    assert settled.wait() == [None]
    assert client.fileno() == -1
    watcher.close()
    thread.join(5)
    server.close()


def test_past_the_limit_a_send_holds_its_slot_for_the_whole_cap(clock):
    """No file descriptor left to watch with: the slot waits out the cap (fewer sends, never a strike), even
    with the server's sign already there. The cap runs on the fake clock: nothing can end it before it moves."""
    watcher = LateAnswers(cap=30, max_watched=0, clock=clock)
    [thread] = watcher.threads()
    thread.start()
    client, server = socket.socketpair()
    server.sendall(b"HTTP/1.1 200 OK\r\n")  # a sign nobody watches
    settled = Settled()
    watcher.watch(client, settled)
    clock.advance(29.9)
    watcher.watch(socket.socketpair()[0], Settled())  # wakes the thread: the cap has not passed yet
    assert settled.told == []
    clock.advance(0.1)
    watcher.watch(socket.socketpair()[0], Settled())  # wakes it again: now it has
    assert settled.wait() == [None]
    watcher.close()
    thread.join(5)
    server.close()


def test_without_a_connection_the_send_keeps_the_unanswered_hold_at_once(late_answers):
    settled = Settled()
    late_answers.watch(None, settled)
    assert settled.told == [None] and settled.thread == threading.current_thread().name


def test_after_close_a_handed_over_connection_is_closed_and_nothing_called_back():
    watcher = LateAnswers(cap=30)
    [thread] = watcher.threads()
    thread.start()
    watched, watched_server = socket.socketpair()
    watcher.watch(watched, Settled())
    watcher.close()
    thread.join(5)
    assert not thread.is_alive() and watched.fileno() == -1
    late, late_server = socket.socketpair()
    settled = Settled()
    watcher.watch(late, settled)
    assert late.fileno() == -1 and settled.told == []
    watched_server.close()
    late_server.close()


def test_a_slot_freed_late_frees_a_window_after_the_sign_and_not_before(clock):
    limiter = ThreadSafeRateLimiter(1, window=1.0, unanswered_hold=1.0, clock=clock)
    permit = limiter.acquire()
    clock.advance(30)  # a freeze: the send timed out long ago, the slot is still held
    assert limiter.state().in_flight == 1
    with pytest.raises(LimiterTimeout):
        limiter.acquire(timeout=0)
    limiter.release_late(permit, sign_seen=True)  # the server showed it read the request just now
    clock.advance(0.999)
    assert limiter.state().ready_in == pytest.approx(0.001)
    clock.advance(0.001)
    assert limiter.acquire(timeout=0).nonce > permit.nonce


def test_a_slot_with_no_sign_within_the_cap_keeps_the_unanswered_hold(clock):
    limiter = ThreadSafeRateLimiter(1, window=1.0, unanswered_hold=2.0, clock=clock)
    permit = limiter.acquire()
    limiter.release_late(permit, sign_seen=False)
    assert limiter.state().ready_in == pytest.approx(3.0)
