"""Signing vectors (known key, secret and message give a known signature), the request each profile writes,
the server-clock estimate and the host ban, all without a server."""

from __future__ import annotations

import base64
import dataclasses
import json
from urllib.parse import parse_qsl, urlsplit

import pytest

from conftest import ROOT, FakeClock
from thread_client.io.request_writer import RequestWriter
from thread_client.limits.host_ban import HostBan
from thread_client.limits.timestamps import ServerClock, ServerTimestamps
from thread_client.profile import Secret, SignedParts, Signer, Signing, load_profile
from thread_client.profile.model import USER_AGENT

# RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
JEFE = "what do ya want for nothing?"
JEFE_SHA256 = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
JEFE_SHA512 = ("164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fd"
               "caeab1a34d4a6b4b636e070a38bce737")


def parts(query: str = "", body: str = "", nonce: str = "", path: str = "/p") -> SignedParts:
    return SignedParts("POST", path, query, body, nonce, "", "KEY", "")


@pytest.mark.parametrize("algorithm, hex_digest", [("hmac-sha256", JEFE_SHA256), ("hmac-sha512", JEFE_SHA512)])
@pytest.mark.parametrize("secret_encoding, secret", [("raw", "Jefe"), ("base64", base64.b64encode(b"Jefe").decode())])
def test_known_vectors_in_both_algorithms_encodings_and_outputs(algorithm, hex_digest, secret_encoding, secret):
    signing = Signing(algorithm=algorithm, message="{query}", secret_encoding=secret_encoding)
    assert Signer(signing, Secret(secret)).sign(parts(query=JEFE)) == hex_digest
    as_base64 = Signer(dataclasses.replace(signing, output="base64"), Secret(secret)).sign(parts(query=JEFE))
    assert base64.b64decode(as_base64).hex() == hex_digest


def test_target_is_the_path_with_its_query_where_there_is_one():
    """OKX signs the request path with its query (``/api/v5/trade/order?instId=BTC-USDT&clOrdId=o1``), and a bare
    path where there is none: ``{target}``, never ``{path}?{query}`` with a stray ``?``."""
    signing = Signing(message="{method}{target}")
    get = SignedParts("GET", "/api/v5/trade/order", "instId=BTC-USDT&clOrdId=o1", "", "", "", "KEY", "")
    assert get.target == "/api/v5/trade/order?instId=BTC-USDT&clOrdId=o1"
    assert Signer(signing, Secret("s")).sign(get) == Signer(Signing(message="GET" + get.target), Secret("s")).sign(get)
    assert parts(path="/api/v5/trade/order").target == "/api/v5/trade/order"


def test_the_binance_docs_example_signature():
    # developers.binance.com, "SIGNED endpoint examples for POST /api/v3/order" (HMAC keys).
    secret = Secret("NhqPtmdSJYdKjVHjA7PZj4Mge3R5YNiP1e3UZjInClVN65XAbvqqM6A7H5fATj0j")
    query = "symbol=LTCBTC&side=BUY&type=LIMIT&timeInForce=GTC&quantity=1&price=0.1&recvWindow=5000&timestamp=1499827319559"
    signing = load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml")).sign
    assert Signer(signing, secret).sign(parts(query=query)) == "c8db56825ae71d6d79447849e617115f4a920fa2acdcab2b053c4b2838bd6b71"


def test_the_kraken_docs_example_signature_through_the_example_hook():
    # docs.kraken.com, "Spot REST authentication": the worked example of API-Sign.
    secret = Secret("kQH5HW/8p1uGOVjbgWA7FunAmGO8lsSUXNsu3eow76sz84Q18fWxnyRzBHCd3pd5nE9qa99HAZtuZuj6F1huXg==")
    body = "nonce=1616492376594&ordertype=limit&pair=XBTUSD&price=37500&type=buy&volume=1.25"
    signing = load_profile(str(ROOT / "examples" / "profiles" / "kraken-like.toml")).sign
    signature = Signer(signing, secret).sign(parts(body=body, nonce="1616492376594", path="/0/private/AddOrder"))
    assert signature == "4/dpxb3iT4tp/ZCVEwSnEsLxx0bqyhLpdfOpc6fn7OR8+UClSV5n9E6aSS8MPtnRfp32bAb0nmbRn6H8ndwLUQ=="


def test_a_secret_never_shows_itself():
    secret = Secret("s3cret")
    assert "s3cret" not in repr(secret) and "s3cret" not in str(secret) and "s3cret" not in f"{secret!r} {secret}"
    assert secret.reveal() == "s3cret" and secret == Secret("s3cret") and secret != Secret("other")


def test_the_reference_profile_writes_today_s_request_exactly():
    writer = RequestWriter("", "KEY", load_profile().request, load_profile().nonce)
    agent = {"User-Agent": USER_AGENT}  # the one header every request carries
    assert writer.write(17, "a b", None) == ("GET", "/api/request?api_key=KEY&nonce=17&req_id=a%20b", None, agent)
    assert writer.write(17, "x", {"side": "buy"}) == ("GET", "/api/request?api_key=KEY&nonce=17&req_id=x&side=buy",
                                                      None, agent)
    form = dataclasses.replace(load_profile().request, params_in="form")  # --params-in form: as before
    method, target, body, headers = RequestWriter("/pre", "KEY", form).write(17, "x", {"side": "buy"})
    assert (method, target, body, headers) == ("GET", "/pre/api/request?api_key=KEY&nonce=17&req_id=x", b"side=buy",
                                               {**agent, "Content-Type": "application/x-www-form-urlencoded"})
    assert RequestWriter("", "KEY", form).write(17, "x", None) == (
        "GET", "/api/request?api_key=KEY&nonce=17&req_id=x", None, agent)  # no params: no body, as before


def test_fields_in_body_puts_the_profile_s_own_params_with_the_user_s():
    request = dataclasses.replace(load_profile().request, method="POST", params_in="form", fields_in="body")
    _, target, body, _ = RequestWriter("", "KEY", request).write(17, "x", {"side": "buy"})
    assert (target, body) == ("/api/request", b"api_key=KEY&nonce=17&req_id=x&side=buy")
    _, target, body, _ = RequestWriter("", "KEY", dataclasses.replace(request, params_in="json")).write(17, "x", None)
    assert (target, json.loads(body)) == ("/api/request", {"api_key": "KEY", "nonce": "17", "req_id": "x"})


def test_the_signed_json_profile_puts_key_time_window_and_signature_in_headers_over_the_body():
    profile = load_profile("signed-post-json")
    writer = RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, Signer(profile.sign, Secret("s")))
    method, target, body, headers = writer.write(1_700_000_000_123, "r1", {"qty": "2"})
    assert (method, target) == ("POST", "/api/request")
    assert json.loads(body) == {"req_id": "r1", "qty": "2"}
    assert headers["X-Api-Key"] == "KEY" and headers["X-Timestamp"] == "1700000000123"
    assert headers["X-Recv-Window"] == "5000" and headers["Content-Type"] == "application/json"
    expected = Signer(Signing(message="{timestamp}{key}{recv_window}{body}"), Secret("s")).sign(
        SignedParts("POST", "/api/request", "", body.decode(), "1700000000123", "1700000000123", "KEY", "5000"))
    assert headers["X-Signature"] == expected


def test_a_signature_param_goes_last_in_the_query_over_everything_before_it():
    profile = load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml"))
    writer = RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, Signer(profile.sign, Secret("s")))
    _, target, body, headers = writer.write(1_499_827_319_559, "order-1", {"symbol": "LTCBTC"})
    query = urlsplit(target).query
    names = [name for name, _ in parse_qsl(query)]
    assert names == ["timestamp", "recvWindow", "newClientOrderId", "symbol", "signature"] and body is None
    signed, _, signature = query.rpartition("&signature=")
    assert signature == Signer(profile.sign, Secret("s")).sign(parts(query=signed))
    assert headers == {"User-Agent": USER_AGENT, "X-MBX-APIKEY": "KEY"}


def test_the_server_clock_is_learnt_from_date_headers_to_well_under_a_second():
    wall = FakeClock(1_700_000_000_000.0)  # our clock, ms; the server's runs 30 250 ms behind
    clock = ServerClock(wall, date_lag_ms=0)  # a server that writes each Date as it answers
    offset = -30_250.0
    for step in range(40):
        sent = wall()
        wall.advance(7.0)  # the server stamps the answer 7 ms after the send
        server_now = wall() + offset
        date = _http_date(server_now)
        wall.advance(5.0)
        clock.observe_date(date, sent, wall())
        wall.advance(130.0 + step)  # sends spread over several seconds, across second boundaries
    assert clock.learnt and abs(clock.offset_ms - offset) < 50
    assert abs(ServerTimestamps(clock).next() - (wall() + offset)) < 50
    assert abs(ServerTimestamps(clock, per_ms=1000).next() - 1000 * (wall() + offset)) < 50_000


def _http_date(ms: float) -> str:
    import email.utils
    return email.utils.formatdate(ms / 1000, usegmt=True)


def test_a_ban_holds_every_key_an_answer_in_flight_extends_nothing_and_a_repeat_lasts_twice_as_long():
    clock = FakeClock()
    holds: list[float] = []
    ban = HostBan(holds.append, first_pause=60, memory=3600, clock=clock)
    assert ban.banned(5.0) == 5.0 and holds == [5.0]
    clock.advance(1)
    assert ban.banned(4.0) == 0.0 and holds == [5.0, 4.0]  # another key's send, in flight when the ban began:
    # nothing new, but its worker holds the keys itself (it may read its answer before the first one's hold lands)
    clock.advance(10)  # the ban is over; a new one within the memory is a repeat
    assert ban.banned(5.0) == 10.0
    clock.advance(20)
    assert ban.banned(None) == 60.0  # no length named: the first pause, longer than twice the last
    clock.advance(60 + 3601)
    assert ban.banned(5.0) == 5.0  # long after: forgotten
    assert holds == [5.0, 4.0, 10.0, 60.0, 5.0] and ban.bans == 4


@pytest.mark.parametrize("retry_after, pause", [(0.0, 1.0), (7200.0, 7200.0), (1e12, 259200.0), (float("inf"), 259200.0)])
def test_a_ban_pause_lies_between_a_second_and_three_days(retry_after, pause):
    holds: list[float] = []
    ban = HostBan(holds.append, clock=FakeClock())
    assert ban.banned(retry_after) == pause and holds == [pause]


def test_a_profile_without_nonce_or_id_sends_neither_and_a_json_get_carries_its_fields_in_the_body():
    profile = dataclasses.replace(
        load_profile(), request=dataclasses.replace(load_profile().request, id_param="", params_in="json",
                                                    fields_in="body", headers=(("Accept", "application/json"),)),
        nonce=dataclasses.replace(load_profile().nonce, style="none", param=""))
    method, target, body, headers = RequestWriter("", "KEY", profile.request, profile.nonce).write(5, "r", {"a": "1"})
    assert (method, target) == ("GET", "/api/request")
    assert json.loads(body) == {"api_key": "KEY", "a": "1"}
    assert headers == {"User-Agent": USER_AGENT, "Accept": "application/json", "Content-Type": "application/json"}
