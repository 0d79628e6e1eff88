"""Work through a Valkey stream: ``submit`` validates and deduplicates, a daemon reads through the consumer group,
each final record lands in the results stream with its entry acknowledged, and a dead member's entries are taken over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from conftest import KEYS, ROOT, stream_records, wait_for
from thread_client.limits.keys import key_id
from tools.harness.valkey_process import ValkeyProcess


def submit(valkey, tmp_path, lines: list[str]) -> subprocess.CompletedProcess:
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", f"{valkey.url}?stream=work",
                           str(source)], capture_output=True, text=True, timeout=30, cwd=ROOT)


def requests(first: int, last: int) -> list[str]:
    return [json.dumps({"id": f"w-{n}", "params": {"amount": n}}) for n in range(first, last + 1)]


def test_submit_refuses_bad_lines_and_skips_ids_seen_before(valkey, tmp_path):
    first = submit(valkey, tmp_path, requests(1, 30) + ["not json", json.dumps({"id": "w-3"})])
    assert first.returncode == 1 and "refused line 31: not JSON" in first.stderr
    assert "submitted 30 to work; 1 duplicate ids skipped; 1 lines refused" in first.stdout
    again = submit(valkey, tmp_path, requests(25, 40))
    assert again.returncode == 0 and "submitted 10 to work; 6 duplicate ids skipped" in again.stdout
    assert valkey.client().xlen("work") == 40


@pytest.mark.slow
def test_a_daemon_works_the_stream_with_one_acknowledged_record_per_entry(valkey, fast_server, client_process,
                                                                           tmp_path):
    submit(valkey, tmp_path, requests(1, 120))
    store = valkey.client()
    client = client_process(fast_server, tmp_path, "--source", f"{valkey.url}?stream=work&group=g",
                            "--member", "one")
    wait_for(lambda: len(stream_records(store)) == 120)
    submit(valkey, tmp_path, requests(121, 150))
    store.xadd("work", {"request": json.dumps({"id": "bad", "params": {"nonce": 1}})})  # past submit's checks
    store.xadd("work", {"request": b'{"id": "raw-\xff"}'})  # bytes that are not UTF-8
    wait_for(lambda: len(stream_records(store)) == 152)
    client.send_signal(signal.SIGTERM)
    out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    by_id = stream_records(store)
    assert all(len(records) == 1 for records in by_id.values())
    assert {r[0]["outcome"] for i, r in by_id.items() if i not in ("bad", "")} == {"accepted"}
    assert by_id["bad"][0]["outcome"] == "invalid_input" and store.xlen("work:dead") == 2
    assert by_id[""][0]["reason"].endswith("the id is not valid Unicode (a lone surrogate)")
    assert store.xpending("work", "g")["pending"] == 0  # every entry acknowledged with its record
    assert set(fast_server.accepted()) == {f"w-{n}" for n in range(1, 151)}
    status = subprocess.run([sys.executable, "-m", "thread_client", "status", "--redis",
                             f"{valkey.url}?stream=work&group=g"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert status.returncode == 0, status.stderr
    assert "group g: lag 0, pending 0" in status.stdout and "152 in the last minute" in status.stdout


def test_entries_a_dead_member_left_pending_are_taken_over(valkey, fast_server, client_process, tmp_path):
    submit(valkey, tmp_path, requests(1, 40))
    store = valkey.client()
    store.xgroup_create("work", "g", id="0")
    store.xreadgroup("g", "dead-member", {"work": ">"}, count=15)  # read, never acknowledged: it "died"
    client = client_process(fast_server, tmp_path, "--source", f"{valkey.url}?stream=work&group=g&reclaim=1",
                            "--member", "alive")
    wait_for(lambda: len(stream_records(store)) == 40)
    client.send_signal(signal.SIGTERM)
    client.communicate(timeout=30)
    by_id = stream_records(store)
    assert sum(r[0]["resumed_after_crash"] for r in by_id.values()) == 15
    assert store.xpending("work", "g")["pending"] == 0


def test_exactly_once_records_a_taken_over_entry_that_may_have_been_sent_as_unknown(valkey, fast_server,
                                                                                     client_process, tmp_path):
    submit(valkey, tmp_path, requests(1, 30))
    store = valkey.client()
    store.xgroup_create("work", "g", id="0")
    held = store.xreadgroup("g", "dead-member", {"work": ">"}, count=10)[0][1]
    for entry_id, _ in held[:4]:  # the dead member had sent these four (its journal says so), not the other six
        store.hset("work:sent", entry_id, "AAAA...ZZZZ 1700000000000000")
    client = client_process(fast_server, tmp_path, "--source", f"{valkey.url}?stream=work&group=g&reclaim=1",
                            "--member", "alive", "--delivery", "exactly-once")
    wait_for(lambda: len(stream_records(store)) == 30)
    client.send_signal(signal.SIGTERM)
    client.communicate(timeout=30)
    by_id = stream_records(store)
    unknown = {i for i, found in by_id.items() if found[0]["outcome"] == "unknown"}
    assert unknown == {"w-1", "w-2", "w-3", "w-4"}
    assert "nonce 1700000000000000 on AAAA...ZZZZ" in by_id["w-1"][0]["reason"]
    assert set(fast_server.accepted()) == {f"w-{n}" for n in range(5, 31)}  # the four were never sent again
    assert store.hlen("work:sent") == 0 and store.xpending("work", "g")["pending"] == 0


def test_a_store_that_requires_a_password_is_reached_with_the_one_in_the_address(fast_server, client_process,
                                                                                   tmp_path):
    """``redis://:PASSWORD@host`` reaches a store with ``requirepass`` (the password was dropped once, and every
    command refused), and no log line shows the password."""
    with ValkeyProcess(password="pa55-word") as valkey:
        assert submit(valkey, tmp_path, requests(1, 20)).returncode == 0
        store = valkey.client()
        client = client_process(fast_server, tmp_path, "--source", f"{valkey.url}?stream=work&group=g",
                                "--member", "one", "--log-level", "DEBUG")
        wait_for(lambda: len(stream_records(store)) == 20)
        client.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    assert "pa55-word" not in out


@pytest.mark.slow
def test_a_work_entry_goes_to_its_own_endpoint_at_its_own_cost(valkey, start_server, client_process, tmp_path):
    """``submit`` keeps a line's endpoint in its entry; the member checks it against its profile, and paces
    each at its cost: an order is 4 of a key's 20 per second at the server and in the profile alike."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--weights", "/api/order=4", "--ledger", str(ledger))
    profile = tmp_path / "orders.toml"
    profile.write_text('[request]\nendpoints = ["POST /api/order"]\n\n[[limit]]\nalgorithm = "rolling-window"\n'
                       'limit = 20\nperiod_ms = 1000\ncost = { "GET /api/request" = 1, "POST /api/order" = 4 }\n')
    orders = [json.dumps({"id": f"o-{n}", "path": "/api/order", "method": "POST"}) for n in range(1, 61)]
    elsewhere = json.dumps({"id": "x", "path": "/api/x"})
    assert submit(valkey, tmp_path, requests(1, 60) + orders + [elsewhere]).returncode == 0
    store = valkey.client()
    client = client_process(server, tmp_path, "--profile", str(profile), "--source",
                            f"{valkey.url}?stream=work&group=g", "--member", "one")
    wait_for(lambda: len(stream_records(store)) == 121)
    client.send_signal(signal.SIGTERM)
    out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    by_id = {request_id: found[0] for request_id, found in stream_records(store).items()}
    refused = by_id.pop("x")
    assert refused["outcome"] == "invalid_input" and "'GET /api/x' is not an endpoint" in refused["reason"]
    assert {record["outcome"] for record in by_id.values()} == {"accepted"}
    assert server.stats()["totals"]["rate_limited"] == 0
    costs = {entry["id"]: entry.get("cost", 1) for entry in map(json.loads, ledger.read_text().splitlines())
             if entry["verdict"] == "accepted"}
    assert costs == {request_id: 4 if request_id.startswith("o-") else 1 for request_id in by_id}


ORDERS_PROFILE = str(ROOT / "examples" / "profiles" / "reference-orders.toml")


@pytest.mark.parametrize(("driven", "delivery"), [("both accounts", "at-least-once"), ("both accounts", "exactly-once"),
                                                  ("the other account only", "at-least-once")])
def test_an_entry_a_dead_member_sent_is_asked_about_in_the_account_that_placed_it(
        valkey, start_server, client_process, tmp_path, driven, delivery):
    """The dead member placed w-1..w-4 on desk-a's key, its journal says so. Asked from desk-b, an exchange
    answers "not found" (an account keeps its own orders), and the order was placed a second time: the member
    taking the entries over asks with desk-a's key, or, driving none of desk-a's, records them unknown. Under
    exactly-once too: settled by asking like a single daemon, where they were once all recorded unknown."""
    accounts = tmp_path / "accounts"
    accounts.write_text(f"{KEYS[0]} s0 desk-a\n{KEYS[1]} s1 desk-b\n")
    server = start_server("--max-latency-ms", "2", "--order-status", "--keys-file", str(accounts))
    submit(valkey, tmp_path, requests(1, 10))
    store = valkey.client()
    store.xgroup_create("work", "g", id="0")
    held = store.xreadgroup("g", "dead-member", {"work": ">"}, count=4)[0][1]
    for n, (entry_id, _) in enumerate(held, 1):
        query = urllib.parse.urlencode({"api_key": KEYS[0], "nonce": n, "req_id": f"w-{n}", "amount": n})
        with urllib.request.urlopen(f"{server.url}/api/request?{query}", timeout=5) as answer:
            assert answer.status == 200
        store.hset("work:sent", entry_id, f"{key_id(KEYS[0])} {n} dead-member")
    keys = tmp_path / "client-keys"
    keys.write_text(accounts.read_text() if driven == "both accounts" else f"{KEYS[1]} s1 desk-b\n")
    keys.chmod(0o600)
    client = client_process(server, tmp_path, "--source", f"{valkey.url}?stream=work&group=g&reclaim=1",
                            "--member", "alive", "--profile", ORDERS_PROFILE, "--keys-file", str(keys),
                            "--delivery", delivery)
    wait_for(lambda: len(stream_records(store)) == 10, timeout=60)
    client.send_signal(signal.SIGTERM)
    client.communicate(timeout=30)
    outcomes = {request_id: found[0]["outcome"] for request_id, found in stream_records(store).items()}
    taken_over = {f"w-{n}" for n in range(1, 5)}
    expected = "accepted" if driven == "both accounts" else "unknown"
    assert outcomes == {request_id: expected if request_id in taken_over else "accepted" for request_id in outcomes}
    assert server.accepted() == {f"w-{n}": 1 for n in range(1, 11)}  # each placed once
