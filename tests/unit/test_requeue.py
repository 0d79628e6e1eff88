"""``thread-client requeue``: a results file's dead letters (the last record of each id, by outcome) written as
input lines again, each with its request as it was sent (from the send journal, or the input for one never sent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from thread_client import cli
from thread_client.io.results import Results
from thread_client.io.resume import SendJournal
from thread_client.profile import load_profile
from thread_client.profile.endpoints import Endpoints
from thread_client.request import FinalOutcome, Request, Work, parse_line, read_json
from thread_client.requeue import original_requests


def request(req_id: str, **fields) -> Request:
    return Request(req_id, created_at=0.0, **fields)


B = request("b", params=read_json('{"price": 0.00001, "side": "buy"}'), method="POST", path="/api/order", weight=3)
C = request("c", params={"n": "3"})
E = request("e", params={"n": "5"})


@pytest.fixture
def run(tmp_path) -> Path:
    """A run's results file and send journal, as the daemon writes them: a accepted; b retries exhausted; c
    rejected; d exhausted, then accepted by a later run; e accepted, then exhausted by a later one; f never sent."""
    path = tmp_path / "results.jsonl"
    results, journal = Results(str(path)), SendJournal(str(path))
    for sent in (request("a"), B, C, request("d"), E):
        journal.sending(sent, "key-1", 100)
    journal.answered(B, "key-1", 100)  # no params on an answered line: the send's line is the one read
    for done, outcome in ((request("a"), "ACCEPTED"), (B, "RETRIES_EXHAUSTED"), (C, "REJECTED"),
                          (request("d"), "RETRIES_EXHAUSTED"), (E, "ACCEPTED"), (request("d"), "ACCEPTED"),
                          (E, "RETRIES_EXHAUSTED"), (request("f"), "SHUTDOWN")):
        results.record(done, FinalOutcome[outcome])
    results.close()
    journal.close()
    return path


def requeue(*argv: str) -> int:
    return cli.main(["requeue", *argv])


def read_lines(path: Path) -> list[Work]:
    return [parse_line(line, "") for line in path.read_text().splitlines()]


def test_each_dead_letter_s_last_record_is_written_again_as_it_was_sent(run, tmp_path, capsys):
    out = tmp_path / "again.jsonl"
    assert requeue(str(run), "--outcome", "retries_exhausted,rejected", "--to", str(out)) == 0
    assert [(w.id, w.params, w.method, w.path, w.weight) for w in read_lines(out)] == [
        ("b", B.params, "POST", "/api/order", 3), ("c", {"n": "3"}, "", "", 1), ("e", {"n": "5"}, "", "", 1)]
    assert '"price":0.00001' in out.read_text()  # the number as the input wrote it
    assert capsys.readouterr().out == f"requeued 3 of 3 dead letters to {out}\n"


def test_the_outcome_filters_and_standard_output_takes_the_lines_alone(run, capsys):
    assert requeue(str(run), "--outcome", "rejected", "--to", "-") == 0
    out, err = capsys.readouterr()
    assert out == '{"id":"c","params":{"n":"3"}}\n'
    assert err == "requeued 1 of 1 dead letters to standard output\n"


def test_one_never_sent_is_found_in_the_input_and_else_named(run, tmp_path, capsys):
    assert requeue(str(run), "--outcome", "shutdown", "--to", "-") == 1
    out, err = capsys.readouterr()
    assert out == "" and f"not found: 'f' is in neither {run}.sent nor an --input file" in err
    assert err.endswith("requeued 0 of 1 dead letters to standard output; 1 not found\n")
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "e", "params": {"n": "changed"}}\n{"id": "f", "params": {"q": 1}}\n')
    assert requeue(str(run), "--outcome", "shutdown,retries_exhausted", "--input", str(source), "--to", "-") == 0
    # e from the journal (what was sent), f from the input (never sent)
    assert capsys.readouterr().out == ('{"id":"b","params":{"price":0.00001,"side":"buy"},"method":"POST",'
                                       '"path":"/api/order","weight":3}\n{"id":"e","params":{"n":"5"}}\n'
                                       '{"id":"f","params":{"q":1}}\n')


@pytest.mark.parametrize("outcomes, message", [
    ("accepted", "argument --outcome: accepted: it is no dead letter"),
    ("invalid_input", "argument --outcome: invalid_input: a line that is no request is fixed in the input"),
    ("retries_exhausted,bogus", "argument --outcome: no outcome 'bogus' (requeue takes rejected, retries_exhausted, "
                                "key_blocked, shutdown, unknown, duplicate)"),
    (",", "argument --outcome: name at least one outcome"),
])
def test_a_bad_outcome_is_refused_by_name_in_one_line(run, outcomes, message, capsys):
    with pytest.raises(SystemExit) as exited:
        requeue(str(run), "--outcome", outcomes, "--to", "-")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and err.startswith(f"thread-client requeue: error: {message}")


def test_an_existing_file_is_never_written_over_and_a_missing_results_file_is_named(run, tmp_path, capsys):
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    for argv, message in (([str(run), "--to", str(taken)], f"--to {taken}: File exists"),
                          ([str(tmp_path / "none.jsonl"), "--to", "-"], f"error: {tmp_path}/none.jsonl: no such file")):
        with pytest.raises(SystemExit) as exited:
            requeue(*argv, "--outcome", "rejected")
        assert exited.value.code == 2 and message in capsys.readouterr().err
    assert taken.read_text() == "mine\n"


@pytest.mark.parametrize("outcome", ["unknown", "duplicate", "rejected,unknown"])
def test_an_outcome_whose_order_may_be_placed_already_is_requeued_only_with_may_double(run, tmp_path, outcome, capsys):
    """Under exactly-once without [settle], an ``unknown`` sent again is a blind resend: two orders, maybe."""
    results = tmp_path / "risky.jsonl"
    results.write_text('{"id": "u", "outcome": "unknown"}\n{"id": "v", "outcome": "duplicate"}\n'
                       '{"id": "c", "outcome": "rejected"}\n')
    (tmp_path / "risky.jsonl.sent").write_text(run.with_name("results.jsonl.sent").read_text()
                                               + '{"id": "u", "key": "k", "nonce": 1, "params": {"n": "u"}}\n'
                                               + '{"id": "v", "key": "k", "nonce": 2, "params": {"n": "v"}}\n')
    with pytest.raises(SystemExit) as exited:
        requeue(str(results), "--outcome", outcome, "--to", "-")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "placed twice" in err and "--may-double" in err
    assert requeue(str(results), "--outcome", outcome, "--may-double", "--to", "-") == 0
    assert len(capsys.readouterr().out.splitlines()) == len(outcome.split(","))



def test_a_line_never_sent_is_read_through_the_profile_s_checks_before_it_is_requeued(tmp_path):
    """A request never sent is found in the run's input; in the daemon (the console's requeue) it goes straight to
    the queue, so its line must pass the checks every input line passes (the profile's own parameter names, its
    endpoints), or a nonce the line names would be sent beside the profile's own (found by a review)."""
    profile = load_profile()
    admit = Endpoints(profile.request, (), profile.own_params).admit
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "params": {"nonce": 5}}\n{"id": "b", "params": {"q": 1}}\n')
    found = original_requests({"a", "b"}, tmp_path / "none.sent", source, admit=admit)
    assert set(found) == {"b"}


KEY_ID = "0123456789abcdef"  # a key's id, as the send journal names it


@pytest.fixture
def timed_out(tmp_path) -> Path:
    """A run whose order t went out and got no answer (its retries spent), and whose order r was refused."""
    path = tmp_path / "results.jsonl"
    results, journal = Results(str(path)), SendJournal(str(path))
    unanswered, refused = request("t", params={"qty": "1"}, ambiguous=1), request("r", params={"qty": "2"})
    for sent in (unanswered, refused):
        journal.sending(sent, KEY_ID, 100)
    results.record(unanswered, FinalOutcome.RETRIES_EXHAUSTED)
    results.record(refused, FinalOutcome.REJECTED)
    results.close()
    journal.close()
    return path


def test_a_dead_letter_whose_order_may_be_placed_is_refused_where_the_profile_cannot_ask(timed_out, tmp_path, capsys):
    """Sent again blindly, an order whose attempt went unanswered may be placed twice: the reference profile has
    no [settle], so only the refused order is requeued, and the other is named on stderr (exit 1)."""
    out = tmp_path / "again.jsonl"
    assert requeue(str(timed_out), "--outcome", "retries_exhausted,rejected", "--to", str(out)) == 1
    assert [item.id for item in read_lines(out)] == ["r"]
    err = capsys.readouterr().err
    assert "1 dead letters not requeued ('t')" in err and "--may-double" in err and "[settle]" in err


def test_a_dead_letter_whose_order_may_be_placed_is_requeued_to_be_asked_about_first_where_the_profile_can(
        timed_out, tmp_path):
    out = tmp_path / "again.jsonl"
    assert requeue(str(timed_out), "--outcome", "retries_exhausted,rejected", "--to", str(out),
                   "--profile", str(ROOT / "examples" / "profiles" / "reference-orders.toml")) == 0
    lines = {item.id: item for item in read_lines(out)}
    assert (lines["t"].resumed, lines["t"].sent_on) == (True, KEY_ID)  # asked about first, in that key's account
    assert (lines["r"].resumed, lines["r"].sent_on) == (False, "")


def test_may_double_sends_a_dead_letter_in_doubt_again_as_it_was(timed_out, tmp_path):
    out = tmp_path / "again.jsonl"
    assert requeue(str(timed_out), "--outcome", "retries_exhausted", "--to", str(out), "--may-double") == 0
    assert [(item.id, item.resumed) for item in read_lines(out)] == [("t", False)]
