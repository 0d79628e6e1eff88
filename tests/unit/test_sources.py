"""The user's requests in (JSON lines: validated, duplicates caught on disk) and their final records out."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

import pytest

from conftest import ROOT
from thread_client.errors import StateNotWritten
from thread_client.exits import StopReason
from thread_client.flow.producer import Producer
from thread_client.flow.queues import QueueManager
from thread_client.io import sources
from thread_client.io.graveyard import Graveyard
from thread_client.io.results import Results, final_record
from thread_client.io.resume import ResumePoint
from thread_client.io.seen_ids import SeenIds
from thread_client.io.sources import JsonLinesSource
from thread_client.profile import read_profile
from thread_client.profile.endpoints import Endpoints
from thread_client.request import MAX_LINE_BYTES, FinalOutcome, InvalidInput, Request, Work, parse_line
from thread_client.selectable_event import SelectableEvent


@pytest.mark.parametrize("line, expected", [
    (b'{"id": "a1", "params": {"amount": 5, "side": "buy", "px": 1.5, "post": true}}',
     Work("a1", {"amount": "5", "side": "buy", "px": "1.5", "post": True}, where="line 7")),
    (b'{"id": "a2"}', Work("a2", {}, where="line 7")),
    (b"not json", InvalidInput("line 7", "", "not JSON")),
    (b"[1, 2]", InvalidInput("line 7", "", "not a JSON object")),
    (b'{"params": {}}', InvalidInput("line 7", "", 'no "id" string of 1 to 256 characters')),
    (b'{"id": 12}', InvalidInput("line 7", "", 'no "id" string of 1 to 256 characters')),
    (b'{"id": "a3", "param": {}}', InvalidInput("line 7", "a3", "unknown field(s) param")),
    (b'{"id": "a4", "params": [1]}', InvalidInput("line 7", "a4", '"params" is not an object')),
    # The profile's own names are refused by its check (``Endpoints``); no name is anyone's without it.
    (b'{"id": "a5", "params": {"nonce": 1, "api_key": "k"}}', Work("a5", {"nonce": "1", "api_key": "k"}, where="line 7")),
    # Null, objects and arrays are read as they are: where the params go as text, the profile refuses them (``Endpoints``).
    (b'{"id": "a6", "params": {"x": null}}', Work("a6", {"x": None}, where="line 7")),
    (b'{"id": "a7", "params": {"x": {"y": [1, true]}}}', Work("a7", {"x": {"y": ["1", True]}}, where="line 7")),
    # Lines that used to raise out of the parser and stop the file for good:
    (b'{"id": "\\ud800"}', InvalidInput("line 7", "", "the id is not valid Unicode (a lone surrogate)")),
    (b'{"id": "a8", "params": {"x": "\\udfff"}}', InvalidInput("line 7", "a8", "parameter 'x' is not valid Unicode (a lone surrogate)")),
    (b"[" * 1000 + b"]" * 1000, InvalidInput("line 7", "", "nested too deep")),
    (b'{"id": ' * 100_000, InvalidInput("line 7", "", "nested too deep")),
    (b"\xff\xfe{}", InvalidInput("line 7", "", "not JSON")),
    (b'{"id": "a9", "params": {"x": ' + b"9" * 5000 + b"}}", Work("a9", {"x": "9" * 5000}, where="line 7")),
    (b'{"id": "a10", "params": {"x": NaN}}', InvalidInput("line 7", "", "not JSON")),
    (b'{"id": "a11", "params": {"x": {"\\udfff": 1}}}', InvalidInput("line 7", "a11", "parameter 'x' is not valid Unicode (a lone surrogate)")),
    # A request's own endpoint and weight, which the profile then checks (``Endpoints``):
    (b'{"id": "e1", "method": "POST", "path": "/api/order", "weight": 4}',
     Work("e1", {}, where="line 7", method="POST", path="/api/order", weight=4)),
    (b'{"id": "e2", "path": "/api/order"}', Work("e2", {}, where="line 7", path="/api/order")),
    (b'{"id": "e3", "weight": 0}', InvalidInput("line 7", "e3", '"weight" is not a positive integer')),
    (b'{"id": "e4", "weight": true}', InvalidInput("line 7", "e4", '"weight" is not a positive integer')),
    (b'{"id": "e5", "weight": 2.0}', InvalidInput("line 7", "e5", '"weight" is not a positive integer')),
    (b'{"id": "e6", "weight": "2"}', InvalidInput("line 7", "e6", '"weight" is not a positive integer')),
    (b'{"id": "e7", "method": ""}', InvalidInput("line 7", "e7", '"method" is not a method name such as "POST"')),
    (b'{"id": "e8", "method": ["GET"]}', InvalidInput("line 7", "e8", '"method" is not a method name such as "POST"')),
    (b'{"id": "e9", "path": "api/order"}', InvalidInput("line 7", "e9", '"path" is not a path starting with /')),
    (b'{"id": "e10", "path": 5}', InvalidInput("line 7", "e10", '"path" is not a path starting with /')),
    (b'{"id": "b1", "params": {"x": "' + b"y" * MAX_LINE_BYTES + b'"}}', InvalidInput("line 7", "", f"longer than {MAX_LINE_BYTES} bytes")),
])
def test_each_line_is_read_against_the_request_format(line, expected):
    assert parse_line(line, "line 7") == expected


def test_duplicates_are_caught_exactly_on_disk(tmp_path):
    seen = SeenIds(tmp_path)
    assert seen.add("a") and seen.add("b") and not seen.add("a")
    assert len(list(tmp_path.iterdir())) == 1
    seen.close()
    assert list(tmp_path.iterdir()) == []  # the table goes with the run


def test_a_file_is_read_line_by_line_with_duplicates_and_a_last_line_without_newline(tmp_path):
    source_file = tmp_path / "in.jsonl"
    source_file.write_bytes(b'{"id": "a"}\n\n{"id": "b"}\n{"id": "a"}\n{"id": "c"}')
    items = list(JsonLinesSource(str(source_file), state_dir=str(tmp_path)).read(threading.Event()))
    assert items == [Work("a", where="line 1"), Work("b", where="line 3"), InvalidInput("line 4", "a", "duplicate id 'a'"),
                     Work("c", where="line 5")]


def test_a_stop_ends_the_reading():
    stop = threading.Event()
    stop.set()
    assert list(JsonLinesSource("/dev/null").read(stop)) == []


def test_a_stop_wakes_the_reading_of_an_idle_pipe_whose_writer_lives_on(tmp_path):
    # It stayed in readline() for good: the daemon named the producer as a thread that did not stop (exit 1).
    read_end, write_end = os.pipe()
    source = JsonLinesSource(f"/dev/fd/{read_end}", state_dir=str(tmp_path))
    stop = SelectableEvent()
    items: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [items.put(item) for item in source.read(stop)])
    try:
        reader.start()
        os.write(write_end, b'{"id": "a"}\n{"id": "b"}\n{"id": "c"')  # the last line is not whole yet
        assert [items.get(timeout=5), items.get(timeout=5)] == [Work("a", where="line 1"), Work("b", where="line 2")]
        stop.set()
        reader.join(5)
        assert not reader.is_alive() and items.empty()
    finally:
        os.close(write_end)
        reader.join(5)
        source.close()
        os.close(read_end)
        stop.close()


def test_a_pipe_is_read_to_its_end_in_pieces_of_any_size(tmp_path):
    lines = [b'{"id": "p%d"}' % n for n in range(2000)] + [b"x" * (MAX_LINE_BYTES + 10), b'{"id": "last"}']
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_end, b"\n".join(lines)), os.close(write_end)))
    source = JsonLinesSource(f"/dev/fd/{read_end}", state_dir=str(tmp_path))
    try:
        writer.start()
        items = list(source.read(SelectableEvent()))
    finally:
        writer.join(5)
        source.close()
        os.close(read_end)
    assert [item.id for item in items[:2000]] == [f"p{n}" for n in range(2000)]
    assert items[2000] == InvalidInput("line 2001", "", f"longer than {MAX_LINE_BYTES} bytes")
    assert items[2001] == Work("last", where="line 2002")  # a last line without its newline counts at the end


@pytest.mark.parametrize("outcome, detail, reason", [
    (FinalOutcome.RETRIES_EXHAUSTED, "timeout", "retries exhausted: timeout"),
    (FinalOutcome.INVALID_INPUT, "line 3: not JSON", "invalid input: line 3: not JSON"),
    (FinalOutcome.SHUTDOWN, "", "shutdown"),
])
def test_a_final_outcome_is_carried_as_a_value_and_worded_once(outcome, detail, reason):
    assert outcome.reason(detail) == reason


def test_a_result_record_keeps_the_answer_as_json_or_capped_text(tmp_path):
    path = tmp_path / "results.jsonl"
    results = Results(str(path), max_body_bytes=10)
    accepted = Request("a1", 0.0)
    accepted.note_attempt("UT4N...JYA6", 42, 200, b'{"ok": 1}')
    results.record(accepted, FinalOutcome.ACCEPTED)
    refused = Request("a2", 0.0)
    refused.note_attempt("UT4N...JYA6", 43, 400, b"<html>a long refusal</html>")
    results.record(refused, FinalOutcome.REJECTED, "a long refusal")
    results.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert (first["id"], first["outcome"], first["http_status"], first["body"]) == ("a1", "accepted", 200, {"ok": 1})
    assert (first["key"], first["nonce"], first["attempts"]) == ("UT4N...JYA6", 42, 1)
    assert second["body"] == "<html>a lo" and second["reason"] == "rejected: a long refusal"


def test_an_answer_nested_deeper_than_the_parser_goes_is_kept_as_text(tmp_path):
    path = tmp_path / "results.jsonl"
    results = Results(str(path), max_body_bytes=200_000)
    request = Request("deep", 0.0)
    request.note_attempt("UT4N...JYA6", 42, 503, b"[" * 100_000)
    results.record(request, FinalOutcome.RETRIES_EXHAUSTED, "503")
    results.close()
    (record,) = (json.loads(line) for line in path.read_text().splitlines())
    assert record["id"] == "deep" and record["body"] == "[" * 100_000


def test_a_final_record_serializes_on_any_thread_whatever_answer_it_holds():
    # A record is built on the worker that ended its request and may be serialized on another thread, deeper in
    # its stack (a stream's flush thread, the shutdown's report of unwritten records). An answer nested just
    # within the parser's reach on the first thread made json.dumps raise on the second: the record was lost.
    depths = range(900, 1000)
    records: list[dict] = []

    def build_each() -> None:
        for depth in depths:
            request = Request(f"d{depth}", 0.0)
            request.note_attempt("UT4N...JYA6", 42, 200, b"[" * depth + b"]" * depth)
            records.append(final_record(request, FinalOutcome.ACCEPTED, "", 4096))

    worker = threading.Thread(target=build_each)
    worker.start()
    worker.join(5.0)
    assert not worker.is_alive() and len(records) == len(depths)
    lines = [json.dumps(record) for record in records]  # the test's stack is far deeper than a fresh thread's
    assert [json.loads(line)["body"] for line in lines] == ["[" * depth + "]" * depth for depth in depths]


def test_a_line_longer_than_the_maximum_is_refused_in_bounded_memory_and_the_next_line_is_read(tmp_path):
    source_file = tmp_path / "in.jsonl"
    with source_file.open("wb") as out:
        out.write(b'{"id": "a"}\n{"id": "long", "params": {"x": "')
        out.write(b"y" * (3 * MAX_LINE_BYTES))
        out.write(b'"}}\n{"id": "b"}\n')
    source = JsonLinesSource(str(source_file), state_dir=str(tmp_path))
    items = list(source.read(threading.Event()))
    source.close()
    assert items == [Work("a", where="line 1"), InvalidInput("line 2", "", f"longer than {MAX_LINE_BYTES} bytes"),
                     Work("b", where="line 3")]


def test_a_second_read_goes_on_where_the_first_stopped(tmp_path):
    # A producer restarted after a crash calls read() again: it must not start over at line 1 (with a fresh
    # duplicate check, every line read so far would be sent again).
    source_file = tmp_path / "in.jsonl"
    source_file.write_bytes(b"".join(b'{"id": "r%d"}\n' % n for n in range(1, 6)))
    source = JsonLinesSource(str(source_file), state_dir=str(tmp_path))
    first = source.read(threading.Event())
    assert [next(first).id for _ in range(2)] == ["r1", "r2"]
    first.close()  # the producer died: its generator is dropped
    assert [item.id for item in source.read(threading.Event())] == ["r3", "r4", "r5"]
    source.close()


def test_a_duplicate_recorded_by_an_earlier_run_is_not_recorded_again(tmp_path):
    # The first "a" was left for the rerun (never sent); its duplicate on line 3 already has its record.
    source_file = tmp_path / "in.jsonl"
    source_file.write_bytes(b'{"id": "a"}\n{"id": "b"}\n{"id": "a"}\n{"id": "b"}\n')
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"id": "a", "where": "line 3", "outcome": "invalid_input"}) + "\n")
    resume = ResumePoint(str(results), tmp_path)
    source = JsonLinesSource(str(source_file), state_dir=str(tmp_path), resume=resume)
    try:
        items = list(source.read(threading.Event()))
    finally:
        source.close()
    assert items == [Work("a", {}, where="line 1"), Work("b", {}, where="line 2"),
                     InvalidInput("line 4", "b", "duplicate id 'b'")]


class SmallSeenIds(SeenIds):
    """An id table that meets SQLite's own full-disk error (SQLITE_FULL) at three pages, as a full state dir."""

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        super().__init__(folder)
        self._db.execute("PRAGMA max_page_count = 3")


def test_an_id_the_state_dir_cannot_take_in_is_refused_as_state_not_written(tmp_path):
    seen = SmallSeenIds(tmp_path)
    with pytest.raises(StateNotWritten, match="the ids taken in could not be written to the state dir"):
        for n in range(10_000):
            seen.add(f"id-{n:050}")
    seen.close()


def test_a_state_dir_that_refuses_an_id_stops_the_producer_with_the_line_in_hand_left_for_the_next_run(
        tmp_path, monkeypatch):
    # It used to kill the producer: restarted, it went on past the line in hand, and past the next one at each
    # death, until it gave up (a thread failure) or the input ended with lines this run never took in.
    monkeypatch.setattr(sources, "SeenIds", SmallSeenIds)
    source_file = tmp_path / "in.jsonl"
    source_file.write_text("".join(json.dumps({"id": f"id-{n:050}"}) + "\n" for n in range(1, 1001)))
    queues = QueueManager(Graveyard(None), queue_size=2000, keep_unsent=True)
    stops: list[tuple[str, str]] = []
    producer = Producer(queues, JsonLinesSource(str(source_file), state_dir=str(tmp_path)), SelectableEvent(),
                        on_stop=lambda reason, message: stops.append((reason, message)))
    producer.supervise(3, lambda thread: stops.append(("gave up", thread.name)))
    producer.start()
    producer.join(5.0)
    assert not producer.is_alive() and producer.restarts == 0 and producer.failure is None
    assert [reason for reason, _ in stops] == [StopReason.OUTPUT_FAILED]
    assert "the ids taken in could not be written to the state dir" in stops[0][1]
    taken_in = queues.counts().created
    assert 0 < taken_in < 1000 and queues.counts().graveyard == 0
    taken = [queues.take(timeout=0) for _ in range(taken_in)]
    assert [request.req_id for request in taken] == [f"id-{n:050}" for n in range(1, taken_in + 1)]  # none skipped


def test_id_tables_a_crashed_run_left_behind_are_removed_by_the_next(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"seen-ids-{int(dead.stdout)}-abc.sqlite"
    alive = tmp_path / f"seen-ids-{os.getpid()}-def.sqlite"  # another table of a process still running
    orphan.write_bytes(b"")
    alive.write_bytes(b"")
    seen = SeenIds(tmp_path)
    assert not orphan.exists() and alive.exists()
    seen.close()


def test_a_pipe_s_line_in_hand_when_the_state_dir_refuses_its_id_is_taken_in_not_dropped(tmp_path, monkeypatch):
    """A pipe cannot be read again: the line whose id the state dir refused is taken in all the same (the
    stop then records it with the rest), never dropped between the pipe and the queue."""
    monkeypatch.setattr(sources, "SeenIds", SmallSeenIds)
    lines = [json.dumps({"id": f"id-{n:050}"}).encode() + b"\n" for n in range(1, 1001)]
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_end, b"".join(lines)), os.close(write_end)))
    writer.start()
    queues = QueueManager(Graveyard(None), queue_size=2000, keep_unsent=False)
    stops: list[str] = []
    source = JsonLinesSource(f"/dev/fd/{read_end}", state_dir=str(tmp_path))
    producer = Producer(queues, source, SelectableEvent(), on_stop=lambda reason, message: stops.append(reason))
    producer.supervise(3, lambda thread: stops.append("gave up"))
    producer.start()
    producer.join(5.0)
    os.close(read_end)
    writer.join(5.0)
    assert not producer.is_alive() and producer.failure is None and stops == [StopReason.OUTPUT_FAILED]
    consumed = source._number  # every line the source took out of the pipe (read ahead ones too)
    assert queues.counts().created == consumed > 0, "lines read from the pipe and never taken in"


def test_at_a_stop_a_pipe_s_lines_read_ahead_and_a_line_cut_short_are_left_over_for_the_stop_to_record(tmp_path):
    """The pipe is read 64 KiB at a time: at a stop, the lines read and not given out yet were lost with no
    record (921 of 1000 lines in a review's run), and so was the start of a line whose end had not come."""
    read_end, write_end = os.pipe()
    source = JsonLinesSource(f"/dev/fd/{read_end}", state_dir=str(tmp_path))
    stop = SelectableEvent()
    try:
        os.write(write_end, b"".join(b'{"id": "p%d"}\n' % n for n in range(1, 101)) + b'\n{"id": "cut')
        reading = source.read(stop)
        assert next(reading) == Work("p1", where="line 1")
        stop.set()
        assert list(reading) == []
        left = list(source.left_over())
        assert left[:-1] == [Work(f"p{n}", where=f"line {n}") for n in range(2, 101)]  # the blank line 101 is none
        assert isinstance(left[-1], InvalidInput) and left[-1].where == "line 102" and "cut short" in left[-1].reason
        assert list(source.left_over()) == []  # given once
    finally:
        os.close(write_end)
        source.close()
        os.close(read_end)
        stop.close()


def test_a_file_leaves_nothing_over_at_a_stop_its_next_run_reads_it_again(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(b'{"id": "f%d"}\n' % n for n in range(1, 51)))
    source = JsonLinesSource(str(path), state_dir=str(tmp_path))
    stop = SelectableEvent()
    reading = source.read(stop)
    next(reading)
    stop.set()
    assert list(reading) == [] and list(source.left_over()) == []
    source.close()
    stop.close()


def test_a_named_pipe_no_writer_has_opened_yet_does_not_keep_a_stop_waiting(tmp_path):
    """open() of a FIFO waits for its writer: the producer stayed in it through a SIGTERM (exit 1, the producer
    named as a thread that did not stop). Now it waits in poll(), beside the stop; and reads once a writer comes."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    source = JsonLinesSource(str(fifo), state_dir=str(tmp_path))
    stop = SelectableEvent()
    items: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [items.put(item) for item in source.read(stop)])
    reader.start()
    with open(fifo, "wb") as writer:  # a writer comes: the reader gets its lines
        writer.write(b'{"id": "w1"}\n')
        writer.flush()
        assert items.get(timeout=5) == Work("w1", where="line 1")
        stop.set()
        reader.join(5)
    assert not reader.is_alive()
    source.close()
    stop.close()
    idle = JsonLinesSource(str(fifo), state_dir=str(tmp_path))
    stop = SelectableEvent()
    reader = threading.Thread(target=lambda: list(idle.read(stop)))
    reader.start()  # no writer ever: the stop alone must end the reading
    stop.set()
    reader.join(5)
    assert not reader.is_alive()
    idle.close()
    stop.close()


def test_a_client_id_repeated_in_one_run_is_invalid_input_and_one_not_a_string_too(tmp_path):
    """Two lines under one client id (its param apart from the id): the exchange refuses the second order, and a
    status ask would find the first's, so the second would read accepted. A client id of true or null names no
    order at all."""
    text = (ROOT / "examples" / "profiles" / "reference-orders.toml").read_text()
    profile = read_profile(text.replace('client_id = "req_id"', 'client_id = "clOrd"'), "orders.toml")
    endpoints = Endpoints(profile.request, profile.limits, profile.own_params)
    source_file = tmp_path / "in.jsonl"
    source_file.write_text('{"id": "a", "params": {"clOrd": "X"}}\n{"id": "b", "params": {"clOrd": "X"}}\n'
                           '{"id": "X"}\n{"id": "c", "params": {"clOrd": true}}\n{"id": "d", "params": {"clOrd": 7}}\n')
    source = JsonLinesSource(str(source_file), state_dir=str(tmp_path), admit=endpoints.admit,
                             client_id_param=endpoints.client_id_param)
    items = list(source.read(threading.Event()))
    source.close()
    assert [(item.id, type(item).__name__) for item in items] == [
        ("a", "Work"), ("b", "InvalidInput"), ("X", "InvalidInput"), ("c", "InvalidInput"), ("d", "Work")]
    assert items[1].reason == "client id 'X' of an earlier line" and "must be a string" in items[3].reason
