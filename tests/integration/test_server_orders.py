"""The reference server's order mode (``--order-status``) as a strict witness: every request it receives, a status
ask too, is a ledger line; an account keeps its own orders; and the client-id rules of real exchanges
(``--client-ids``), the engine's late placement after -1007 (``--placed-late-ms``) and a status index that lags
the book (``--status-lag-ms``), each as its flag says."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import requests

from conftest import KEYS, wait_for

DUPLICATE, NOT_FOUND, EXECUTION_UNKNOWN = -2010, -2013, -1007


class Exchange:
    """One key's orders and status asks at a server, each with the key's next nonce."""

    def __init__(self, server, key: str = KEYS[0]) -> None:
        self.server, self.key, self._nonce = server, key, 0
        self._session = requests.Session()

    def _next(self) -> int:
        self._nonce += 1
        return self._nonce

    def order(self, client_id: str) -> tuple[int, dict]:
        answer = self._session.get(f"{self.server.url}/api/request",
                                   params={"api_key": self.key, "nonce": self._next(), "req_id": client_id}, timeout=5)
        return answer.status_code, answer.json()

    def ask(self, client_id: str) -> int:
        answer = self._session.get(f"{self.server.url}/api/order",
                                   params={"api_key": self.key, "nonce": self._next(), "clientId": client_id}, timeout=5)
        return answer.status_code


def ledger_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def placements(ledger: list[dict], client_id: str) -> int:
    return sum(1 for line in ledger if line["client_id"] == client_id and line["accept"] is not None)


def test_each_status_ask_is_a_ledger_line_and_an_account_finds_only_its_own_orders(start_server, tmp_path):
    ledger, keys = tmp_path / "ledger.jsonl", tmp_path / "keys"
    keys.write_text(f"{KEYS[0]} s0 desk-a\n{KEYS[1]} s1 desk-a\n{KEYS[2]} s2 desk-b\n")
    server = start_server("--max-latency-ms", "0", "--order-status", "--keys-file", str(keys), "--ledger", str(ledger))
    a, a2, b = Exchange(server, KEYS[0]), Exchange(server, KEYS[1]), Exchange(server, KEYS[2])
    assert a.order("o1")[0] == 200
    assert (a2.ask("o1"), b.ask("o1")) == (200, 400)  # desk-a's order: found by desk-a's other key, not by desk-b
    assert b.order("o1")[0] == 200  # desk-b has no such order: its own is a second one
    assert a2.order("o1")[1]["code"] == DUPLICATE  # desk-a has: refused
    lines = ledger_of(ledger)
    assert [(line["kind"], line["account"], line["verdict"]) for line in lines] == [
        ("order", "desk-a", "accepted"), ("status", "desk-a", "found"), ("status", "desk-b", "not_found"),
        ("order", "desk-b", "accepted"), ("order", "desk-a", "duplicate")]
    assert lines[1]["query"] == f"api_key={KEYS[1]}&nonce=1&clientId=o1" and lines[1]["stamp_ms"] is not None
    assert placements(lines, "o1") == 2


def test_a_status_ask_s_nonce_is_remembered_across_a_restart(start_server, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--order-status", "--ledger", str(ledger))
    exchange = Exchange(server)
    exchange.order("o1")
    assert exchange.ask("o1") == 200  # nonce 2
    server.stop(signal.SIGKILL)
    server.start()
    exchange._nonce = 1
    assert exchange.order("o2")[1]["error_msg"] == "invalid nonce"  # nonce 2 was spent by the ask


def test_an_idempotent_exchange_answers_a_repeat_with_the_first_order_and_places_nothing(start_server, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--order-status", "--client-ids", "idempotent",
                          "--ledger", str(ledger))
    exchange = Exchange(server)
    assert exchange.order("o1") == exchange.order("o1") == (200, {"status": "OK", "req_id": "o1"})
    lines = ledger_of(ledger)
    assert [line["verdict"] for line in lines] == ["accepted", "repeat"] and placements(lines, "o1") == 1


def test_an_exchange_that_checks_open_orders_only_places_a_client_id_again_once_its_order_filled(
        start_server, tmp_path):
    """Binance, Kraken, OKX: a resend while the first order is open is refused; once it filled (here at once), the
    same client id is a second order. The status endpoint still finds the filled one."""
    ledger = tmp_path / "ledger.jsonl"
    open_long = start_server("--max-latency-ms", "0", "--order-status", "--client-ids", "open", "--fill-max-ms",
                             "60000", "--seed", "2")
    exchange = Exchange(open_long)
    assert exchange.order("o1")[0] == 200 and exchange.order("o1")[1]["code"] == DUPLICATE
    fills_at_once = start_server("--max-latency-ms", "0", "--order-status", "--client-ids", "open", "--fill-max-ms",
                                 "0", "--ledger", str(ledger))
    exchange = Exchange(fills_at_once)
    assert exchange.order("o1")[0] == exchange.order("o1")[0] == 200
    assert exchange.ask("o1") == 200
    assert placements(ledger_of(ledger), "o1") == 2


def test_an_order_answered_execution_unknown_is_placed_by_the_engine_within_its_lag(start_server, tmp_path):
    """The matching engine's lag: after -1007 the status says "does not exist" until the engine places the order, a
    drawn 0 to --placed-late-ms later, on a ledger line of its own (the next request the server reads places it)."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--order-status", "--execution-unknown-rate", "1",
                          "--placed-late-ms", "200", "--ledger", str(ledger))
    exchange = Exchange(server)
    assert exchange.order("o1")[1]["code"] == EXECUTION_UNKNOWN
    wait_for(lambda: exchange.ask("o1") == 200, timeout=5)
    lines = ledger_of(ledger)
    assert [line["verdict"] for line in lines if line["kind"] != "status"] == ["execution_pending", "placed_late"]
    assert lines[0]["accept"] is None and placements(lines, "o1") == 1
    placed = next(line for line in lines if line["verdict"] == "placed_late")
    assert placed["decided_ms"] <= lines[0]["decided_ms"] + 200 + 100  # within its lag (and the ask that placed it)


def test_an_order_the_engine_places_late_meets_its_client_id_placed_meanwhile_and_is_refused(start_server, tmp_path):
    """A client that sends an order again after -1007 (here answered -1007 too): the engine places whichever copy
    comes due first; the other meets its client id, and is refused as a duplicate (under --client-ids open, once
    the first filled, it would be a second order)."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--order-status", "--execution-unknown-rate", "1",
                          "--placed-late-ms", "200", "--ledger", str(ledger))
    exchange = Exchange(server)
    assert exchange.order("o1")[1]["code"] == exchange.order("o1")[1]["code"] == EXECUTION_UNKNOWN

    def both_came_due() -> bool:
        exchange.ask("o1")  # the engine's work is done as the server reads a request
        return sum(line["kind"] == "placement" for line in ledger_of(ledger)) == 2

    wait_for(both_came_due, timeout=5)
    lines = ledger_of(ledger)
    assert sorted(line["verdict"] for line in lines if line["kind"] == "placement") == ["late_duplicate", "placed_late"]
    assert placements(lines, "o1") == 1


def test_an_order_the_engine_had_yet_to_place_is_placed_after_a_restart_of_the_server(start_server, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--order-status", "--execution-unknown-rate", "1",
                          "--placed-late-ms", "500", "--ledger", str(ledger))
    exchange = Exchange(server)
    assert exchange.order("o1")[1]["code"] == EXECUTION_UNKNOWN
    server.stop(signal.SIGKILL)
    server.start()
    wait_for(lambda: exchange.ask("o1") == 200, timeout=5)
    assert placements(ledger_of(ledger), "o1") == 1


def test_a_status_index_that_lags_the_book_finds_an_order_only_once_its_lag_has_passed(start_server):
    server = start_server("--max-latency-ms", "0", "--order-status", "--status-lag-ms", "60000")
    exchange = Exchange(server)
    assert exchange.order("o1")[0] == 200
    assert exchange.ask("o1") == 400 and exchange.order("o1")[1]["code"] == DUPLICATE  # the book has it


def test_a_restart_under_timestamps_keeps_every_order_the_engine_had_yet_to_place(start_server, tmp_path):
    """No nonce tells two pending orders apart under --timestamp-ms: each has a token of its own."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "0", "--order-status", "--execution-unknown-rate", "1",
                          "--placed-late-ms", "500", "--ledger", str(ledger), "--timestamp-ms")
    with requests.Session() as session:
        for order in ("o1", "o2"):
            answer = session.get(f"{server.url}/api/request", timeout=5, params={
                "api_key": KEYS[0], "req_id": order, "timestamp": int(time.time() * 1000)})
            assert answer.json()["code"] == EXECUTION_UNKNOWN
        server.stop(signal.SIGKILL)
        server.start()

        def both_placed() -> bool:
            session.get(f"{server.url}/api/order", timeout=5, params={
                "api_key": KEYS[0], "clientId": "o1", "timestamp": int(time.time() * 1000)})
            return {placements(ledger_of(ledger), order) for order in ("o1", "o2")} == {1}

        wait_for(both_placed, timeout=5)
