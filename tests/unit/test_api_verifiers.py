"""The verifiers of tests/api_verifiers.py hold the example profiles to their APIs' docs, and they can say no: a
request the example writes is accepted at the moment it was stamped, and refused with the documented code outside
the API's timestamp window, with another secret, or with a byte of its body changed."""

from __future__ import annotations

import dataclasses
from email.message import Message
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from api_verifiers import BinanceLike, BybitLike, CoinbaseAdvancedLike, GithubLike, OkxLike, Received
from conftest import ROOT
from thread_client.io.request_writer import RequestWriter
from thread_client.profile import Secret, Signer, load_profile

STAMP_MS = 1_764_051_065_123  # when the request is stamped, on the server's clock
ORDER = {"symbol": "BTCUSDT", "side": "BUY", "type": "MARKET", "quantity": "0.001"}


def written(example: str, key: str, secret: str, params: dict, **extras: str) -> Received:
    """The request the example profile writes for ``key`` at ``STAMP_MS`` with the id "o1", as a server reads it."""
    profile = load_profile(str(ROOT / "examples" / "profiles" / f"{example}.toml"))
    signer = Signer(profile.sign, Secret(secret)) if profile.sign is not None else None
    writer = RequestWriter("", key, profile.request, profile.nonce, profile.sign, signer, Secret(secret),
                           {name: Secret(value) for name, value in extras.items()})
    method, target, body, headers = writer.write(STAMP_MS, "o1", params)
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
