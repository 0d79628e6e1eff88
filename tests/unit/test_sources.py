"""The user's requests in (JSON lines: validated, duplicates caught on disk) and their final records out."""

from __future__ import annotations

import json
import threading

import pytest

from thread_client.request import Request
from thread_client.io.results import Results
from thread_client.io.seen_ids import SeenIds
from thread_client.io.sources import JsonLinesSource
from thread_client.request import FinalOutcome, InvalidInput, Work, parse_line


@pytest.mark.parametrize("line, expected", [
    (b'{"id": "a1", "params": {"amount": 5, "side": "buy", "px": 1.5, "post": true}}',
     Work("a1", {"amount": "5", "side": "buy", "px": "1.5", "post": "true"})),
    (b'{"id": "a2"}', Work("a2", {})),
    (b"not json", InvalidInput("line 7", "", "not JSON")),
    (b"[1, 2]", InvalidInput("line 7", "", "not a JSON object")),
    (b'{"params": {}}', InvalidInput("line 7", "", 'no "id" string of 1 to 256 characters')),
    (b'{"id": 12}', InvalidInput("line 7", "", 'no "id" string of 1 to 256 characters')),
    (b'{"id": "a3", "param": {}}', InvalidInput("line 7", "a3", "unknown field(s) param")),
    (b'{"id": "a4", "params": [1]}', InvalidInput("line 7", "a4", '"params" is not an object')),
    (b'{"id": "a5", "params": {"nonce": 1, "api_key": "k"}}', InvalidInput("line 7", "a5", "reserved parameter name(s) api_key, nonce")),
    (b'{"id": "a6", "params": {"x": null}}', InvalidInput("line 7", "a6", "parameter 'x' is not a string, number or boolean")),
    (b'{"id": "a7", "params": {"x": {"y": 1}}}', InvalidInput("line 7", "a7", "parameter 'x' is not a string, number or boolean")),
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
    assert items == [Work("a"), Work("b"), InvalidInput("line 4", "a", "duplicate id 'a'"), Work("c")]


def test_a_stop_ends_the_reading():
    stop = threading.Event()
    stop.set()
    assert list(JsonLinesSource("/dev/null").read(stop)) == []


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
