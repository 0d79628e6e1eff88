"""The reference server follows the exchange contract rule by rule."""

from __future__ import annotations

import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import pytest
import requests

from fractions import Fraction

from conftest import KEY, KEYS, ROOT, FakeClock
import original_server
from original_server import MSG_BLOCKED, MSG_INVALID_NONCE, MSG_RATE_LIMITED, ExchangeState, Limits

SERVER = str(ROOT / "original_server.py")


def call(server, session=None, **params):
    answer = (session or requests).get(f"{server.url}/api/request", params=params, timeout=5)
    return answer.status_code, answer.json()


def test_unknown_key_is_401(fast_server):
    assert call(fast_server, api_key="nope", nonce=1, req_id=1) == (
        401,
        {"status": "error", "error_msg": "invalid api key"},
    )
    assert fast_server.stats()["totals"]["invalid_key"] == 1


def test_accepted_answer_echoes_req_id(fast_server):
    assert call(fast_server, api_key=KEY, nonce=1, req_id="abc-7") == (200, {"status": "OK", "req_id": "abc-7"})


def test_twenty_accepted_then_rate_limited(start_server):
    server = start_server("--max-latency-ms", "2", "--window-ms", "60000")  # the ring full however slow the calls
    with requests.Session() as session:
        codes = [call(server, session, api_key=KEY, nonce=n, req_id=n)[0] for n in range(1, 21)]
        assert codes == [200] * 20
        assert call(server, session, api_key=KEY, nonce=21, req_id=21) == (
            429,
            {"status": "error", "error_msg": MSG_RATE_LIMITED},
        )
    key = server.stats()["keys"][KEY]
    assert (key["accepted"], key["rate_limited"], key["is_blocked"]) == (20, 1, False)


def test_ten_rejections_block_the_key_for_good(start_server):
    server = start_server("--max-latency-ms", "2", "--window-ms", "60000")  # thirty calls stamped in one window
    with requests.Session() as session:
        for n in range(1, 21):
            call(server, session, api_key=KEY, nonce=n, req_id=n)
        for n in range(21, 31):
            assert call(server, session, api_key=KEY, nonce=n, req_id=n)[1]["error_msg"] == MSG_RATE_LIMITED
        for n in range(31, 34):
            assert call(server, session, api_key=KEY, nonce=n, req_id=n) == (
                429,
                {"status": "error", "error_msg": MSG_BLOCKED},
            )
    stats = server.stats()
    assert stats["keys"][KEY] | {"ring": None, "last_nonce": None} == {
        "accepted": 20,
        "rate_limited": 10,
        "blocked": 3,
        "invalid_nonce": 0,
        "is_blocked": True,
        "ring": None,
        "last_nonce": None,
    }
    assert stats["keys"][KEYS[1]]["is_blocked"] is False


def test_repeated_or_lower_nonce_is_400_and_spends_a_slot(start_server):
    server = start_server("--max-latency-ms", "1", "--rate", "3", "--window-ms", "60000")
    assert call(server, api_key=KEY, nonce=5, req_id=1)[0] == 200
    assert call(server, api_key=KEY, nonce=5, req_id=2) == (400, {"status": "error", "error_msg": MSG_INVALID_NONCE})
    assert call(server, api_key=KEY, nonce=4, req_id=3)[0] == 400
    # Three slots spent within the window, even though two requests failed their nonce.
    assert call(server, api_key=KEY, nonce=6, req_id=4)[1]["error_msg"] == MSG_RATE_LIMITED
    key = server.stats()["keys"][KEY]
    assert (key["accepted"], key["invalid_nonce"], key["rate_limited"], key["last_nonce"]) == (1, 2, 1, 5)


@pytest.mark.parametrize("nonce", ["abc", "1.5", "", None])
def test_non_integer_or_missing_nonce_is_400(fast_server, nonce):
    params = {"api_key": KEY, "req_id": 1} | ({} if nonce is None else {"nonce": nonce})
    assert call(fast_server, **params) == (400, {"status": "error", "error_msg": MSG_INVALID_NONCE})


def test_form_body_on_get_is_read(fast_server):
    answer = requests.request(
        "GET",
        f"{fast_server.url}/api/request",
        data={"api_key": KEY, "nonce": 3, "req_id": "form-1"},
        timeout=5,
    )
    assert (answer.status_code, answer.json()) == (200, {"status": "OK", "req_id": "form-1"})


def test_stats_count_what_was_sent(fast_server):
    with requests.Session() as session:
        for n in range(1, 6):
            call(fast_server, session, api_key=KEYS[1], nonce=n, req_id=n)
        call(fast_server, session, api_key=KEYS[1], nonce=2, req_id=6)
        call(fast_server, session, api_key="bad", nonce=1, req_id=7)
    stats = fast_server.stats()
    assert stats["totals"] | {"invalid_key": stats["totals"]["invalid_key"]} == {
        "accepted": 5,
        "rate_limited": 0,
        "blocked": 0,
        "invalid_nonce": 1,
        "invalid_key": 1,
        "fail": 0,
        "garbage": 0,
        "drop": 0,
        "stall": 0,
        "proxy_429": 0,
        "lost_answer": 0,
        "duplicate_accepts": 0,
        "bad_timestamp": 0,  # the emulation modes' counts: 0 with every mode off
        "bad_signature": 0,
        "bans": 0,
        "banned_answers": 0,
    }
    assert stats["keys"][KEYS[1]]["last_nonce"] == 5
    assert isinstance(stats["uptime_s"], float)


def test_admission_is_atomic_under_many_threads():
    """With the clock frozen, exactly `rate` are admitted, exactly `max_429` refused, the rest blocked."""
    state = ExchangeState((KEY,), rate=20, max_429=10, clock_ms=lambda: 5_000)
    barrier = threading.Barrier(16)

    def hammer() -> None:
        barrier.wait()
        for _ in range(50):
            state.admit(KEY)

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    ring = state.stats()["keys"][KEY]
    assert ring["rate_limited"] == 10
    assert ring["blocked"] == 16 * 50 - 20 - 10
    assert ring["ring"] == [5_000] * 20


def test_concurrent_requests_never_exceed_the_window(start_server):
    # A minute's window: the forty may be stamped over more than a second on a busy machine; admission is the point.
    server = start_server("--max-latency-ms", "0", "--window-ms", "60000")
    barrier = threading.Barrier(40)
    codes: list[int] = []

    def fire(n: int) -> None:
        barrier.wait()
        codes.append(call(server, api_key=KEY, nonce=n, req_id=n)[0])

    threads = [threading.Thread(target=fire, args=(n,)) for n in range(1, 41)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    key = server.stats()["keys"][KEY]
    assert len(codes) == 40
    # However the 40 interleaved, each admitted stamp is in the ring: 20 of them at most, within the one window.
    assert len(key["ring"]) == key["accepted"] + key["invalid_nonce"] <= 20
    assert key["accepted"] + key["invalid_nonce"] + key["rate_limited"] + key["blocked"] == 40


def test_keep_alive_round_trip_has_no_nagle_stall(start_server):
    """Headers and body leave in one write, so a keep-alive round trip meets no delayed ACK (~40 ms): the whole
    answer is in the first segment read. (A body written apart, held back by Nagle, would come in a later one.)
    Judged by what arrives, not by a time a busy machine can exceed."""
    server = start_server("--max-latency-ms", "0")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
        for n in range(1, 6):
            connection.sendall(f"GET /api/request?api_key={KEYS[n % 5]}&nonce={n}&req_id={n} HTTP/1.1\r\n"
                               "Host: 127.0.0.1\r\n\r\n".encode())
            head, _, body = connection.recv(65536).partition(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head, re.IGNORECASE).group(1))
            assert len(body) == length


def test_default_latencies_follow_the_contract(start_server):
    server = start_server()
    with requests.Session() as session:
        answers = [call(server, session, api_key=KEYS[2], nonce=n, req_id=n) for n in range(1, 6)]
    assert answers == [(200, {"status": "OK", "req_id": str(n)}) for n in range(1, 6)]


@pytest.mark.parametrize(
    "query",
    [
        "",
        "api_key=" + KEY,
        "api_key=" + KEY + "&nonce=" + "9" * 5000,
        "api_key=" + KEY + "&nonce=%E2%82%AC&req_id=%E2%82%AC",
        "api_key=" + KEY + "&api_key=other&nonce=1&nonce=0&req_id=1",
        "api_key=%FF%FE&nonce=1",
    ],
)
def test_malformed_requests_get_json_errors(fast_server, query):
    answer = requests.get(f"{fast_server.url}/api/request?{query}", timeout=5)
    assert answer.status_code in (200, 400, 401)
    assert answer.json()["status"] in ("OK", "error")
    assert call(fast_server, api_key=KEYS[4], nonce=10**12, req_id="alive")[0] == 200


def test_raw_garbage_and_huge_lines_get_json_errors(fast_server):
    for payload in (b"NONSENSE\r\n\r\n", b"GET /api/request?" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", fast_server.port), timeout=5) as conn:
            conn.sendall(payload)
            reply = conn.recv(65536)
        # A garbled request line is answered as HTTP/0.9 would be: the JSON body alone.
        assert b'"status": "error"' in reply
    assert call(fast_server, api_key=KEY, nonce=1, req_id="alive")[0] == 200


def test_unknown_path_is_404_json(fast_server):
    answer = requests.get(f"{fast_server.url}/nope", timeout=5)
    assert (answer.status_code, answer.json()["status"]) == (404, "error")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rate", "0"], "--rate"),
        (["--max-latency-ms", "-1"], "--max-latency-ms"),
        (["--port", "70000"], "--port"),
        (["--fail-rate", "2"], "--fail-rate"),
        (["--keys-file", "/nonexistent/keys"], "/nonexistent/keys"),
        (["--bogus"], "unrecognized"),
        (["--burst", "2"], "--burst needs --limit-model leaky-bucket"),
        (["--limit-model", "leaky-bucket", "--burst", "-1"], "--burst"),
        (["--limit-model", "decaying-counter"], "decaying-counter needs --decay-per-s"),
        (["--limit-model", "decaying-counter", "--decay-per-s", "-0.5"], "--decay-per-s must be positive"),
        (["--decay-per-s", "1"], "--decay-per-s needs --limit-model decaying-counter"),
        (["--weights", "/api/order"], "--weights"),
        (["--weights", "/api/order=heavy"], "--weights"),
        (["--weights", "/api/order=0"], "--weights"),
        (["--weights", "/api/stats=2"], "the server's own endpoint"),
        (["--limit-scope", "account"], "KEY SECRET ACCOUNT"),
        (["--window-ms", "0"], "--window-ms"),
    ],
)
def test_bad_command_line_is_one_line_and_exit_2(args, message):
    result = subprocess.run([sys.executable, SERVER, *args], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_port_in_use_is_exit_2(fast_server):
    result = subprocess.run(
        [sys.executable, SERVER, "--port", str(fast_server.port)], capture_output=True, text=True, timeout=10
    )
    assert result.returncode == 2
    assert "cannot listen" in result.stderr and "Traceback" not in result.stderr


@pytest.fixture
def sigint_not_ignored():
    """A server started from a shell's background job inherits an ignored SIGINT and keeps it, by design
    (Ctrl-C on the client must not stop it): start this one with SIGINT at its default, wherever the suite runs."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(start_server, sig, sigint_not_ignored):
    server = start_server("--max-latency-ms", "0")
    assert call(server, api_key=KEY, nonce=1, req_id=1)[0] == 200
    assert server.stop(sig) == 0


@pytest.mark.parametrize("dist", ["uniform", "exponential"])
def test_the_latency_distribution_keeps_its_mean_and_only_the_exponential_has_a_tail(dist, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(original_server.time, "sleep", slept.append)
    server = original_server.ExchangeServer(("127.0.0.1", 0), ExchangeState(KEYS, 20, 10), 100, seed=3,
                                            latency_dist=dist)
    try:
        for _ in range(4000):
            server.sleep_latency()
    finally:
        server.server_close()
    delays = [s * 1000 for s in slept] + [0.0] * (4000 - len(slept))  # a 0 ms draw sleeps not at all
    assert statistics.mean(delays) == pytest.approx(50, rel=0.08)
    assert all(abs(delay - round(delay)) < 1e-6 for delay in delays)  # whole milliseconds, as the contract says
    beyond = sum(delay > 100 for delay in delays)
    assert beyond == 0 if dist == "uniform" else beyond > 200  # e^-2 of the draws lie past twice the mean


def read_ledger(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_ledger_holds_every_request_with_its_verdict_and_survives_a_kill(start_server, tmp_path):
    """One line per request on a key, in order; a server killed and started again on the same ledger still
    refuses a spent nonce, keeps its ring full and its strikes, as a real exchange does across a restart. A minute's
    window: the ring is still full after the restart however slow the machine is."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--seed", "1", "--max-429", "3", "--window-ms", "60000",
                          "--ledger", str(ledger))
    with requests.Session() as session:
        codes = [call(server, session, api_key=KEY, nonce=n, req_id=f"r{n}")[0] for n in range(1, 21)]
        codes.append(call(server, session, api_key=KEY, nonce=21, req_id="r21")[0])
        codes.append(call(server, session, api_key=KEYS[1], nonce=5, req_id="s5")[0])
        codes.append(call(server, session, api_key=KEYS[1], nonce=5, req_id="s5-again")[0])
        codes.append(call(server, session, api_key="nope", nonce=1, req_id="x")[0])
    assert codes == [200] * 20 + [429, 200, 400, 401]
    lines = read_ledger(ledger)
    assert [line["seq"] for line in lines] == list(range(1, 25))
    assert [line["verdict"] for line in lines] == ["accepted"] * 20 + ["rate_limited", "accepted", "invalid_nonce",
                                                                       "invalid_key"]
    assert [line["status"] for line in lines] == codes
    assert [line["accept"] for line in lines[:20]] == list(range(1, 21))
    clock = {name: lines[21][name] for name in ("arrived_ms", "stamp_ms", "decided_ms")}
    assert lines[21] == {"seq": 22, "boot": 1, "kind": "order", "key": KEYS[1], "account": KEYS[1], "nonce": "5",
                         "id": "s5", "client_id": "s5", "query": f"api_key={KEYS[1]}&nonce=5&req_id=s5", "body": "",
                         **clock, "accept": 21, "verdict": "accepted", "status": 200}
    assert clock["arrived_ms"] <= clock["stamp_ms"] <= clock["decided_ms"]  # the server's clock, as it decided
    assert all(isinstance(line["stamp_ms"], int) for line in lines[:23]) and lines[23]["stamp_ms"] is None

    server.stop(signal.SIGKILL)
    server.start()
    with requests.Session() as session:
        # The first key's ring is still full of the stamps before the kill: one more strike, then two.
        assert call(server, session, api_key=KEY, nonce=22, req_id="r22")[1]["error_msg"] == MSG_RATE_LIMITED
        assert call(server, session, api_key=KEYS[1], nonce=5, req_id="s5-after")[1]["error_msg"] == MSG_INVALID_NONCE
        assert call(server, session, api_key=KEYS[1], nonce=6, req_id="s5")[0] == 200
        assert call(server, session, api_key=KEY, nonce=23, req_id="r23")[1]["error_msg"] == MSG_RATE_LIMITED
        assert call(server, session, api_key=KEY, nonce=24, req_id="r24")[1]["error_msg"] == MSG_BLOCKED
    stats = server.stats()
    assert stats["keys"][KEY]["rate_limited"] == 3 and stats["keys"][KEY]["is_blocked"]
    assert stats["totals"]["duplicate_accepts"] == 1  # "s5" accepted before the kill and after it
    after = read_ledger(ledger)[24:]
    assert {line["boot"] for line in after} == {2} and [line["seq"] for line in after] == list(range(25, 30))


def test_an_unwritable_ledger_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run([sys.executable, SERVER, "--port", "0", "--ledger", str(tmp_path / "no" / "such.jsonl")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot use --ledger" in result.stderr


def test_banned_for_answers_418_with_retry_after_to_every_key_until_it_ends(start_server, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    started = time.monotonic()  # the ban runs from the server's start
    server = start_server("--max-latency-ms", "0", "--banned-for", "30", "--ledger", str(ledger))
    answer = requests.get(f"{server.url}/api/request", params={"api_key": KEYS[2], "nonce": 1, "req_id": "b"}, timeout=5)
    left = 30 - (time.monotonic() - started)
    assert answer.status_code == 418 and left - 1 <= int(answer.headers["Retry-After"]) <= 30
    assert [(line["verdict"], line["status"]) for line in read_ledger(ledger)] == [("banned", 418)]
    assert server.stats()["totals"]["accepted"] == 0
    unbanned = start_server("--max-latency-ms", "0", "--banned-for", "0")
    assert call(unbanned, api_key=KEYS[2], nonce=1, req_id="b")[0] == 200


# Each limit model on a fake clock (ms): (instant, admitted?) in order; the last admitted request and the first
# refused one sit at the rule's exact boundary.
LIMIT_SEQUENCES = {
    # Windows of 1000 ms aligned to the server's clock, which runs 250 ms ahead: window 1 starts at 750.
    "fixed-window": (Limits("fixed-window", offset_ms=250), 3,
                     [(740, True), (740, True), (749, True), (749, False), (750, True), (750, True), (750, True),
                      (1749, False), (1750, True)]),
    # T = 1000 / 4 = 250 ms, tau = 1 x T: two at once, then one per 250 ms.
    "leaky-bucket": (Limits("leaky-bucket", burst=1), 4,
                     [(1000, True), (1000, True), (1000, False), (1249, False), (1250, True), (1499, False),
                      (1500, True)]),
    # 10 in window 0; at 1250, 10 x 0.75 + 2 = 9.5 leaves no room for 1; at 1300, 10 x 0.7 + 2 + 1 = 10 fits.
    "sliding-counter": (Limits("sliding-counter"), 10,
                        [(500, True)] * 10 + [(999, False), (1250, True), (1250, True), (1250, False), (1300, True),
                                              (1300, False)]),
    # Max 3, draining 0.5 a second: full at 0; 2.0005 at 1999 (no room); 2 at 2000 (room for exactly one).
    "decaying-counter": (Limits("decaying-counter", decay_per_s=Fraction("0.5")), 3,
                         [(0, True), (0, True), (0, True), (1999, False), (2000, True), (2000, False)]),
    # The contract's ring, 3 per 1000 ms (its slots start at 0): a slot frees strictly more than 1000 ms after
    # its stamp.
    "rolling-window": (Limits(), 3, [(2100, True), (2100, True), (2600, True), (3100, False), (3101, True),
                                     (3101, True), (3101, False), (3600, False), (3601, True)]),
}


@pytest.mark.parametrize("model", LIMIT_SEQUENCES)
def test_each_limit_model_admits_its_sequence_and_refuses_at_the_exact_boundary(model):
    limits, rate, sequence = LIMIT_SEQUENCES[model]
    clock = FakeClock(0)
    state = ExchangeState((KEY,), rate, max_429=100, clock_ms=clock, limits=limits)
    verdicts = []
    for at_ms, _ in sequence:
        clock.advance(at_ms - clock.now)
        refusal, stamp = state.admit(KEY)
        assert stamp == at_ms and refusal in (None, MSG_RATE_LIMITED)
        verdicts.append(refusal is None)
    assert verdicts == [admitted for _, admitted in sequence]
    assert state.stats()["keys"][KEY]["rate_limited"] == verdicts.count(False)  # each refusal is a strike


@pytest.mark.parametrize("model", ["rolling-window", "fixed-window", "leaky-bucket", "sliding-counter"])
def test_a_cost_spends_that_many_units_in_each_model(model):
    """Rate 4: a cost of 3 then 1 fills every model at one instant; a 2 after a 3 does not fit, nor a 5 ever."""
    limits = Limits(model, burst=3) if model == "leaky-bucket" else Limits(model)
    for costs, admitted in (([3, 1, 1], [True, True, False]), ([3, 2, 1], [True, False, True]), ([5], [False])):
        state = ExchangeState((KEY,), 4, max_429=100, clock_ms=lambda: 5_000, limits=limits)
        assert [state.admit(KEY, cost)[0] is None for cost in costs] == admitted, costs


@pytest.mark.parametrize(
    "model",
    [
        ["--limit-model", "rolling-window"],
        ["--limit-model", "fixed-window"],
        ["--limit-model", "leaky-bucket", "--burst", "2"],
        ["--limit-model", "sliding-counter"],
        ["--limit-model", "decaying-counter", "--decay-per-s", "0.000001"],
    ],
    ids=lambda args: args[1],
)
def test_each_limit_model_over_http_admits_the_rate_then_strikes_toward_the_block(start_server, model):
    """Windows of 10^9 ms (about 11 days): the three requests cannot straddle a boundary in any model."""
    server = start_server("--max-latency-ms", "0", "--rate", "3", "--window-ms", str(10**9), "--max-429", "2", *model)
    with requests.Session() as session:
        answers = [call(server, session, api_key=KEY, nonce=n, req_id=n) for n in range(1, 7)]
    assert [status for status, _ in answers] == [200, 200, 200, 429, 429, 429]
    assert [body.get("error_msg") for _, body in answers[3:]] == [MSG_RATE_LIMITED, MSG_RATE_LIMITED, MSG_BLOCKED]
    assert call(server, api_key=KEYS[1], nonce=1, req_id="other")[0] == 200  # each key its own state


def test_weights_make_paths_endpoints_of_their_cost_and_a_restart_restores_the_counter(start_server, tmp_path):
    """A decaying counter of max 10 that barely drains: an order (cost 4) twice and a request (cost 1) leave 1
    unit; after a SIGKILL and a restart on the same ledger the counter is still at 9: an order is refused."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--limit-model", "decaying-counter", "--decay-per-s", "0.000001",
                          "--rate", "10", "--weights", "/api/order=4,/api/cancel=1", "--ledger", str(ledger))
    with requests.Session() as session:
        order = lambda n: session.get(f"{server.url}/api/order", params={"api_key": KEY, "nonce": n, "req_id": n},
                                      timeout=5)
        assert [order(1).status_code, order(2).status_code] == [200, 200]
        assert call(server, session, api_key=KEY, nonce=3, req_id=3)[0] == 200
        assert session.get(f"{server.url}/api/nope", timeout=5).status_code == 404
        server.stop(signal.SIGKILL)
        server.start()
        answer = order(4)
        assert (answer.status_code, answer.json()["error_msg"]) == (429, MSG_RATE_LIMITED)
        assert call(server, session, api_key=KEY, nonce=5, req_id=5)[0] == 200  # 9 + 1 = 10 still fits
    assert [line.get("cost", 1) for line in read_ledger(ledger)] == [4, 4, 1, 4, 1]
    assert "cost" not in read_ledger(ledger)[2]  # a cost of 1 is left out, as before weights


def test_an_account_scope_shares_one_state_between_its_keys(start_server, tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{KEYS[0]} s0 desk-a\n{KEYS[1]} s1 desk-a\n{KEYS[2]} s2 desk-b\n{KEYS[3]}\n")
    server = start_server("--max-latency-ms", "0", "--rate", "2", "--window-ms", "60000", "--keys-file",
                          str(keys_file), "--limit-scope", "account")
    with requests.Session() as session:
        codes = [call(server, session, api_key=key, nonce=n, req_id=n)[0]
                 for n, key in enumerate([KEYS[0], KEYS[1], KEYS[0], KEYS[1], KEYS[2], KEYS[2], KEYS[3], KEYS[3]])]
    assert codes == [200, 200, 429, 429, 200, 200, 200, 200]  # a key with no account is alone
    keys = server.stats()["keys"]
    assert [keys[key]["rate_limited"] for key in KEYS[:4]] == [1, 1, 0, 0]  # the strike is the sender's


def test_a_host_scope_shares_one_state_between_every_key(start_server):
    server = start_server("--max-latency-ms", "0", "--rate", "3", "--window-ms", "60000", "--limit-scope", "host")
    with requests.Session() as session:
        codes = [call(server, session, api_key=key, nonce=1, req_id=key)[0] for key in KEYS]
    assert codes == [200, 200, 200, 429, 429]
    stats = server.stats()
    assert [stats["keys"][key]["rate_limited"] for key in KEYS] == [0, 0, 0, 1, 1]
    assert stats["keys"][KEYS[0]]["ring"] == stats["keys"][KEYS[4]]["ring"]  # one ring for all
