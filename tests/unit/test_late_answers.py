"""The watch of a timed-out send's connection: its slot frees on the server's sign, never on a guess."""

from __future__ import annotations

import socket
import threading

import pytest

from conftest import wait_for
from thread_client.errors import LimiterTimeout
from thread_client.io.late_answers import LateAnswers
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.parts import Answer


class Settled:
    """A ``settle`` callback that records what it was told, and lets a test wait for it."""

    def __init__(self) -> None:
        self.told: list[float | None] = []
        self.answers: list[Answer | None] = []
        self.thread: str | None = None
        self._done = threading.Event()

    def __call__(self, seen_at: float | None, answer: Answer | None = None) -> None:
        self.told.append(seen_at)
        self.answers.append(answer)
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


def test_a_late_answer_is_read_as_far_as_it_came_without_waiting_for_more(late_answers):
    """The watcher reads what is there (the head and the start of the body) and hands it over: a late 429
    is a refusal the server counted."""
    client, server = socket.socketpair()
    settled = Settled()
    late_answers.watch(client, settled)
    body = b'{"status": "error", "error_msg": "exceeded rate limit"}'
    server.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 2\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body) + 10, body))  # ten bytes still to come
    [seen_at] = settled.wait()
    [answer] = settled.answers
    assert seen_at is not None and answer == Answer(429, body, 2.0)
    server.close()


def test_a_sign_that_is_no_answer_hands_over_none(late_answers):
    client, server = socket.socketpair()
    settled = Settled()
    late_answers.watch(client, settled)
    server.sendall(b"garbage")
    assert settled.wait()[0] is not None and settled.answers == [None]
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


def test_close_settles_every_watch_once_and_closes_its_connection():
    """A permit handed over is given back whatever happens to the watch: watched, past the limit, or handed over
    after close (a slot left in flight would hold a shared key's lease for good)."""
    watcher = LateAnswers(cap=30, max_watched=1)
    [thread] = watcher.threads()
    thread.start()
    watched, watched_server = socket.socketpair()
    past_limit, past_limit_server = socket.socketpair()
    first, second = Settled(), Settled()
    watcher.watch(watched, first)
    watcher.watch(past_limit, second)
    wait_for(lambda: past_limit.fileno() == -1, timeout=5)  # the thread took both: one watched, one past the limit
    assert first.told == second.told == []
    watcher.close()
    thread.join(5)
    assert not thread.is_alive() and watched.fileno() == -1
    assert first.wait() == second.wait() == [None] and first.thread == second.thread == "late-answers"
    late, late_server = socket.socketpair()
    settled = Settled()
    watcher.watch(late, settled)
    assert late.fileno() == -1 and settled.told == [None] and settled.thread == threading.current_thread().name
    assert watcher.watching == 0
    for end in (watched_server, past_limit_server, late_server):
        end.close()


def test_a_watch_handed_over_just_before_close_is_settled_too():
    watcher = LateAnswers(cap=30)
    client, server = socket.socketpair()
    settled = Settled()
    watcher.watch(client, settled)  # not yet taken by the thread when close() comes
    watcher.close()
    [thread] = watcher.threads()
    thread.start()
    thread.join(5)
    assert settled.wait() == [None] and client.fileno() == -1 and watcher.watching == 0
    server.close()


class Unwatchable(socket.socket):
    """A connection the selector fails on with an error of no known kind (a bug), not an OSError."""

    def fileno(self) -> int:
        raise RuntimeError("a connection with a bug")


def test_a_watch_that_fails_to_start_with_a_bug_holds_its_slot_until_the_cap_and_loses_no_other(clock):
    watcher = LateAnswers(cap=30, clock=clock)
    [thread] = watcher.threads()
    thread.start()
    bugged = Unwatchable(socket.AF_UNIX, socket.SOCK_STREAM)
    settled = Settled()
    watcher.watch(bugged, settled)
    client, server = socket.socketpair()
    other = Settled()
    watcher.watch(client, other)
    server.sendall(b"HTTP/1.1 200 OK\r\n")
    assert other.wait()[0] is not None  # the thread lives on, and watches the next one
    assert settled.told == [] and watcher.watching == 1
    clock.advance(30)
    watcher.watch(socket.socketpair()[0], Settled())  # wakes the thread: the cap has passed
    assert settled.wait() == [None]
    watcher.close()
    thread.join(5)
    assert not thread.is_alive() and thread.failure is None
    server.close()


def test_a_slot_freed_late_frees_a_window_after_the_sign_and_not_before(clock):
    limiter = ThreadSafeRateLimiter(1, window=1.0, unanswered_hold=1.0, clock=clock)
    permit = limiter.acquire()
    clock.advance(30)  # a freeze: the send timed out long ago, the slot is still held
    assert limiter.state().in_flight == 1
    with pytest.raises(LimiterTimeout):
        limiter.acquire(timeout=0)
    limiter.release_late(permit, sign_seen=True)  # the server showed it read the request just now
    clock.advance(0.999)
    assert limiter.state().ready_in == pytest.approx(0.001001)  # the window and the limiter's microsecond guard
    clock.advance(0.001001)
    assert limiter.acquire(timeout=0).nonce > permit.nonce


def test_a_slot_with_no_sign_within_the_cap_keeps_the_unanswered_hold(clock):
    limiter = ThreadSafeRateLimiter(1, window=1.0, unanswered_hold=2.0, clock=clock)
    permit = limiter.acquire()
    limiter.release_late(permit, sign_seen=False)
    assert limiter.state().ready_in == pytest.approx(3.0)
