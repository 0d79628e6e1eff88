"""What a status ask carries: the order's client id (the line's own, else its id) and the params of the request
``[settle] params`` names (Binance's ``GET /api/v3/order`` finds no order without its ``symbol``)."""

from __future__ import annotations

import time

import pytest

from conftest import ROOT
from fakes import answer
from test_worker_paths import Rig
from thread_client.policy.answers import AnswerTable
from thread_client.policy.order_status import StatusTable
from thread_client.profile import load_profile, profile_toml, read_profile
from thread_client.profile.reader import ProfileError
from thread_client.request import Request

BINANCE = load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml"))
ORDERS = (ROOT / "examples" / "profiles" / "reference-orders.toml").read_text()


def orders_profile(settle_lines: str = "", client_id: str = "req_id"):
    """The reference order profile, its requests' client id in ``client_id``, ``settle_lines`` added to [settle]."""
    text = ORDERS.replace('client_id = "req_id"', f'client_id = "{client_id}"')
    return read_profile(text.replace("[settle]\n", f"[settle]\n{settle_lines}"), "orders.toml")


def test_settle_params_read_back_from_show_and_are_copied_from_the_request_into_each_ask():
    profile = orders_profile('params = ["symbol", "side"]\n')
    assert profile.settle.params == ("symbol", "side")
    assert read_profile(profile_toml(profile), "shown.toml") == profile
    request = Request("r1", 0.0, params={"symbol": "BTCUSDT", "side": "BUY", "qty": "1"})
    assert StatusTable(profile).params(request) == {"symbol": "BTCUSDT", "side": "BUY", "clientId": "r1"}
    assert StatusTable(orders_profile()).params(request) == {"clientId": "r1"}  # none named: none copied


def test_a_status_ask_names_the_order_by_the_line_s_own_client_id_not_the_request_id():
    """A line may carry its client id apart from its id (``clOrd``): the exchange knows the order by that one, so
    an ask by the request's id finds nothing, and the order would be sent twice."""
    table = StatusTable(orders_profile(client_id="clOrd"))
    request = Request("r1", 0.0, params={"clOrd": "C-7"})
    assert table.client_id(request) == "C-7" and table.params(request) == {"clientId": "C-7"}
    assert table.client_id(Request("r2", 0.0)) == "r2"


@pytest.mark.parametrize("lines, line, words", [
    ('params = ["symbol", 5]\n', 89, "params must each be a param's name, got 5"),
    ('params = ["symbol", ""]\n', 89, "params must each be a param's name, got ''"),
    ('params = ["symbol", "symbol"]\n', 89, "params names 'symbol' twice"),
    ('params = ["clientId"]\n', 89, "params names 'clientId', the client id's own param"),
    ('params = "symbol"\n', 89, "params must be an array"),
])
def test_a_settle_param_that_names_nothing_or_the_client_id_is_refused_at_its_line(lines, line, words):
    with pytest.raises(ProfileError) as raised:
        orders_profile(lines)
    assert any(error.startswith(f"orders.toml:{line}: ") and words in error for error in raised.value.errors), (
        raised.value.errors)


def test_the_binance_like_profile_asks_an_order_s_status_with_its_symbol():
    """-1007, execution status unknown: the ask names the order by symbol and origClientOrderId, and finds it."""
    unknown = answer(500, {"code": -1007, "msg": "Timeout waiting for response from backend server."})
    filled = answer(200, {"symbol": "BTCUSDT", "clientOrderId": "r1", "status": "FILLED"})
    r = Rig(unknown, filled, answers=AnswerTable(BINANCE), status=StatusTable(BINANCE))
    assert r.queues.submit(Request("r1", time.monotonic(), params={"symbol": "BTCUSDT", "side": "BUY"}))
    r.handle_next()
    ask = r.transport.calls[1]
    assert (ask.req_id, ask.params, ask.method, ask.path) == (
        "", {"symbol": "BTCUSDT", "origClientOrderId": "r1"}, "GET", "/api/v3/order")
    assert r.queues.counts().accepted == 1
    r.assert_clean()
