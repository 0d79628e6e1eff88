"""Orders never doubled, against the reference server's order mode (``--order-status``): a send in doubt is
settled by asking ``GET /api/order``, and the server's ledger holds exactly one accepted order per client id.
The profile is examples/profiles/reference-orders.toml (-1007 ambiguous, -2010 duplicate, a [settle] table)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import requests

from conftest import KEYS, ROOT, run_client
from thread_client.limits.keys import key_id

PROFILE = str(ROOT / "examples" / "profiles" / "reference-orders.toml")
ORDERS = [f"order-{n}" for n in range(6)]
ACCEPTED = {"accepted", "lost_answer", "execution_unknown", "accepted_late"}  # the server took the order


def place_orders(server, tmp_path: Path, *args: str) -> dict:
    """Send ORDERS through the profile; return the client's summary once every one is final."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": order, "params": {"qty": "1"}}) + "\n" for order in ORDERS))
    result, summary = run_client(server, tmp_path, "--profile", PROFILE, "--source", str(source), "--duration", "60",
                                 *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return summary


def outcomes(tmp_path: Path) -> dict[str, str]:
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    return {record["id"]: record["outcome"] for record in records}


def verdicts(ledger: Path) -> dict[str, list[str]]:
    """Each order's verdicts at the server, in the order they were decided (its status asks are lines of their own)."""
    by_id = collections.defaultdict(list)
    for line in ledger.read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] == "order":
            by_id[entry["id"]].append(entry["verdict"])
    return by_id


def assert_one_order_each(server, ledger: Path) -> None:
    assert server.accepted() == {order: 1 for order in ORDERS}
    assert all(sum(verdict in ACCEPTED for verdict in seen) == 1 for seen in verdicts(ledger).values())
    assert server.stats()["totals"]["duplicate_accepts"] == 0


def test_execution_unknown_then_duplicate_is_settled_accepted_through_the_status_endpoint(start_server, tmp_path):
    """Binance's case: the order executes and is answered -1007; the status lags (one "does not exist"). A first
    "not found" is not trusted while a copy may still be taken (it was trusted once, and the order sent again
    was answered -2010 duplicate: at Binance, whose ids are checked among open orders only, a filled first copy
    would have been doubled); asked again past that bound, it is found: accepted, sent once."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--ledger", str(ledger), "--order-status",
                          "--execution-unknown-rate", "1", "--status-misses", "1")
    place_orders(server, tmp_path)
    assert outcomes(tmp_path) == {order: "accepted" for order in ORDERS}
    assert verdicts(ledger) == {order: ["execution_unknown"] for order in ORDERS}
    assert_one_order_each(server, ledger)
    assert server.stats()["totals"]["status_asks"] == 2 * len(ORDERS)


def test_a_status_that_lags_past_the_doubt_sends_the_order_again_and_its_duplicate_is_settled_accepted(
        start_server, tmp_path):
    """The issue's case, whole: the order executes and is answered -1007; the status lags longer than a copy's
    doubt (two "does not exist", the second past the bound), so the order is sent again under its client id and
    answered -2010 duplicate; asked again, it is found: accepted, one order at the exchange."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--ledger", str(ledger), "--order-status",
                          "--execution-unknown-rate", "1", "--status-misses", "2")
    place_orders(server, tmp_path)
    assert outcomes(tmp_path) == {order: "accepted" for order in ORDERS}
    assert verdicts(ledger) == {order: ["execution_unknown", "duplicate"] for order in ORDERS}
    assert_one_order_each(server, ledger)


def test_a_timed_out_order_is_settled_as_found(start_server, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--ledger", str(ledger), "--order-status",
                          "--order-late-rate", "1")
    summary = place_orders(server, tmp_path, "--http-timeout-ms", "500")
    assert outcomes(tmp_path) == {order: "accepted" for order in ORDERS}
    assert verdicts(ledger) == {order: ["accepted_late"] for order in ORDERS}  # each sent once, never again
    assert_one_order_each(server, ledger)
    assert summary["ambiguous_attempts"] == len(ORDERS)


@pytest.mark.slow
def test_an_order_the_exchange_does_not_have_is_sent_again_once_per_miss(start_server, tmp_path):
    """The server drops connections before it takes the order: each drop is asked about twice (found missing
    twice, the second time once the dropped copy could no longer be taken), then sent again once under the same
    client id. One key, one thread: the requests reach the seeded server one at a time, so it draws its drops the
    same every run (with several in flight, which request met which draw depended on the timing: once none was
    dropped)."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "3", "--ledger", str(ledger), "--order-status",
                          "--drop-rate", "0.25")
    place_orders(server, tmp_path, "--keys-file", keys_file(tmp_path, f"{KEYS[0]}\n"), "--threads-per-key", "1")
    assert outcomes(tmp_path) == {order: "accepted" for order in ORDERS}
    seen = verdicts(ledger)
    assert all(verdicts_of == ["drop"] * (len(verdicts_of) - 1) + ["accepted"] for verdicts_of in seen.values())
    totals = server.stats()["totals"]
    assert totals["drop"] >= 1 and totals["status_asks"] == 2 * totals["drop"]
    assert_one_order_each(server, ledger)


def keys_file(tmp_path: Path, lines: str) -> str:
    """The client's keys file, readable by its owner alone (the client refuses one others can read)."""
    path = tmp_path / "client-keys"
    path.write_text(lines)
    path.chmod(0o600)
    return str(path)


def crashed_after_placing_on_desk_a(start_server, tmp_path: Path):
    """An exchange whose keys trade for two accounts (desk-a, desk-b), and what a run killed after its send of
    order-0 on desk-a's key left: the exchange has the order, the run's send journal names that key, and no
    record ends the order. Returns the server."""
    accounts = tmp_path / "accounts"
    accounts.write_text(f"{KEYS[0]} s0 desk-a\n{KEYS[1]} s1 desk-b\n")
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--ledger", str(tmp_path / "ledger.jsonl"),
                          "--order-status", "--keys-file", str(accounts))
    answer = requests.get(f"{server.url}/api/request", params={"api_key": KEYS[0], "nonce": 1, "req_id": "order-0"},
                          timeout=5)
    assert answer.status_code == 200
    (tmp_path / "results.jsonl.sent").write_text(json.dumps(
        {"id": "order-0", "key": key_id(KEYS[0]), "nonce": 1, "params": {"qty": "1"}}) + "\n")
    return server


def test_an_order_resumed_after_a_crash_is_never_placed_again_by_a_key_of_another_account(start_server, tmp_path):
    """The order was placed by a key of desk-a before the crash; this run drives only desk-b's key. desk-b's
    status ask cannot find desk-a's order (an exchange keeps an order in the account that placed it): it would
    answer "not found", and the order would be placed a second time. No key here can ask desk-a: the order
    ends ``unknown``, saying why, and the exchange holds it once."""
    server = crashed_after_placing_on_desk_a(start_server, tmp_path)
    place_orders(server, tmp_path, "--keys-file", keys_file(tmp_path, f"{KEYS[1]} s1 desk-b\n"))
    records = {record["id"]: record for record in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert records["order-0"]["outcome"] == "unknown"
    assert "not among this run's keys" in records["order-0"]["reason"]
    assert {order: record["outcome"] for order, record in records.items() if order != "order-0"} == {
        order: "accepted" for order in ORDERS[1:]}
    assert server.accepted() == {order: 1 for order in ORDERS}


def test_an_order_resumed_after_a_crash_is_asked_about_by_the_key_that_placed_it(start_server, tmp_path):
    """Both keys are driven again, desk-b's first: whichever worker takes the order up, the ask goes out on
    desk-a's key, which finds it: accepted, placed once."""
    server = crashed_after_placing_on_desk_a(start_server, tmp_path)
    place_orders(server, tmp_path, "--keys-file", keys_file(tmp_path, f"{KEYS[1]} s1 desk-b\n{KEYS[0]} s0 desk-a\n"))
    assert outcomes(tmp_path) == {order: "accepted" for order in ORDERS}
    assert server.accepted() == {order: 1 for order in ORDERS}
    assert server.stats()["totals"]["duplicate_accepts"] == 0


def test_an_order_the_engine_places_late_is_never_sent_again_before_the_lag_the_profile_names(start_server, tmp_path):
    """Binance's -1007: the order may still be placed after a status ask said "does not exist". Here every order is
    answered -1007 and placed up to 1.4 s later, and a client id is free again once its order filled (at once): a
    "not found" trusted after the 1 s HTTP timeout sent orders again, and placed them twice. The profile's
    lag_ms (1.5 s) bounds the engine's lag: each order is found, placed once."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--seed", "3", "--ledger", str(ledger), "--order-status",
                          "--execution-unknown-rate", "1", "--placed-late-ms", "1400", "--client-ids", "open",
                          "--fill-max-ms", "0")
    place_orders(server, tmp_path)
    assert outcomes(tmp_path) == {order: "accepted" for order in ORDERS}
    assert server.accepted() == {order: 1 for order in ORDERS}
