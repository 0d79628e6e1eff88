"""The user's own requests: from a file, a pipe or a growing file, one final record each, params sent as asked."""

from __future__ import annotations

import collections
import json
import random
import shutil
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import KEYS, ROOT, read_summary, run_client, wait_for
from thread_client import defaults
from tools.harness.client_process import STATE_DIR, client_command


def write_requests(path, count: int, extra: list[str] = ()) -> list[str]:
    lines = [json.dumps({"id": f"order-{n}", "params": {"amount": n, "side": "buy"}}) for n in range(1, count + 1)]
    lines += list(extra)
    path.write_text("\n".join(lines) + "\n")
    return lines


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_file_of_requests_ends_by_itself_with_one_record_per_line(fast_server, tmp_path):
    source = tmp_path / "in.jsonl"
    lines = write_requests(source, 150, ["not json", json.dumps({"id": "order-3"}),
                                         json.dumps({"id": "bad", "params": {"req_id": 1}})])
    result, summary = run_client(fast_server, tmp_path, "--source", str(source), "--duration", "120")
    assert result.returncode == 0, result.stdout
    assert summary["stop_reason"].startswith("input done") and summary["identity_holds"]
    results = records(tmp_path / "results.jsonl")
    assert len(results) == len(lines)
    by_outcome = {}
    for record in results:
        by_outcome.setdefault(record["outcome"], []).append(record)
    assert len(by_outcome["accepted"]) == 150 and len(by_outcome["invalid_input"]) == 3
    assert {r["where"] for r in by_outcome["invalid_input"]} == {"line 151", "line 152", "line 153"}
    at_server = fast_server.accepted()
    assert set(at_server) == {r["id"] for r in by_outcome["accepted"]} and set(at_server.values()) == {1}
    accepted = by_outcome["accepted"][0]
    assert accepted["http_status"] == 200 and accepted["body"]["status"] == "OK" and accepted["key"].count("...") == 1


def test_any_odd_line_is_one_invalid_input_record_and_a_rerun_records_it_no_more(fast_server, tmp_path):
    # Each of these used to raise out of the reading (a lone surrogate in the on-disk duplicate check, the
    # parser's recursion limit), so the file stopped at that line, and every rerun stopped there again.
    source = tmp_path / "in.jsonl"
    odd = [b'{"id": "\\ud800"}', b"[" * 1000, b'{"id": "x", "params": {"p": "\\udc00"}}', b"\xff\xfe\x00",
           b'{"id": "order-7"}']  # the last: a duplicate of an id read before
    lines = [json.dumps({"id": f"order-{n}"}).encode() for n in range(1, 301)]
    lines[150:150] = odd  # lines 151 to 155
    source.write_bytes(b"\n".join(lines) + b"\n")
    result, summary = run_client(fast_server, tmp_path, "--source", str(source), "--duration", "120")
    assert result.returncode == 0, result.stdout
    assert summary["stop_reason"].startswith("input done") and "Traceback" not in result.stdout + result.stderr
    first = records(tmp_path / "results.jsonl")
    assert len(first) == 305 and collections.Counter(r["outcome"] for r in first) == {"accepted": 300, "invalid_input": 5}
    assert {r["where"] for r in first if r["outcome"] == "invalid_input"} == {f"line {n}" for n in range(151, 156)}
    again = tmp_path / "again"
    again.mkdir()
    rerun, _ = run_client(fast_server, again, "--source", str(source), "--results", str(tmp_path / "results.jsonl"),
                          "--duration", "60")
    assert rerun.returncode == 0, rerun.stdout
    assert records(tmp_path / "results.jsonl") == first  # nothing recorded twice, not even the odd lines
    assert set(fast_server.accepted().values()) == {1}


def test_a_pipe_in_and_results_on_standard_output(fast_server, tmp_path):
    lines = write_requests(tmp_path / "in.jsonl", 40)
    command = client_command(fast_server.url, tmp_path, "--source", "-", "--results", "-", "--duration", "60")
    result = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    out = [json.loads(line) for line in result.stdout.splitlines()]  # nothing but records on stdout
    assert len(out) == 40 and {r["outcome"] for r in out} == {"accepted"}
    assert "summary" in result.stderr and "accepted 40" in result.stderr


class Recorder(BaseHTTPRequestHandler):
    """An exchange that accepts everything and remembers each request's fields, from the query and the body
    (a form's, or a JSON object's)."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        fields = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        body = self.rfile.read(length).decode() if length else ""
        if self.headers.get("Content-Type") == "application/json":
            fields.update({f"body:{k}": v for k, v in json.loads(body).items()})
        else:
            fields.update({f"body:{k}": v[0] for k, v in parse_qs(body).items()})
        Recorder.seen.append(fields)
        answer = json.dumps({"status": "OK", "req_id": fields.get("req_id")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.slow
def test_params_travel_in_the_query_a_form_body_or_a_json_body(tmp_path):
    source = tmp_path / "in.jsonl"
    write_requests(source, 3)
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS[0] + "\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for mode, prefix in (("query", ""), ("form", "body:"), ("json", "body:")):
            Recorder.seen = []
            run_dir = tmp_path / mode
            run_dir.mkdir()
            command = client_command(url, run_dir, "--source", str(source), "--keys-file", str(keys),
                                     "--params-in", mode, "--duration", "30")
            result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
            assert result.returncode == 0, result.stdout
            sent = {fields["req_id"]: fields for fields in Recorder.seen}
            assert set(sent) == {"order-1", "order-2", "order-3"}
            amount = 2 if mode == "json" else "2"  # a JSON body keeps the line's number a number
            assert sent["order-2"][f"{prefix}amount"] == amount and sent["order-2"][f"{prefix}side"] == "buy"
            assert sent["order-2"]["api_key"] == KEYS[0] and sent["order-2"]["nonce"].isdigit()
    finally:
        server.shutdown()
        server.server_close()


def test_follow_keeps_reading_a_growing_file(fast_server, client_process, tmp_path):
    source = tmp_path / "in.jsonl"
    write_requests(source, 10)
    client = client_process(fast_server, tmp_path, "--source", str(source), "--follow")
    results = tmp_path / "results.jsonl"
    wait_for(lambda: len(records(results)) == 10)
    with source.open("a") as more:
        more.write("".join(json.dumps({"id": f"late-{n}"}) + "\n" for n in range(5)))
    wait_for(lambda: len(records(results)) == 15)
    client.send_signal(signal.SIGTERM)
    out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    assert {r["outcome"] for r in records(results)} == {"accepted"}


def crash_three_times(server, client_process, tmp_path, source, *args: str) -> None:
    """SIGKILL the client three times at random moments of the load, each time after it made progress."""
    results = tmp_path / "results.jsonl"
    rng = random.Random(11)
    for crash in range(3):
        client = client_process(server, tmp_path, "--source", str(source), "--load", "saturate", *args)
        before = len(records(results))
        wait_for(lambda: len(records(results)) > before + 20)
        time.sleep(rng.uniform(0.2, 1.5))  # the crash lands at a random moment of the load
        client.kill()
        client.communicate(timeout=30)


@pytest.mark.slow
def test_sigkill_and_restart_three_times_leave_exactly_one_record_per_id(start_server, client_process, tmp_path):
    server = start_server("--seed", "11")  # default latencies: a few requests are always on the wire at a kill
    source = tmp_path / "in.jsonl"
    write_requests(source, 700)
    crash_three_times(server, client_process, tmp_path, source)
    final, summary = run_client(server, tmp_path, "--source", str(source), "--duration", "120")
    assert final.returncode == 0, final.stdout
    results = records(tmp_path / "results.jsonl")
    ids = collections.Counter(record["id"] for record in results)
    assert set(ids) == {f"order-{n}" for n in range(1, 701)} and set(ids.values()) == {1}
    # The kills hit requests in flight: each one the exchange accepted twice says so in its record.
    resumed = {record["id"] for record in results if record["resumed_after_crash"]}
    twice = {req_id for req_id, count in server.accepted().items() if count > 1}
    assert resumed and twice <= resumed
    # Only what was on the wire or waiting out a retry at a kill: a request per worker thread, three kills.
    assert len(resumed) <= 3 * len(KEYS) * defaults.THREADS_PER_KEY
    assert {record["outcome"] for record in results} == {"accepted"}


@pytest.mark.slow
def test_exactly_once_sigkill_and_restart_three_times_accept_nothing_twice(start_server, client_process, tmp_path):
    # Slow answers: when a kill lands, most keys have a send on the wire, often accepted and not yet answered.
    server = start_server("--max-latency-ms", "200", "--seed", "11")
    source = tmp_path / "in.jsonl"
    write_requests(source, 300)
    crash_three_times(server, client_process, tmp_path, source, "--delivery", "exactly-once")
    final, summary = run_client(server, tmp_path, "--source", str(source), "--delivery", "exactly-once",
                                "--duration", "120")
    assert final.returncode == 0, final.stdout
    results = records(tmp_path / "results.jsonl")
    ids = collections.Counter(record["id"] for record in results)
    assert set(ids) == {f"order-{n}" for n in range(1, 301)} and set(ids.values()) == {1}
    assert {record["outcome"] for record in results} == {"accepted"}
    assert server.stats()["totals"]["duplicate_accepts"] == 0
    assert set(server.accepted().values()) == {1}
    assert set(server.accepted()) == set(ids)  # no record says accepted where the exchange accepted nothing
    # Some of the kills caught a send the exchange had accepted but not yet answered: the restart learnt
    # its fate from the 400 its own nonce drew, instead of sending it again under a new one.
    settled_by_earlier_copy = [r for r in results if r["resumed_after_crash"] and r["http_status"] == 400]
    assert settled_by_earlier_copy and all(r["ambiguous_attempts"] >= 1 for r in settled_by_earlier_copy)


@pytest.mark.slow
def test_exactly_once_after_a_crash_and_a_lost_state_dir_the_sends_on_the_wire_end_unknown_not_settled(
        start_server, client_process, tmp_path):
    """The state dir (nonce marks, host locks) gone between the crash and the restart: another process may
    have sent on the keys since, so a 400 to a journaled nonce no longer proves it accepted."""
    server = start_server("--max-latency-ms", "300", "--seed", "3")  # every key has a send on the wire at the kill
    source = tmp_path / "in.jsonl"
    write_requests(source, 200)
    client = client_process(server, tmp_path, "--source", str(source), "--delivery", "exactly-once")
    wait_for(lambda: len(records(tmp_path / "results.jsonl")) >= 20)
    client.kill()
    client.communicate(timeout=30)
    shutil.rmtree(tmp_path / STATE_DIR)
    final, summary = run_client(server, tmp_path, "--source", str(source), "--delivery", "exactly-once",
                                "--duration", "120")
    assert final.returncode == 0, final.stdout
    results = records(tmp_path / "results.jsonl")
    unknown = [r for r in results if r["outcome"] == "unknown"]
    assert unknown and all(r["reason"].endswith("the state dir has no record of it") for r in unknown)
    assert not [r for r in results if r["resumed_after_crash"] and r["http_status"] == 400]
    assert server.stats()["totals"]["duplicate_accepts"] == 0


@pytest.mark.slow
def test_sigterm_leaves_unsent_requests_for_the_next_run_not_buried(start_server, client_process, tmp_path):
    server = start_server("--max-latency-ms", "5")
    source = tmp_path / "in.jsonl"
    write_requests(source, 500)
    results = tmp_path / "results.jsonl"
    client = client_process(server, tmp_path, "--source", str(source), "--load", "saturate")
    wait_for(lambda: len(records(results)) >= 100)
    client.send_signal(signal.SIGTERM)
    out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    first = read_summary(tmp_path)
    assert first["identity_holds"] and first["left_for_next_run"] > 0 and "the next run" in out
    assert {record["outcome"] for record in records(results)} == {"accepted"}  # nothing buried as "shutdown"
    again = tmp_path / "again"
    again.mkdir()
    final, _ = run_client(server, again, "--source", str(source), "--results", str(results), "--duration", "60")
    assert final.returncode == 0, final.stdout
    ids = collections.Counter(record["id"] for record in records(results))
    assert set(ids) == {f"order-{n}" for n in range(1, 501)} and set(ids.values()) == {1}


@pytest.mark.slow
def test_work_not_sent_because_every_key_was_parked_is_left_for_the_rerun_not_buried(start_server, tmp_path):
    # The client believes in 20 per second, the server allows 7: every key strikes out and is parked by the
    # client's own decision. What was never sent must not get a final record, or the rerun would skip it.
    strict = start_server("--max-latency-ms", "2", "--rate", "7")
    source = tmp_path / "in.jsonl"
    write_requests(source, 1000)
    results = tmp_path / "results.jsonl"
    result, summary = run_client(strict, tmp_path, "--source", str(source), "--load", "saturate", "--duration", "60")
    assert result.returncode == 3, result.stdout  # every key retired
    assert summary["retired_keys"] and set(summary["retired_keys"].values()) == {"parked"}
    assert summary["identity_holds"] and summary["left_for_next_run"] > 0
    first = records(results)
    assert "key_blocked" not in {record["outcome"] for record in first}
    assert "left for the next run" in result.stdout
    fixed = start_server("--max-latency-ms", "2")  # the cause fixed: an exchange that allows what the client sends
    again = tmp_path / "again"
    again.mkdir()
    final, _ = run_client(fixed, again, "--source", str(source), "--results", str(results), "--duration", "120",
                          timeout=150)
    assert final.returncode == 0, final.stdout
    ids = collections.Counter(record["id"] for record in records(results))
    assert set(ids) == {f"order-{n}" for n in range(1, 1001)} and set(ids.values()) == {1}
    assert fixed.stats()["totals"]["accepted"] + strict.stats()["totals"]["accepted"] == sum(
        1 for record in records(results) if record["outcome"] == "accepted")


def stop_mid_run(command: list[str], server, lines: list[str], tmp_path, stdin_file=None) -> int:
    """Run ``command``, its input ``lines`` on a pipe left open (or ``stdin_file``), SIGTERM it once the
    server accepted 50 (the main queue still full), and return its exit code; its output in out.txt and err.txt."""
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        client = subprocess.Popen(command, stdin=stdin_file or subprocess.PIPE, stdout=out, stderr=err, text=True,
                                  cwd=ROOT)
    try:
        if stdin_file is None:
            client.stdin.write("".join(f"{line}\n" for line in lines))  # within the pipe's buffer: no wait
            client.stdin.flush()
        wait_for(lambda: server.stats()["totals"]["accepted"] >= 50)
        client.send_signal(signal.SIGTERM)
        return client.wait(timeout=30)
    finally:
        if client.stdin is not None:
            client.stdin.close()
        client.kill()


@pytest.mark.parametrize("pipe", ["-", "/dev/stdin"])
def test_sigterm_with_a_pipe_in_records_every_line_read_in_the_default_results_file(fast_server, tmp_path, pipe):
    """A pipe cannot be read again: what was read and not sent is recorded at the stop as ``shutdown``. It got
    no record, and the summary left it "for the next run", which could never read it again."""
    lines = [json.dumps({"id": f"p-{n}"}) for n in range(1, 1001)]
    returncode = stop_mid_run(client_command(fast_server.url, tmp_path, "--source", pipe), fast_server, lines, tmp_path)
    assert returncode == 0, (tmp_path / "err.txt").read_text()
    summary = read_summary(tmp_path)
    by_id = collections.Counter(record["id"] for record in records(tmp_path / "results.jsonl"))
    assert summary["identity_holds"] and summary["left_for_next_run"] == 0
    # Every line written went into the pipe's buffer, and so was read (some read ahead): each has its record.
    assert len(by_id) == summary["created"] == len(lines) and set(by_id.values()) == {1}
    outcomes = collections.Counter(record["outcome"] for record in records(tmp_path / "results.jsonl"))
    assert outcomes["shutdown"] > 0 and outcomes["accepted"] == fast_server.stats()["totals"]["accepted"]
    assert "next run" not in (tmp_path / "out.txt").read_text()


def test_sigterm_with_a_file_as_standard_input_leaves_what_was_not_sent_for_the_next_run(fast_server, tmp_path):
    # "- < FILE" is a file: the same command reads it again, and the results file says what is done.
    source = tmp_path / "in.jsonl"
    write_requests(source, 1000)
    with source.open() as stdin_file:
        returncode = stop_mid_run(client_command(fast_server.url, tmp_path, "--source", "-"), fast_server, [], tmp_path,
                                  stdin_file)
    assert returncode == 0, (tmp_path / "err.txt").read_text()
    summary = read_summary(tmp_path)
    assert summary["identity_holds"] and summary["left_for_next_run"] > 0
    assert len(records(tmp_path / "results.jsonl")) == summary["created"] - summary["left_for_next_run"]
    assert "left for the next run" in (tmp_path / "out.txt").read_text()


def test_a_wrong_endpoint_records_every_line_a_pipe_gave_instead_of_leaving_it_for_a_next_run(fast_server, tmp_path):
    lines = "".join(json.dumps({"id": f"p-{n}"}) + "\n" for n in range(1, 201))
    command = client_command(f"{fast_server.url}/v2", tmp_path, "--source", "-", "--duration", "60")
    result = subprocess.run(command, input=lines, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2, result.stdout
    summary = read_summary(tmp_path)
    results = records(tmp_path / "results.jsonl")
    assert summary["identity_holds"] and summary["left_for_next_run"] == 0 and summary["created"] == 200
    assert len({record["id"] for record in results}) == len(results) == summary["created"]
    assert {record["reason"] for record in results} == {"shutdown: endpoint not found"}
    assert "next run" not in result.stdout


def test_sigterm_with_a_file_in_and_results_on_stdout_records_every_line_read(fast_server, tmp_path):
    """A file can be read again, but with the records on standard output a next run has nothing to resume
    from (it would send every line again): what was read and not sent is recorded as ``shutdown``."""
    source = tmp_path / "in.jsonl"
    write_requests(source, 1000)
    with source.open() as stdin_file:  # not read: the input is the file
        returncode = stop_mid_run(client_command(fast_server.url, tmp_path, "--source", str(source), "--results", "-"),
                                  fast_server, [], tmp_path, stdin_file)
    assert returncode == 0, (tmp_path / "err.txt").read_text()
    summary = read_summary(tmp_path)
    out = records(tmp_path / "out.txt")
    by_id = collections.Counter(record["id"] for record in out)
    assert summary["identity_holds"] and summary["left_for_next_run"] == 0
    assert len(by_id) == summary["created"] < 1000 and set(by_id.values()) == {1}
    assert collections.Counter(record["outcome"] for record in out)["shutdown"] > 0
    assert "next run" not in (tmp_path / "err.txt").read_text()


def test_sigterm_with_an_idle_live_pipe_in_exits_0_with_one_record_per_line(fast_server, tmp_path):
    """The writer keeps the pipe open and writes nothing more: the producer waits on the pipe, and the stop
    must wake it there (it stayed in its read, named as a thread that did not stop: exit 1)."""
    lines = [json.dumps({"id": f"p-{n}"}) for n in range(1, 6)]
    command = client_command(fast_server.url, tmp_path, "--source", "-", "--results", "-")
    with open(tmp_path / "out.jsonl", "w") as out, open(tmp_path / "err.log", "w") as err:
        client = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True, cwd=ROOT)
    try:
        client.stdin.write("".join(f"{line}\n" for line in lines))
        client.stdin.flush()
        wait_for(lambda: fast_server.stats()["totals"]["accepted"] == len(lines))  # all read: the pipe is idle
        client.send_signal(signal.SIGTERM)
        returncode = client.wait(timeout=30)  # the pipe stays open meanwhile
    finally:
        client.stdin.close()
        client.kill()
    assert returncode == 0, (tmp_path / "err.log").read_text()
    summary = read_summary(tmp_path)
    assert summary["threads_alive"] == [] and summary["identity_holds"]
    by_id = collections.Counter(record["id"] for record in records(tmp_path / "out.jsonl"))
    assert by_id == {f"p-{n}": 1 for n in range(1, 6)}


def test_sigterm_with_a_live_pipe_in_exits_0_with_one_record_per_request_taken_in(fast_server, tmp_path):
    """The pipe stays open (its writer lives on): the stop must not wait for its end, and what was taken in
    and not sent is recorded as ``shutdown`` on standard output (a pipe cannot be read again by a rerun)."""
    command = client_command(fast_server.url, tmp_path, "--source", "-", "--results", "-")
    client = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT)
    client.stdin.write("".join(json.dumps({"id": f"p-{n}"}) + "\n" for n in range(1, 301)))
    client.stdin.flush()
    wait_for(lambda: fast_server.stats()["totals"]["accepted"] >= 100)
    client.send_signal(signal.SIGTERM)
    out, err = client.communicate(timeout=30)
    assert client.returncode == 0, err
    summary = read_summary(tmp_path)
    by_id = collections.Counter(json.loads(line)["id"] for line in out.splitlines())
    assert summary["identity_holds"] and len(by_id) == summary["created"] and set(by_id.values()) == {1}
    assert summary["accepted"] == fast_server.stats()["totals"]["accepted"] >= 100


TWO_ENDPOINTS = """
name = "two-endpoints"

[request]
endpoints = ["POST /api/order"]

[[limit]]
name = "request weight"
algorithm = "rolling-window"
limit = 20
period_ms = 1000
cost = { "GET /api/request" = 1, "POST /api/order" = 4 }
"""


@pytest.mark.slow
def test_one_file_mixes_endpoints_of_different_cost_and_nothing_is_refused(start_server, tmp_path):
    """The server counts an order as 4 of a key's 20 per second, a usual request as 1; the profile says the
    same, so the client paces each at its own cost: every request accepted where it was sent, no 429."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--weights", "/api/order=4", "--ledger", str(ledger))
    profile = tmp_path / "two-endpoints.toml"
    profile.write_text(TWO_ENDPOINTS)
    lines = [{"id": f"r-{n}", "params": {"n": n}} if n % 2 else
             {"id": f"o-{n}", "method": "POST", "path": "/api/order", "params": {"n": n}} for n in range(1, 201)]
    lines.append({"id": "elsewhere", "method": "DELETE", "path": "/api/order"})
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result, summary = run_client(server, tmp_path, "--profile", str(profile), "--source", str(source),
                                 "--duration", "120", timeout=150)
    assert result.returncode == 0, result.stdout
    assert summary["stop_reason"].startswith("input done") and summary["identity_holds"]
    by_id = {record["id"]: record for record in records(tmp_path / "results.jsonl")}
    assert len(by_id) == 201
    refused = by_id.pop("elsewhere")
    assert refused["outcome"] == "invalid_input" and "'DELETE /api/order' is not an endpoint" in refused["reason"]
    assert {record["outcome"] for record in by_id.values()} == {"accepted"}
    assert all(record["body"]["req_id"] == request_id for request_id, record in by_id.items())
    totals = server.stats()["totals"]
    assert totals["accepted"] == 200 and totals["rate_limited"] == totals["blocked"] == 0
    costs = {entry["id"]: entry.get("cost", 1) for entry in map(json.loads, ledger.read_text().splitlines())
             if entry["verdict"] == "accepted"}
    assert costs == {request_id: 4 if request_id.startswith("o-") else 1 for request_id in by_id}
