"""The daemon's side of the control API, on a daemon built and never started: a requeue is one attempt of an id
at a time (an id adopted to be settled after a crash too), never waits for room in the main queue, and the
daemon's pause and resume leave the flag and the keys' pauses agreeing however two handler threads interleave."""

from __future__ import annotations

import json
import math
import threading

import pytest

from conftest import ROOT, FakeClock
from fakes import ScriptedTransport
from full_disk import FillingDisk
from thread_client.config import Config
from thread_client.control.dead import DeadLetters
from thread_client.control.feed import ConsoleFeed
from thread_client.control.panel import DaemonPanel
from thread_client.daemon import Daemon
from thread_client.delivery import EXACTLY_ONCE
from thread_client.errors import RequeueRefused
from thread_client.exits import StopReason
from thread_client.io.graveyard import Graveyard
from thread_client.io.results import Results
from thread_client.io.sources import SyntheticSource
from thread_client.io.resume import ResumePoint
from thread_client.limits.keys import HostKeyPool, KeyPacing
from thread_client.limits.limiter import PausedBy
from thread_client.limits.scopes import RuleScopes
from thread_client.policy.retry import RetryPolicy
from thread_client.profile import load_profile
from thread_client.request import Request, Work
from thread_client.requeue import REQUEUABLE

BOUND = 5.0


def daemon_of(tmp_path, earlier_sends=None, sink=None, **settings) -> Daemon:
    config = Config(threads_per_key=1, state_dir=str(tmp_path / "state"), graveyard=str(tmp_path / "g.jsonl"),
                    **settings)
    keys = HostKeyPool.open(config.keys, state_dir=config.state_dir,
                            pacing=KeyPacing(RuleScopes(config.limit_rules), math.inf, config.http_timeout))
    return Daemon(config, source=SyntheticSource(), graveyard=Graveyard(None), keys=keys, earlier_sends=earlier_sends,
                  transports=lambda key: ScriptedTransport([]), policy=RetryPolicy(), results=sink)


def dead(*ids: str, requeue: int = 0) -> dict[str, dict]:
    return {request_id: {"id": request_id, "outcome": "rejected", "requeue": requeue} for request_id in ids}


def test_an_id_is_requeued_once_until_its_requeue_has_a_final_record(tmp_path):
    daemon = daemon_of(tmp_path)
    assert daemon.requeue([Work("x", {})], dead("x")) == ["x"]
    assert daemon.requeue([Work("x", {})], dead("x")) == []  # a double click: requeue 1 is still under way
    assert daemon.queues.counts().main_queue == 1
    assert daemon.requeue([Work("x", {})], dead("x", requeue=1)) == ["x"]  # requeue 1 ended dead: 2 may go


def test_a_full_main_queue_refuses_a_requeue_at_once_and_it_may_be_asked_again(tmp_path):
    """A requeue runs in an HTTP handler's thread: a full queue (a paused daemon) holds it no longer than the
    wait it is given (here none)."""
    daemon = daemon_of(tmp_path, queue_size=1)
    works = [Work("x", {}), Work("y", {})]
    refused: list[RequeueRefused] = []

    def handler() -> None:
        try:
            daemon.requeue(works, dead("x", "y"), room_wait=0.0)
        except RequeueRefused as exc:
            refused.append(exc)

    thread = threading.Thread(target=handler)
    thread.start()
    thread.join(BOUND)
    stuck = thread.is_alive()
    if stuck:
        daemon.queues.close()  # lets it go: the queue never got room
        thread.join(BOUND)
    assert not stuck, "the requeue waited for room in the main queue"
    assert [exc.queued for exc in refused] == [["x"]]
    daemon.queues.take()
    assert daemon.requeue(works, dead("x", "y"), room_wait=0.0) == ["y"]  # the refusal left y not under way


def test_a_requeue_adopted_to_be_settled_after_a_crash_is_not_requeued_again(tmp_path):
    """Exactly-once: requeue 1 of x was on the wire at the crash; the restart settles it, while x's old dead
    record still shows. A requeue meanwhile would send x a second time under a fresh nonce: two orders."""
    state, results, source = tmp_path / "state", tmp_path / "results.jsonl", tmp_path / "in.jsonl"
    state.mkdir()
    source.write_text(json.dumps({"id": "x", "params": {"n": 1}}) + "\n")
    keys = HostKeyPool.open(Config().keys, state_dir=str(state),
                            pacing=KeyPacing(RuleScopes(Config().limit_rules), math.inf, 1.0))
    first = next(iter(keys))
    results.write_text(json.dumps({"id": "x", "outcome": "rejected", "finished": 1.0, "key": "k"}) + "\n")
    (tmp_path / "results.jsonl.sent").write_text(json.dumps(
        {"id": "x", "key": first.id, "nonce": first.limiter.nonces.last, "params": {"n": 1}, "once": True,
         "requeue": 1}) + "\n")
    keys.release()
    point = ResumePoint(str(results), str(state), delivery=EXACTLY_ONCE)
    try:
        daemon = daemon_of(tmp_path, point.unsettled, delivery=EXACTLY_ONCE, source=str(source),
                           results=str(results))
        assert daemon.queues.counts().in_flight == 1  # x adopted: its worker settles it first thing
        letters = DeadLetters(str(results), str(source))
        assert daemon.requeue(*letters.requests(["x"])) == []
        assert [item["under_way"] for item in daemon.mark_under_way(letters.page().items)] == [True]
    finally:
        point.close()


def test_a_pause_and_a_resume_from_two_threads_leave_the_flag_and_the_keys_agreeing(tmp_path):
    daemon = daemon_of(tmp_path)
    limiter = next(iter(daemon.keys)).limiter
    asked = threading.Semaphore(0)  # released by each thread that asks for the control lock

    class AskedLock:
        def __init__(self) -> None:
            self._lock = threading.Lock()

        def __enter__(self) -> None:
            asked.release()
            self._lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self._lock.release()

    daemon._control_lock = AskedLock()
    pausing, go = threading.Event(), threading.Event()
    real_pause = limiter.pause

    def slow_pause(by: PausedBy) -> None:  # the pausing thread is preempted on its way through the keys
        pausing.set()
        go.wait(BOUND)
        real_pause(by)

    limiter.pause = slow_pause
    pause = threading.Thread(target=daemon.pause)
    pause.start()
    assert pausing.wait(BOUND)
    resume = threading.Thread(target=daemon.resume)
    resume.start()
    assert asked.acquire(timeout=BOUND) and asked.acquire(timeout=BOUND)  # the resume has asked for the lock too
    go.set()
    for thread in (pause, resume):
        thread.join(BOUND)
        assert not thread.is_alive()
    assert daemon.paused is (PausedBy.DAEMON in limiter.paused_by), (daemon.paused, limiter.paused_by)


@pytest.mark.parametrize("profile", ["reference", "reference-orders"])
def test_a_dead_letter_whose_order_may_be_placed_is_asked_about_first_or_refused_never_sent_blindly(tmp_path, profile):
    """The console's requeue: where the profile can ask ([settle]), the letter whose attempt went unanswered
    reaches the queue marked to be asked about first, on the key it was sent on; where it cannot, it is refused
    (unless the operator takes the risk), and a letter the exchange refused goes as it is."""
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"id": "t", "outcome": "retries_exhausted", "ambiguous_attempts": 1}) + "\n"
                       + json.dumps({"id": "r", "outcome": "rejected", "ambiguous_attempts": 0}) + "\n")
    (tmp_path / "results.jsonl.sent").write_text(json.dumps({"id": "t", "key": "k1", "nonce": 5, "params": {}}) + "\n"
                                                 + json.dumps({"id": "r", "key": "k1", "nonce": 6, "params": {}}) + "\n")
    daemon = daemon_of(tmp_path, profile=load_profile(str(ROOT / "examples" / "profiles" / f"{profile}.toml")))
    panel = DaemonPanel(daemon, ConsoleFeed(FakeClock()), DeadLetters(str(results)))
    sent, refused = panel.requeue(None, frozenset(REQUEUABLE), may_double=False)
    queued = {request.req_id: request for request in iter(lambda: daemon.queues.take(timeout=0), None)}
    if profile == "reference-orders":
        assert (sent, refused) == (["t", "r"], [])
        assert (queued["t"].resumed, queued["t"].sent_on, queued["r"].resumed) == (True, "k1", False)
    else:
        assert (sent, refused, list(queued)) == (["r"], ["t"], ["r"])


def test_a_drain_whose_records_the_disk_refuses_exits_with_the_output_failed_code_whatever_stopped_the_run(tmp_path):
    """A SIGTERM first, then the drain's records meet a full disk: they go to stderr, and the exit code says the
    output failed (it once said 0: the first stop reason hid it)."""
    results = Results(str(tmp_path / "results.jsonl"), write=FillingDisk(room=0))
    daemon = daemon_of(tmp_path, sink=results, queue_size=4)
    assert daemon.queues.submit(Request("a", 0.0))
    daemon.request_stop(StopReason.SIGTERM)
    summary = daemon.shutdown(join_timeout=BOUND)
    assert summary.stop_reason is StopReason.SIGTERM and summary.records_unwritten == 1
    assert summary.exit_code == StopReason.OUTPUT_FAILED.exit_code == 1
