"""What a restart reads from an earlier run: which ids are done, which are resumed, which send each key must settle;
and the group commit that makes the journal durable before a send."""

from __future__ import annotations

import json
import os
import threading
from typing import Callable

import pytest

from full_disk import FillingDisk
from thread_client.flow.outage import OutageGate
from thread_client.flow.producer import Producer
from thread_client.flow.queues import QueueManager
from thread_client.flow.worker import Worker
from thread_client.io.graveyard import Graveyard
from thread_client.io.jsonlines import JsonLinesFile
from thread_client.delivery import EXACTLY_ONCE
from thread_client.errors import OutputInUse
from thread_client.io.resume import EarlierSend, ResumePoint, SendJournal, line_digest
from thread_client.io.results import Results
from thread_client.io.sources import JsonLinesSource
from thread_client.limits.keys import HostKeyPool, KeyPacing
from thread_client.parts import Answer
from thread_client.policy.retry import RetryPolicy
from thread_client.request import FinalOutcome, Request
from thread_client.resumability import NOT_RESUMABLE, Resumability
from thread_client.selectable_event import SelectableEvent
from thread_client.limits.scopes import RuleScopes


def write_lines(path, records) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


@pytest.fixture
def earlier_run(tmp_path):
    """An earlier exactly-once run on keys k1 and k2 that crashed. In send order:
    a on k1 (answered, final record), b on k1 (503, to be retried), b on k2 (no answer yet),
    c on k1 (no answer yet), and a line the crash cut short."""
    results = tmp_path / "results.jsonl"
    write_lines(results, [{"id": "a", "outcome": "accepted"}])
    sends = [("a", "k1", 10), ("b", "k1", 11), ("b", "k2", 50), ("c", "k1", 12)]
    write_lines(tmp_path / "results.jsonl.sent",
                [{"id": i, "key": k, "nonce": n, "params": {"side": "buy"}, "once": True} for i, k, n in sends])
    with (tmp_path / "results.jsonl.sent").open("a") as journal:
        journal.write('{"id": "d", "ke')
    return str(results)


def test_exactly_once_settles_the_last_send_of_each_key_and_resumes_nothing_twice(earlier_run, tmp_path):
    resume = ResumePoint(earlier_run, tmp_path, delivery=EXACTLY_ONCE)
    try:
        # b moved on from k1 to k2: only its latest send can have been accepted unanswered.
        assert resume.unsettled == {"k1": EarlierSend("c", "k1", 12, {"side": "buy"}),
                                    "k2": EarlierSend("b", "k2", 50, {"side": "buy"})}
        assert all(i in resume.skip for i in "abc") and "d" not in resume.skip
    finally:
        resume.close()


def test_a_request_answered_before_its_keys_next_send_is_resumed_not_settled(tmp_path):
    results = tmp_path / "results.jsonl"
    write_lines(tmp_path / "results.jsonl.sent", [
        {"id": "x", "key": "k1", "nonce": 1, "once": True}, {"id": "y", "key": "k1", "nonce": 2, "once": True},
    ])
    resume = ResumePoint(str(results), tmp_path, delivery=EXACTLY_ONCE)
    try:
        assert set(resume.unsettled) == {"k1"} and resume.unsettled["k1"].id == "y"
        assert "x" in resume.resumed and "x" not in resume.skip
    finally:
        resume.close()


@pytest.mark.parametrize("lines, settled", [
    # x went unanswered, then y on the same key was accepted: the key's last send is y, nothing is in doubt
    ([("x", "k1", 1, False), ("y", "k1", 2, False)], None),
    # x was answered (a 400, a 503) and not sent again before the crash: settling would read a 400 as an accept
    ([("x", "k1", 1, False), ("x", "k1", 1, True)], None),
    # x's answer was written after y left on the key: y is still in doubt
    ([("x", "k1", 1, False), ("z", "k1", 2, False), ("x", "k1", 1, True)], "z"),
], ids=["a later send on the key was accepted", "the last send was answered", "an answer written late"])
def test_only_a_keys_last_send_with_no_answer_and_no_record_is_settled(tmp_path, lines, settled):
    results = tmp_path / "results.jsonl"
    write_lines(results, [{"id": "y", "outcome": "accepted"}])
    write_lines(tmp_path / "results.jsonl.sent", [{"id": i, "key": k, "nonce": n, "once": True,
                                                   **({"answered": True} if a else {})} for i, k, n, a in lines])
    resume = ResumePoint(str(results), tmp_path, delivery=EXACTLY_ONCE)
    try:
        assert [send.id for send in resume.unsettled.values()] == ([settled] if settled else [])
        assert "x" in resume.resumed and "x" not in resume.skip  # sent again afresh, never settled
    finally:
        resume.close()


def test_a_request_that_moved_on_is_settled_on_its_last_key_only(tmp_path):
    # x answered on k1, sent on k2, then z on k1 (which hides x's send there), then x on k3: k2 is done with x.
    lines = [("x", "k1", 5, False), ("x", "k1", 5, True), ("x", "k2", 7, False), ("z", "k1", 6, False),
             ("x", "k3", 9, False)]
    write_lines(tmp_path / "results.jsonl.sent", [{"id": i, "key": k, "nonce": n, "once": True,
                                                   **({"answered": True} if a else {})} for i, k, n, a in lines])
    resume = ResumePoint(str(tmp_path / "results.jsonl"), tmp_path, delivery=EXACTLY_ONCE)
    try:
        assert {key: (send.id, send.nonce) for key, send in resume.unsettled.items()} == {"k1": ("z", 6), "k3": ("x", 9)}
    finally:
        resume.close()


def test_sends_of_an_at_least_once_run_are_never_settled(tmp_path):
    # Two threads per key: y may have overtaken x inside the server, so x's nonce draws a 400 that is no accept.
    write_lines(tmp_path / "results.jsonl.sent", [{"id": "y", "key": "k1", "nonce": 2}, {"id": "x", "key": "k1", "nonce": 1}])
    resume = ResumePoint(str(tmp_path / "results.jsonl"), tmp_path, delivery=EXACTLY_ONCE)
    try:
        assert resume.unsettled == {} and "x" in resume.resumed and "y" in resume.resumed
    finally:
        resume.close()


def test_at_least_once_resumes_every_unfinished_send(earlier_run, tmp_path):
    resume = ResumePoint(earlier_run, tmp_path)
    try:
        assert resume.unsettled == {}
        assert "a" in resume.skip and all(i not in resume.skip and i in resume.resumed for i in "bc")
    finally:
        resume.close()


def test_a_durable_append_returns_only_once_its_line_was_synced(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    synced: set[str] = set()  # every line some fdatasync covered
    real_fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        synced.update(path.read_text().splitlines())

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    journal = JsonLinesFile(path, durable=True)
    not_synced = []

    def writer(name: str) -> None:
        for n in range(40):
            journal.append({"writer": name, "n": n})
            if json.dumps({"writer": name, "n": n}) not in synced:
                not_synced.append((name, n))

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    journal.close()
    assert not_synced == [] and len(path.read_text().splitlines()) == 160


class AlwaysOk:
    def connect(self) -> None:
        """Nothing to open."""

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        return Answer(200, json.dumps({"status": "OK", "req_id": req_id}).encode(), None)

    def close(self) -> None:
        pass


def test_two_keys_that_show_the_same_name_keep_their_own_earlier_sends(tmp_path):
    # Alike at both ends (both show as AAAA...ZZZZ), and two short keys (both all stars): a restart that
    # grouped sends by the shown name settled one key's send on the other, or lost one.
    secrets = ["AAAA1111111111ZZZZ", "AAAA2222222222ZZZZ", "abc", "xyz"]
    pool = HostKeyPool.open(secrets, state_dir=str(tmp_path / "state"),
                            pacing=KeyPacing(RuleScopes.ring(20, 1.001), 0.0, 1.0))
    try:
        keys = list(pool)
        assert len({key.name for key in keys}) == 4 and len({key.id for key in keys}) == 4
        results = tmp_path / "results.jsonl"
        journal = SendJournal(str(results), delivery=EXACTLY_ONCE)
        queues = QueueManager(Graveyard(None))
        for number, key in enumerate(keys):
            queues.submit(Request(f"r{number}", 0.0))
            worker = Worker(key, queues, AlwaysOk(), RetryPolicy(), OutageGate(), threading.Event(), journal=journal)
            worker._handle(queues.take(timeout=0))  # one send each, on this thread: journaled, never recorded
        journal.close()
        names = {key.name for key in keys}
        resume = ResumePoint(str(results), tmp_path, delivery=EXACTLY_ONCE)
        assert {kid: send.id for kid, send in resume.unsettled.items()} == {
            key.id: f"r{number}" for number, key in enumerate(keys)}
        assert not names & set(resume.unsettled)  # by id, never by the shown name
        resume.close()
    finally:
        pool.release()


def test_a_line_a_full_disk_cut_short_is_ended_before_the_next_and_a_durable_writer_is_told(tmp_path):
    path = tmp_path / "results.jsonl"
    disk = FillingDisk(room=60)
    failures: list[OSError] = []
    records = JsonLinesFile(path, failures.append, durable=True, write=disk)
    records.append({"id": "a", "pad": "x" * 20})  # fits
    with pytest.raises(OSError):  # durable: the caller must know its record is not on the disk
        records.append({"id": "b", "pad": "x" * 20})  # torn after a few bytes
    disk.free()
    records.append({"id": "c"})
    records.close()
    assert [f.errno for f in failures] == [28] and [json.loads(line)["id"] for line in records.unwritten()] == ["b"]
    lines = path.read_bytes().split(b"\n")
    assert json.loads(lines[0])["id"] == "a" and json.loads(lines[2])["id"] == "c"  # "c" was not glued to b's tail
    with pytest.raises(ValueError):
        json.loads(lines[1])  # b's torn start, alone on its line: readers skip it


def test_opening_a_file_whose_last_line_a_crash_cut_short_ends_that_line_first(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b", "par')
    records = JsonLinesFile(path)
    records.append({"id": "c"})
    records.close()
    assert path.read_bytes().split(b"\n")[2] == b'{"id": "c"}'


def test_a_non_durable_writer_keeps_the_line_and_is_not_interrupted(tmp_path):
    records = JsonLinesFile(tmp_path / "g.jsonl", write=FillingDisk(room=0))
    records.append({"id": "a"})  # does not raise: the daemon is told through on_write_error and stops
    assert records.unwritten() == ['{"id": "a"}']


def test_a_second_writer_of_a_results_file_is_refused_while_the_first_holds_it(tmp_path):
    path = str(tmp_path / "results.jsonl")
    first = Results(path)
    with pytest.raises(OutputInUse, match="being written by another thread-client"):
        Results(path)
    journal = SendJournal(path)
    with pytest.raises(OutputInUse):
        SendJournal(path)
    journal.close()
    first.close()
    Results(path).close()  # let go: a later run may write it


def test_unsent_work_is_left_for_a_next_run_only_if_it_can_read_the_input_again_and_knows_what_is_done(tmp_path):
    source, fifo, results = tmp_path / "in.jsonl", tmp_path / "fifo", str(tmp_path / "results.jsonl")
    source.write_text('{"id": "a"}\n')
    os.mkfifo(fifo)
    assert Resumability.of(str(source), results) == Resumability(input_again=True, results_file=results)
    assert Resumability.of(str(source), results).keeps_unsent
    # A pipe is gone once read: its lines are recorded at a stop, and its results file is still read back.
    assert Resumability.of(str(fifo), results) == Resumability(input_again=False, results_file=results)
    assert not Resumability.of(str(fifo), results).keeps_unsent
    # A file whose records go to standard output: a rerun would send every line again, nothing to resume from.
    assert Resumability.of(str(source), "-") == Resumability(input_again=True)
    assert not Resumability.of(str(source), "-").keeps_unsent
    assert Resumability.of("generate", results) == Resumability.of("generate", None) == NOT_RESUMABLE
    stream = Resumability.of("redis://127.0.0.1:6379/0?stream=w", None)
    assert stream.keeps_unsent and stream.results_file is None


def test_an_invalid_line_of_another_input_at_a_number_recorded_before_gets_its_own_record(tmp_path):
    # Invalid lines were known by their number alone: a second input written to the same results file got no
    # record for an invalid line wherever the first input had one at the same number.
    results = tmp_path / "results.jsonl"
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(b'not json\n{"id": 5}\n')
    second.write_bytes(b'[1, 2]\n{"id": "c", "param": {}}\n')

    def run(source_file) -> None:
        """The user's input with its results file, read to its end as the daemon's producer reads it."""
        sink = Results(str(results))
        source = JsonLinesSource(str(source_file), state_dir=str(tmp_path), resume=ResumePoint(str(results), tmp_path))
        stop = SelectableEvent()
        Producer(QueueManager(Graveyard(None), results=sink), source, stop).work()
        source.close()
        sink.close()
        stop.close()

    def recorded() -> list[tuple[str, str]]:
        return [(record["where"], record["reason"]) for record in map(json.loads, results.read_text().splitlines())]

    run(first)
    run(first)  # the same input again: its invalid lines have their records already
    assert recorded() == [("line 1", "invalid input: line 1: not JSON"),
                          ("line 2", 'invalid input: line 2: no "id" string of 1 to 256 characters')]
    run(second)
    assert recorded()[2:] == [("line 1", "invalid input: line 1: not a JSON object"),
                              ("line 2", "invalid input: line 2: unknown field(s) param")]


def test_a_last_line_that_gains_its_newline_is_still_the_same_line():
    """A file whose last line had no newline grows (or is ended by an editor): the rerun must not take
    that line, recorded invalid before, for another line and record it a second time."""
    assert line_digest(b"not json") == line_digest(b"not json\n") == line_digest(b"not json\r\n")
    assert line_digest(b"not json") != line_digest(b"not json!")


@pytest.mark.parametrize("body", [b'{"status":"OK","req_id":"r1","qty":1e400}',
                                  b'{"status":"OK","req_id":"r1","avg":NaN}'])
def test_an_accepted_record_whose_answer_holds_no_json_number_is_done_on_restart(tmp_path, body):
    """An answer's 1e400 or NaN must not make the record unreadable: a restart would skip it as torn and send the
    accepted request again."""
    path = str(tmp_path / "results.jsonl")
    journal, results = SendJournal(path), Results(path)
    request = Request("r1", 0.0)
    journal.sending(request, "keyid", 17)
    request.note_attempt("k", 17, 200, body)
    results.record(request, FinalOutcome.ACCEPTED)
    results.close()
    journal.close()
    resume = ResumePoint(path, tmp_path)
    assert "r1" in resume.skip and "r1" not in resume.resumed


@pytest.mark.parametrize("line", ['{"id":"r1","outcome":"accepted","body":{"avg":NaN}}',
                                  '{"id":"r1","outcome":"accepted","body":{"qty":Infinity}}'])
def test_a_record_an_earlier_version_wrote_with_nan_is_still_done(tmp_path, line):
    """Records written before answers kept their numbers' text may hold NaN or Infinity: still final records."""
    (tmp_path / "results.jsonl").write_text(line + "\n")
    (tmp_path / "results.jsonl.sent").write_text('{"id":"r1","key":"keyid","nonce":17,"params":{}}\n')
    resume = ResumePoint(str(tmp_path / "results.jsonl"), tmp_path)
    assert "r1" in resume.skip and "r1" not in resume.resumed


def test_a_record_keeps_the_answers_numbers_as_the_exchange_wrote_them(tmp_path):
    """0.00001 in the exchange's answer stays 0.00001 in the record, never 1e-05."""
    path = tmp_path / "results.jsonl"
    results = Results(str(path))
    request = Request("r1", 0.0)
    request.note_attempt("k", 17, 200, b'{"price":0.00001,"qty":1E+3,"n":7}')
    results.record(request, FinalOutcome.ACCEPTED)
    results.close()
    assert '"body": {"price": 0.00001, "qty": 1E+3, "n": 7}' in path.read_text()


def test_a_resumed_request_knows_the_key_its_latest_send_went_on(tmp_path):
    """Its order, if placed, is in that key's account: the one a status ask must ask."""
    write_lines(tmp_path / "results.jsonl.sent", [
        {"id": "x", "key": "k1", "nonce": 1}, {"id": "y", "key": "k1", "nonce": 2}, {"id": "x", "key": "k2", "nonce": 7},
    ])
    resume = ResumePoint(str(tmp_path / "results.jsonl"), tmp_path)
    try:
        assert (resume.resumed.word_of("x"), resume.resumed.word_of("y"), resume.resumed.word_of("z")) == (
            "k2", "k1", None)
    finally:
        resume.close()
