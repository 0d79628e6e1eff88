"""The verifiers of tests/api_verifiers.py hold the example profiles to their APIs' docs, and they can say no: a
request the example writes is accepted at the moment it was stamped, and refused with the documented code outside
the API's timestamp window, with another secret, or with a byte of its body changed. Every exchange example's
status ask ([settle]), written and signed as the daemon writes it, is answered by its verifier for an order it
placed and for one it did not, and the example reads those answers found and not found."""

from __future__ import annotations

import base64
import dataclasses
import json
from email.message import Message
from urllib.parse import parse_qsl, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from api_verifiers import (Answer, BinanceLike, BybitLike, CoinbaseAdvancedLike, DocsApi, GithubLike, KrakenLike,
                           OkxLike, Received)
from conftest import ROOT
from thread_client.io.request_writer import RequestWriter
from thread_client.policy.answers import AnswerTable, Outcome
from thread_client.policy.order_status import Finding, StatusTable
from thread_client.policy.retry import KeyStep, RequestStep, RetryPolicy
from thread_client.profile import Secret, Signer, load_profile
from thread_client.request import Request

STAMP_MS = 1_764_051_065_123  # when the request is stamped, on the server's clock
ORDER = {"symbol": "BTCUSDT", "side": "BUY", "type": "MARKET", "quantity": "0.001"}


def written(example: str, key: str, secret: str, params: dict, *, asking: str = "", stamp: int = STAMP_MS,
            **extras: str) -> Received:
    """The request the example profile writes for ``key`` at ``stamp`` with the id "o1", as a server reads it; with
    ``asking``, the status ask ([settle]) about the order whose client id that is, ``params`` its order's, written
    in the shape the profile gives its asks."""
    profile = load_profile(str(ROOT / "examples" / "profiles" / f"{example}.toml"))
    signer = Signer(profile.sign, Secret(secret)) if profile.sign is not None else None
    shape = profile.settle.ask_shape(profile.request) if asking else profile.request
    writer = RequestWriter("", key, shape, profile.nonce, profile.sign, signer, Secret(secret),
                           {name: Secret(value) for name, value in extras.items()})
    if asking:
        status = StatusTable(profile)
        method, target, body, headers = writer.write(stamp, "", status.params(Request(asking, 0.0, params)),
                                                     status.method, status.path)
    else:
        method, target, body, headers = writer.write(stamp, "o1", params)
    message = Message()
    for name, value in headers.items():
        message[name] = value
    return Received(method, urlsplit(target).path, urlsplit(target).query, message, body or b"")


def tampered(request: Received) -> Received:
    return dataclasses.replace(request, body=request.body.replace(b'"2"', b'"3"'))


def test_okx_like_within_30_s_of_the_server_s_clock_only():
    okx = OkxLike({"K": ("s3cret", "pass phrase")})
    request = written("okx-like", "K", "s3cret", {"instId": "BTC-USDT", "sz": "2"}, passphrase="pass phrase")
    assert request.headers["OK-ACCESS-TIMESTAMP"] == "2025-11-25T06:11:05.123Z"
    assert okx.answer(request, STAMP_MS + 29_000).accepted
    assert okx.answer(request, STAMP_MS + 31_000).body["code"] == "50102"
    assert okx.answer(tampered(request), STAMP_MS).body["code"] == "50113"
    wrong = written("okx-like", "K", "other", {"instId": "BTC-USDT", "sz": "2"}, passphrase="pass phrase")
    assert okx.answer(wrong, STAMP_MS).body["code"] == "50113"
    no_passphrase = written("okx-like", "K", "s3cret", {"sz": "2"}, passphrase="guess")
    assert okx.answer(no_passphrase, STAMP_MS).body["code"] == "50105"


@pytest.mark.parametrize("server_ms, code", [
    (STAMP_MS, 0), (STAMP_MS + 5000, 0), (STAMP_MS + 5001, 10002), (STAMP_MS - 999, 0), (STAMP_MS - 1000, 10002),
])
def test_bybit_like_within_the_receive_window_only(server_ms, code):
    request = written("bybit-like", "K", "s3cret", {"category": "spot", "qty": "2"})
    assert BybitLike({"K": "s3cret"}).answer(request, server_ms).body["retCode"] == code


def test_bybit_like_refuses_another_secret_or_body_as_an_error_sign():
    bybit = BybitLike({"K": "s3cret"})
    request = written("bybit-like", "K", "s3cret", {"category": "spot", "qty": "2"})
    assert bybit.answer(tampered(request), STAMP_MS).body["retCode"] == 10004
    assert bybit.answer(written("bybit-like", "K", "other", {"qty": "2"}), STAMP_MS).body["retCode"] == 10004


@pytest.mark.parametrize("server_ms, code", [(STAMP_MS, None), (STAMP_MS + 5000, None), (STAMP_MS + 5001, -1021),
                                             (STAMP_MS - 999, None), (STAMP_MS - 1000, -1021)])
def test_binance_spot_like_within_the_receive_window_only(server_ms, code):
    answer = BinanceLike({"K": "s3cret"}).answer(written("binance-spot-like", "K", "s3cret", ORDER), server_ms)
    assert answer.body.get("code") == code and answer.accepted is (code is None)


def test_binance_spot_like_refuses_another_secret_and_finds_an_order_only_by_its_symbol():
    binance = BinanceLike({"K": "s3cret"})
    assert binance.answer(written("binance-spot-like", "K", "other", ORDER), STAMP_MS).body["code"] == -1022
    assert binance.answer(written("binance-spot-like", "K", "s3cret", ORDER), STAMP_MS).accepted
    again = binance.answer(written("binance-spot-like", "K", "s3cret", ORDER), STAMP_MS)
    assert again.body == {"code": -2010, "msg": "Duplicate order sent."}
    asked = {"origClientOrderId": "o1"}
    for params, code in ((asked, -1102), ({**asked, "symbol": "ETHUSDT"}, -2013), ({**asked, "symbol": "BTCUSDT"}, None)):
        status = dataclasses.replace(written("binance-spot-like", "K", "s3cret", params), method="GET")
        assert binance.answer(status, STAMP_MS).body.get("code") == code, params


def test_binance_spot_like_reads_a_waf_refusal_as_a_pause_that_keeps_the_key_and_places_nothing():
    """Issue 41, 4.9: Binance's 403 is its firewall's (a WAF rule: a rate limit or a security block), given before
    the API reads the key or places anything. The example reads it unavailable: the key is kept (never retired), and
    the order sent again is placed, once."""
    binance = BinanceLike({"K": "s3cret"}, waf_once=frozenset({"o1"}))
    refused = binance.answer(written("binance-spot-like", "K", "s3cret", ORDER), STAMP_MS)
    assert (refused.status, refused.accepted, binance.orders) == (403, False, {})
    table = AnswerTable(load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml")))
    reading = table.classify(refused.status, refused.body.encode(), "o1")
    assert reading.outcome is Outcome.UNAVAILABLE and not reading.outcome.ambiguous
    action = RetryPolicy().decide(reading.outcome, 0, None, detail=reading.detail)
    assert (action.key, action.request) == (KeyStep.KEEP, RequestStep.RETRY), action
    assert binance.answer(written("binance-spot-like", "K", "s3cret", ORDER), STAMP_MS).accepted
    assert list(binance.orders) == ["o1"]


def test_coinbase_advanced_like_takes_a_token_for_this_request_once_from_this_key_only():
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    coinbase = CoinbaseAdvancedLike({"organizations/o/apiKeys/k": public})
    request = written("coinbase-advanced-like", "organizations/o/apiKeys/k", pem, {"product_id": "BTC-USD"})
    assert coinbase.answer(request, STAMP_MS).accepted
    assert coinbase.answer(request, STAMP_MS).body == "Unauthorized"  # its nonce, seen once already
    elsewhere = written("coinbase-advanced-like", "organizations/o/apiKeys/k", pem, {"product_id": "BTC-USD"})
    assert coinbase.answer(dataclasses.replace(elsewhere, path="/api/v3/brokerage/accounts"), STAMP_MS).body == (
        "Unauthorized")  # the token names another request
    other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    forged = written("coinbase-advanced-like", "organizations/o/apiKeys/k", other.decode(), {"product_id": "BTC-USD"})
    assert coinbase.answer(forged, STAMP_MS).body == "Unauthorized"


def test_github_like_wants_its_token_its_version_and_a_user_agent():
    github = GithubLike({"ghp_t": "octocat"})
    request = written("github-like", "octocat", "ghp_t", {"bio": "x"})
    assert github.answer(request, STAMP_MS).accepted and request.headers["User-Agent"] == "octocat"
    assert github.answer(written("github-like", "octocat", "ghp_x", {"bio": "x"}), STAMP_MS).status == 401
    old = dataclasses.replace(request, headers=Message())
    for name, value in request.headers.items():
        old.headers[name] = "1999-01-01" if name == "X-GitHub-Api-Version" else value
    assert github.answer(old, STAMP_MS).status == 400


# -- the status asks ([settle]) of the exchange examples -----------------------------------------------------------

def finding(example: str, answer: Answer, client_id: str) -> Finding:
    """What the example's [settle] rules read ``answer`` (a status ask's, about ``client_id``) as."""
    body = answer.body.encode() if isinstance(answer.body, str) else json.dumps(answer.body).encode()
    return StatusTable(load_profile(str(ROOT / "examples" / "profiles" / f"{example}.toml"))).read(
        answer.status, body, client_id)[0]


def assert_asks_read(example: str, exchange: DocsApi, key: str, secret: str, order: dict, unplaced: dict | None = None,
                     **extras: str) -> None:
    """The order "o1" placed, the example's status ask about it is found, and one about "o2", never placed, is not
    found (asked with the params ``unplaced``, else the order's), both as ``exchange`` answers them."""
    stamp = iter(range(STAMP_MS, STAMP_MS + 100))  # a counter nonce (Kraken) wants each next one greater
    assert exchange.answer(written(example, key, secret, order, stamp=next(stamp), **extras), STAMP_MS).accepted
    for client_id, params, expected in (("o1", order, Finding.FOUND), ("o2", unplaced or order, Finding.NOT_FOUND)):
        ask = written(example, key, secret, params, asking=client_id, stamp=next(stamp), **extras)
        answer = exchange.answer(ask, STAMP_MS)
        assert (ask.body == b"") is (ask.method == "GET"), ask  # a GET's params travel in its query string
        assert finding(example, answer, client_id) is expected, (client_id, answer)


def test_kraken_like_asks_query_orders_by_cl_ord_id():
    secret = base64.b64encode(b"kraken secret").decode()
    kraken = KrakenLike({"K": secret})
    assert_asks_read("kraken-like", kraken, "K", secret, {"pair": "XBTUSD", "type": "buy", "ordertype": "market",
                                                           "volume": "1.25"})
    ask = written("kraken-like", "K", secret, {}, asking="o1", stamp=STAMP_MS + 200)
    assert (ask.method, ask.path, ask.query_params(), dict(parse_qsl(ask.body.decode()))) == (
        "POST", "/0/private/QueryOrders", {}, {"nonce": str(STAMP_MS + 200), "cl_ord_id": "o1"})
    assert finding("kraken-like", Answer(200, {"error": ["EOrder:Unknown order"]}), "o1") is Finding.NOT_FOUND
    other = {"error": [], "result": {"OQCLML-BW3P3-BUCMWZ": {"status": "closed", "cl_ord_id": "o9"}}}
    assert finding("kraken-like", Answer(200, other), "o1") is Finding.UNKNOWN  # another order: nothing of this one
    refused = {"error": ["EGeneral:Invalid arguments:txid"]}  # should Kraken want a txid after all: asked again
    assert finding("kraken-like", Answer(200, refused), "o1") is Finding.UNKNOWN


def test_kraken_like_reads_a_status_answer_by_its_error_array_and_takes_a_warning_for_no_error():
    """Issue 41, 4.9: a QueryOrders answer with warnings only and no order is "not found", as one with no error; an
    error beside a warning says nothing of the order, whatever it is."""
    empty_warned = {"error": ["WGeneral:Deprecated field"], "result": {}}
    assert finding("kraken-like", Answer(200, empty_warned), "o1") is Finding.NOT_FOUND
    refused = {"error": ["WGeneral:Deprecated field", "EGeneral:Invalid arguments:txid"]}
    assert finding("kraken-like", Answer(200, refused), "o1") is Finding.UNKNOWN
    unknown_order = {"error": ["WGeneral:Deprecated field", "EOrder:Unknown order"]}
    assert finding("kraken-like", Answer(200, unknown_order), "o1") is Finding.NOT_FOUND
    found = {"error": ["WGeneral:Deprecated field"], "result": {"OQCLML-BW3P3-BUCMWZ": {"cl_ord_id": "o1"}}}
    assert finding("kraken-like", Answer(200, found), "o1") is Finding.FOUND


def test_okx_like_asks_get_order_details_by_inst_id_and_cl_ord_id_in_the_signed_query():
    okx = OkxLike({"K": ("s3cret", "pass phrase")})
    order = {"instId": "BTC-USDT", "tdMode": "cash", "side": "buy", "ordType": "market", "sz": "2"}
    assert_asks_read("okx-like", okx, "K", "s3cret", order, passphrase="pass phrase")
    ask = written("okx-like", "K", "s3cret", order, asking="o1", passphrase="pass phrase")
    assert ask.query_params() == {"instId": "BTC-USDT", "clOrdId": "o1"}
    assert okx.answer(dataclasses.replace(ask, query="instId=ETH-USDT&clOrdId=o1"), STAMP_MS).body["code"] == "50113"


def test_bybit_like_asks_the_realtime_orders_by_category_symbol_and_order_link_id():
    bybit = BybitLike({"K": "s3cret"})
    order = {"category": "spot", "symbol": "BTCUSDT", "side": "Buy", "orderType": "Market", "qty": "2"}
    assert_asks_read("bybit-like", bybit, "K", "s3cret", order)
    ask = written("bybit-like", "K", "s3cret", order, asking="o1")
    assert ask.query_params() == {"category": "spot", "symbol": "BTCUSDT", "orderLinkId": "o1"}


def test_coinbase_advanced_like_asks_by_sending_the_order_again_under_its_client_order_id():
    """No Coinbase endpoint finds an order by client_order_id; the order sent again under it places nothing where
    the id is held, and answers with that order: found. Refused, nothing holds the id: not found."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    coinbase = CoinbaseAdvancedLike({"organizations/o/apiKeys/k": public})
    order = {"product_id": "BTC-USD", "side": "BUY", "order_configuration": {"market_market_ioc": {"base_size": "1"}}}
    assert_asks_read("coinbase-advanced-like", coinbase, "organizations/o/apiKeys/k", pem, order,
                     unplaced={**order, "product_id": "NOPE-USD"})
    ask = written("coinbase-advanced-like", "organizations/o/apiKeys/k", pem, {**order, "leverage": "2"}, asking="o3")
    assert json.loads(ask.body) == {**order, "leverage": "2", "client_order_id": "o3"}  # the whole order, as it was
    assert finding("coinbase-advanced-like", coinbase.answer(ask, STAMP_MS), "o3") is Finding.FOUND
    assert [placed["client_order_id"] for placed in coinbase.placed] == ["o1", "o3"]  # each once: the ask placed o3


def test_binance_spot_like_asks_get_order_by_symbol_and_orig_client_order_id():
    assert_asks_read("binance-spot-like", BinanceLike({"K": "s3cret"}), "K", "s3cret", ORDER)
