"""Verifiers built from six APIs' public docs (as of 2026-11): small HTTP servers that check what each API's
docs say a request must carry (its credential, its signature, its timestamp window) and answer with the bodies
those docs show, so an example profile is shown to sign right without the live exchange. Each exchange keeps
the orders it placed (``placed``, every copy, in order) and answers its order-status endpoint about them, the way
its docs show for an order it has and one it has not; ``unknown_once`` names client ids whose first copy is
placed but answered "execution status unknown" in that exchange's own words (or, where the docs show none, a
200 no rule can read), so a test plays the send in doubt that a profile's ``[settle]`` is for.

Each API is a ``DocsApi``: ``answer`` reads one request as its docs say and returns the documented answer.
A ``Verifier`` serves one on a loopback port, on a clock ``skew_ms`` off ours (its time endpoint and every
``Date`` say so), and keeps every request it accepted. By hand (the arguments per API: ``API_ARGUMENTS``):
``PYTHONPATH=tests .venv/bin/python -m api_verifiers --port 8443 okx-like KEY SECRET PASSPHRASE``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import hmac
import http.server
import itertools
import json
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.message import Message
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

import jwt

__all__ = ["API_ARGUMENTS", "Answer", "BinanceLike", "BybitLike", "CoinbaseAdvancedLike", "DocsApi", "GithubLike",
           "KrakenLike", "OkxLike", "Received", "Verifier"]


@dataclass(frozen=True, slots=True)
class Received:
    """One request as it came in: the path and the query apart, the body as sent."""

    method: str
    path: str
    query: str
    headers: Message
    body: bytes

    def json_body(self) -> dict:
        """The body as a JSON object; ``{}`` for none or anything else."""
        try:
            value = json.loads(self.body or b"{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def query_params(self) -> dict[str, str]:
        """The query string's params (a GET's, as an exchange reads them: never from a body)."""
        return dict(parse_qsl(self.query, keep_blank_values=True))


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API answers: a status and a JSON value (a str goes as plain text); ``accepted`` if it took it."""

    status: int
    body: object
    accepted: bool = False


class DocsApi(Protocol):
    """One API as its docs describe it. ``time_path``: its server-time endpoint ("" for none)."""

    time_path: str

    def time(self, now_ms: int) -> Answer:
        """The time endpoint's answer at the server's ``now_ms``."""

    def answer(self, request: Received, now_ms: int) -> Answer:
        """The answer to ``request`` at the server's ``now_ms``."""


class OkxLike:
    """www.okx.com/docs-v5/en, "REST Authentication", "Error Code", "Place order", "Get order details", "Get system
    time": headers OK-ACCESS-KEY, -PASSPHRASE, -TIMESTAMP (ISO-8601 UTC with ms, within 30 s of the server's clock)
    and -SIGN, base64 HMAC-SHA256 of the secret over timestamp + method + request path (with its query) + body.
    ``POST /api/v5/trade/order`` places an order under ``clOrdId`` (every order here fills at once, and 51016
    refuses only a clOrdId a live order holds: one sent again places a second order); ``GET /api/v5/trade/order``
    finds one by ``instId`` (mandatory) and ``clOrdId`` in its query string (51603 "Order does not exist" if
    none). An id in ``unknown_once`` is placed, its first answer 50004 "API endpoint request timeout"."""

    time_path = "/api/v5/public/time"
    _ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

    def __init__(self, credentials: dict[str, tuple[str, str]], unknown_once: frozenset[str] = frozenset()) -> None:
        """``credentials``: each key's (secret, passphrase)."""
        self._credentials = credentials
        self._unknown_once = set(unknown_once)
        self._order_ids = itertools.count(312269865356374016)
        self.placed: list[dict] = []  # every order placed, in order (a client id twice: two orders)

    def time(self, now_ms: int) -> Answer:
        return Answer(200, {"code": "0", "msg": "", "data": [{"ts": str(now_ms)}]})

    def answer(self, request: Received, now_ms: int) -> Answer:
        headers = request.headers
        key, stamp = headers.get("OK-ACCESS-KEY", ""), headers.get("OK-ACCESS-TIMESTAMP", "")
        if key not in self._credentials:
            return self._error(401, "50111", "Invalid OK-ACCESS-KEY")
        if not self._ISO.fullmatch(stamp):
            return self._error(401, "50112", "Invalid OK-ACCESS-TIMESTAMP")
        stamp_ms = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000
        if abs(now_ms - stamp_ms) > 30_000:
            return self._error(401, "50102", "Timestamp request expired")
        secret, passphrase = self._credentials[key]
        if not hmac.compare_digest(headers.get("OK-ACCESS-PASSPHRASE", ""), passphrase):
            return self._error(401, "50105", "Invalid OK-ACCESS-PASSPHRASE")
        target = request.path + (f"?{request.query}" if request.query else "")
        prehash = (stamp + request.method + target).encode() + request.body
        expected = base64.b64encode(hmac.new(secret.encode(), prehash, hashlib.sha256).digest()).decode()
        if not hmac.compare_digest(headers.get("OK-ACCESS-SIGN", ""), expected):
            return self._error(401, "50113", "Invalid Sign")
        if (request.method, request.path) == ("GET", "/api/v5/trade/order"):
            return self._details(request.query_params())
        if (request.method, request.path) == ("POST", "/api/v5/trade/order"):
            return self._place(request.json_body(), now_ms)
        return self._error(404, "404", "Not Found")

    def _place(self, order: dict, now_ms: int) -> Answer:
        client_id = str(order.get("clOrdId", ""))
        placed = {"instId": order.get("instId", ""), "ordId": str(next(self._order_ids)), "clOrdId": client_id,
                  "side": order.get("side", ""), "sz": str(order.get("sz", "")), "state": "filled",
                  "cTime": str(now_ms)}
        self.placed.append(placed)
        if client_id in self._unknown_once:
            self._unknown_once.discard(client_id)
            return Answer(400, {"code": "50004", "msg": "API endpoint request timeout (does not mean that the "
                                "request was successful or failed), please check the request result.", "data": []},
                          accepted=True)
        answered = {"clOrdId": client_id, "ordId": placed["ordId"], "tag": "", "ts": str(now_ms), "sCode": "0",
                    "sMsg": "Order placed"}
        return Answer(200, {"code": "0", "msg": "", "data": [answered], "inTime": str(now_ms * 1000),
                            "outTime": str(now_ms * 1000)}, accepted=True)

    def _details(self, params: dict[str, str]) -> Answer:
        if not params.get("instId"):
            return Answer(200, {"code": "51000", "msg": "Parameter instId error", "data": []})
        found = [order for order in self.placed
                 if order["clOrdId"] == params.get("clOrdId") and order["instId"] == params["instId"]]
        if not found:
            return Answer(200, {"code": "51603", "msg": "Order does not exist", "data": []})
        return Answer(200, {"code": "0", "msg": "", "data": [found[-1]]})

    @staticmethod
    def _error(status: int, code: str, message: str) -> Answer:
        return Answer(status, {"msg": message, "code": code})


class BybitLike:
    """bybit-exchange.github.io/docs/v5, "Integration Guidance", "Place Order", "Get Open & Closed Orders", "Get Bybit
    Server Time", "Error Codes": headers X-BAPI-API-KEY, X-BAPI-TIMESTAMP (ms), X-BAPI-RECV-WINDOW (default 5000)
    and X-BAPI-SIGN, hex HMAC-SHA256 of the secret over timestamp + key + recv_window + (query string or JSON body);
    the server takes a timestamp where server_time - recv_window <= timestamp < server_time + 1000.
    ``POST /v5/order/create`` places an order under ``orderLinkId`` (every order here fills at once);
    ``GET /v5/order/realtime`` lists, by ``category`` (mandatory), ``symbol`` and ``orderLinkId`` in its query
    string, the orders it has (an empty list if none). An id in ``unknown_once`` is placed, its first answer
    retCode 10000 "Server Timeout"."""

    time_path = "/v5/market/time"

    def __init__(self, secrets: dict[str, str], unknown_once: frozenset[str] = frozenset()) -> None:
        """``secrets``: each key's secret."""
        self._secrets = secrets
        self._unknown_once = set(unknown_once)
        self._order_ids = itertools.count(1321003749386327552)
        self.placed: list[dict] = []  # every order placed, in order (a client id twice: two orders)

    def time(self, now_ms: int) -> Answer:
        return Answer(200, {"retCode": 0, "retMsg": "OK", "result": {
            "timeSecond": str(now_ms // 1000), "timeNano": str(now_ms * 1_000_000)}, "retExtInfo": {}, "time": now_ms})

    def answer(self, request: Received, now_ms: int) -> Answer:
        headers = request.headers
        key, stamp = headers.get("X-BAPI-API-KEY", ""), headers.get("X-BAPI-TIMESTAMP", "")
        window = headers.get("X-BAPI-RECV-WINDOW", "5000")
        if key not in self._secrets:
            return self._error(10003, "API key is invalid.", now_ms)
        if not (stamp.isdigit() and window.isdigit() and now_ms - int(window) <= int(stamp) < now_ms + 1000):
            return self._error(10002, "invalid request, please check your server timestamp or recv_window param. "
                                      f"req_timestamp[{stamp}],server_timestamp[{now_ms}],recv_window[{window}]",
                               now_ms)
        payload = (stamp + key + window + request.query).encode() + request.body
        expected = hmac.new(self._secrets[key].encode(), payload, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(headers.get("X-BAPI-SIGN", ""), expected):
            return self._error(10004, "error sign! origin_string[...]", now_ms)
        if (request.method, request.path) == ("GET", "/v5/order/realtime"):
            return self._realtime(request.query_params(), now_ms)
        if (request.method, request.path) == ("POST", "/v5/order/create"):
            return self._place(request.json_body(), now_ms)
        return Answer(404, {"retCode": 404, "retMsg": "Not Found"})

    def _place(self, order: dict, now_ms: int) -> Answer:
        placed = {"orderId": str(next(self._order_ids)), "orderLinkId": str(order.get("orderLinkId", "")),
                  "category": order.get("category", ""), "symbol": order.get("symbol", ""),
                  "side": order.get("side", ""), "qty": str(order.get("qty", "")), "orderStatus": "Filled",
                  "createdTime": str(now_ms)}
        self.placed.append(placed)
        if placed["orderLinkId"] in self._unknown_once:
            self._unknown_once.discard(placed["orderLinkId"])
            return dataclasses.replace(self._error(10000, "Server Timeout", now_ms), accepted=True)
        result = {"orderId": placed["orderId"], "orderLinkId": placed["orderLinkId"]}
        return Answer(200, {"retCode": 0, "retMsg": "OK", "result": result, "retExtInfo": {}, "time": now_ms},
                      accepted=True)

    def _realtime(self, params: dict[str, str], now_ms: int) -> Answer:
        if not params.get("category"):
            return self._error(10001, "params error: Category is invalid", now_ms)
        listed = [order for order in self.placed if order["category"] == params["category"]
                  and params.get("symbol", order["symbol"]) == order["symbol"]
                  and params.get("orderLinkId", order["orderLinkId"]) == order["orderLinkId"]]
        result = {"category": params["category"], "list": listed[::-1], "nextPageCursor": ""}
        return Answer(200, {"retCode": 0, "retMsg": "OK", "result": result, "retExtInfo": {}, "time": now_ms})

    @staticmethod
    def _error(code: int, message: str, now_ms: int) -> Answer:
        return Answer(200, {"retCode": code, "retMsg": message, "result": {}, "retExtInfo": {}, "time": now_ms})


class BinanceLike:
    """developers.binance.com/docs/binance-spot-api-docs, "SIGNED Endpoint security", "Timing security", "New
    order", "Query order", "Error codes": the key in X-MBX-APIKEY; ``signature``, hex HMAC-SHA256 of the secret
    over the total params (the query string without it, then the body), sent last; a ``timestamp`` (ms) taken
    where ``timestamp < server time + 1000`` and ``server time - timestamp <= recvWindow`` (default 5000, at most
    60000). ``POST /api/v3/order`` places an order under ``newClientOrderId`` (-2010 "Duplicate order sent." for
    one it has); ``GET /api/v3/order`` finds one by ``symbol`` and ``origClientOrderId`` (-2013 if none). An id in
    ``unknown_once`` is placed, its first answer -1007, "execution status unknown", as a backend timeout gives. An
    order under an id in ``waf_once`` is first refused by the firewall in front ("HTTP Return Codes": 403, "a WAF
    (Web Application Firewall) rule has been violated"), before the API reads its key or places anything; the
    docs show no body for it: a firewall's own page."""

    time_path = "/api/v3/time"
    WAF_PAGE = "<html><head><title>403 Forbidden</title></head><body><h1>403 Forbidden</h1></body></html>"

    def __init__(self, secrets: dict[str, str], unknown_once: frozenset[str] = frozenset(),
                 waf_once: frozenset[str] = frozenset()) -> None:
        """``secrets``: each key's secret."""
        self._secrets = secrets
        self._unknown_once = set(unknown_once)
        self._waf_once = set(waf_once)
        self._order_ids = itertools.count(28)
        self.orders: dict[str, dict] = {}  # every order placed, by its client id

    def time(self, now_ms: int) -> Answer:
        return Answer(200, {"serverTime": now_ms})

    def answer(self, request: Received, now_ms: int) -> Answer:
        client_id = request.query_params().get("newClientOrderId")
        if (request.method, request.path) == ("POST", "/api/v3/order") and client_id in self._waf_once:
            self._waf_once.discard(client_id)
            return Answer(403, self.WAF_PAGE)
        key = request.headers.get("X-MBX-APIKEY", "")
        if key not in self._secrets:
            return self._error(401, -2015, "Invalid API-key, IP, or permissions for action.")
        unsigned, _, signature = request.query.rpartition("&signature=")
        expected = hmac.new(self._secrets[key].encode(), unsigned.encode() + request.body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature.lower(), expected):
            return self._error(400, -1022, "Signature for this request is not valid.")
        params = dict(parse_qsl(unsigned + ("&" if unsigned and request.body else "") + request.body.decode()))
        stamp, window = params.get("timestamp", ""), params.get("recvWindow", "5000")
        if not (stamp.isdigit() and window.isdigit() and int(window) <= 60_000
                and int(stamp) < now_ms + 1000 and now_ms - int(stamp) <= int(window)):
            return self._error(400, -1021, "Timestamp for this request is outside of the recvWindow.")
        if (request.method, request.path) == ("GET", "/api/v3/order"):
            return self._query(params)
        if (request.method, request.path) == ("POST", "/api/v3/order"):
            return self._place(params, now_ms)
        return self._error(404, -1000, "Not found.")

    def _place(self, params: dict[str, str], now_ms: int) -> Answer:
        client_id = params.get("newClientOrderId") or f"x-{next(self._order_ids)}"
        if client_id in self.orders:
            return self._error(400, -2010, "Duplicate order sent.")
        order = {"symbol": params.get("symbol", ""), "orderId": next(self._order_ids), "orderListId": -1,
                 "clientOrderId": client_id, "transactTime": now_ms, "status": "FILLED", "side": params.get("side")}
        self.orders[client_id] = order
        if client_id in self._unknown_once:
            self._unknown_once.discard(client_id)
            return self._error(503, -1007, "Timeout waiting for response from backend server. Send status "
                                           "unknown; execution status unknown.", accepted=True)
        return Answer(200, order, accepted=True)

    def _query(self, params: dict[str, str]) -> Answer:
        if not params.get("symbol"):
            return self._error(400, -1102, "Mandatory parameter 'symbol' was not sent, was empty/null, or malformed.")
        order = self.orders.get(params.get("origClientOrderId", ""))
        if order is None or order["symbol"] != params["symbol"]:
            return self._error(400, -2013, "Order does not exist.")
        return Answer(200, order)

    @staticmethod
    def _error(status: int, code: int, message: str, accepted: bool = False) -> Answer:
        return Answer(status, {"code": code, "msg": message}, accepted)


class CoinbaseAdvancedLike:
    """docs.cdp.coinbase.com, Advanced Trade API, "Creating a JWT", "Create Order": ``Authorization: Bearer JWT``,
    the JWT ES256 with header kid (the key's name) and a nonce, claims sub (the key's name), iss "cdp", nbf and
    exp (two minutes apart, now between them, on our own clock) and uri "METHOD api.coinbase.com/path", each
    nonce once; 401 Unauthorized else. An order under a client_order_id already used places nothing and is
    answered with the order that id names; one for a product it does not list is refused (success false,
    INVALID_PRODUCT_ID). An id in ``unknown_once`` is placed, its first answer a 200 cut short (no rule reads it:
    the client cannot tell whether it was placed)."""

    time_path = "/api/v3/brokerage/time"
    host = "api.coinbase.com"
    products = frozenset({"BTC-USD", "ETH-USD", "BTC-USDC", "ETH-USDC"})

    def __init__(self, public_keys: dict[str, bytes], unknown_once: frozenset[str] = frozenset()) -> None:
        """``public_keys``: each key name's EC public key in PEM."""
        self._public_keys = public_keys
        self._unknown_once = set(unknown_once)
        self._nonces: set[str] = set()
        self._order_ids = itertools.count(1)
        self.placed: list[dict] = []  # every order placed, in order (a client id twice: two orders)

    def time(self, now_ms: int) -> Answer:
        return Answer(200, {"iso": datetime.fromtimestamp(now_ms / 1000, timezone.utc).isoformat(),
                            "epochSeconds": str(now_ms // 1000), "epochMillis": str(now_ms)})

    def answer(self, request: Received, now_ms: int) -> Answer:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        try:
            header = jwt.get_unverified_header(token)
            public_key = self._public_keys[header["kid"]]
            claims = jwt.decode(token, public_key, algorithms=["ES256"], issuer="cdp",
                                options={"require": ["sub", "iss", "nbf", "exp", "uri"]})
        except (jwt.PyJWTError, KeyError):
            return Answer(401, "Unauthorized")
        nonce = header.get("nonce")
        if (scheme != "Bearer" or claims["sub"] != header["kid"] or claims["exp"] - claims["nbf"] > 120
                or claims["uri"] != f"{request.method} {self.host}{request.path}"
                or not nonce or nonce in self._nonces):
            return Answer(401, "Unauthorized")
        self._nonces.add(nonce)
        order = request.json_body()
        client_id = order.get("client_order_id")
        same = [placed for placed in self.placed if placed["client_order_id"] == client_id]
        if same:  # the order that id names, nothing placed
            return Answer(200, {"success": True, "success_response": same[0],
                                "order_configuration": order.get("order_configuration")})
        if order.get("product_id") not in self.products:
            return Answer(200, {"success": False, "failure_reason": "UNKNOWN_FAILURE_REASON", "order_id": "",
                                "error_response": {"error": "INVALID_PRODUCT_ID", "message": "Invalid product_id",
                                                   "new_order_failure_reason": "INVALID_PRODUCT_ID"}})
        placed = {"order_id": f"{next(self._order_ids):08d}-0000-4000-8000-000000000000",
                  "product_id": order.get("product_id"), "side": order.get("side"), "client_order_id": client_id}
        self.placed.append(placed)
        if client_id in self._unknown_once:
            self._unknown_once.discard(client_id)
            return Answer(200, '{"success": true, "success_respo', accepted=True)
        return Answer(200, {"success": True, "success_response": placed,
                            "order_configuration": order.get("order_configuration")}, accepted=True)


class KrakenLike:
    """docs.kraken.com, "Spot REST authentication", "Add Order", "Query Orders Info", "Spot Client Order
    Identifiers", "Errors": a private call is a POST of a form holding ``nonce`` (each greater than the key's last,
    else "EAPI:Invalid nonce"), with headers API-Key and API-Sign = base64 HMAC-SHA512 of the base64-decoded secret
    over the URI path + SHA256(nonce + form body); every answer is a 200 {"error": [...], "result": {...}}.
    ``/0/private/AddOrder`` places an order under ``cl_ord_id``, which Kraken checks among open orders only: every
    order here fills at once, so a cl_ord_id sent again places a second order. ``/0/private/QueryOrders`` answers
    the orders it has under ``cl_ord_id`` (or among ``txid``), keyed by their txid: an empty result for none. (The
    docs' schema also marks ``txid`` required; like the example profile, this takes ``cl_ord_id`` alone.) An id in
    ``unknown_once`` is placed, its first answer "EGeneral:Internal error", whose order status the docs call
    unknown; one in ``unplaced_once`` gets that answer too, its first copy not placed."""

    time_path = ""

    def __init__(self, secrets: dict[str, str], unknown_once: frozenset[str] = frozenset(),
                 unplaced_once: frozenset[str] = frozenset()) -> None:
        """``secrets``: each key's secret, base64 as Kraken hands it out."""
        self._secrets = secrets
        self._unknown_once = set(unknown_once)
        self._unplaced_once = set(unplaced_once)
        self._nonces: dict[str, int] = {}
        self._txids = itertools.count(1)
        self.placed: list[dict] = []  # every order placed (its info, and its "txid"), in order

    def time(self, now_ms: int) -> Answer:
        return Answer(200, {"error": [], "result": {"unixtime": now_ms // 1000}})

    def answer(self, request: Received, now_ms: int) -> Answer:
        key = request.headers.get("API-Key", "")
        if request.method != "POST" or not request.path.startswith("/0/private/"):
            return self._error("EGeneral:Unknown method")
        if key not in self._secrets:
            return self._error("EAPI:Invalid key")
        form = dict(parse_qsl(request.body.decode(), keep_blank_values=True))
        nonce = form.get("nonce", "")
        digest = hashlib.sha256(nonce.encode() + request.body).digest()
        mac = hmac.new(base64.b64decode(self._secrets[key]), request.path.encode() + digest, hashlib.sha512)
        if not hmac.compare_digest(request.headers.get("API-Sign", ""), base64.b64encode(mac.digest()).decode()):
            return self._error("EAPI:Invalid signature")
        if not nonce.isdigit() or int(nonce) <= self._nonces.get(key, 0):
            return self._error("EAPI:Invalid nonce")
        self._nonces[key] = int(nonce)
        if request.path == "/0/private/AddOrder":
            return self._add(form, now_ms)
        if request.path == "/0/private/QueryOrders":
            return self._query(form)
        return self._error("EGeneral:Unknown method")

    def _add(self, form: dict[str, str], now_ms: int) -> Answer:
        if form.get("cl_ord_id") in self._unplaced_once:
            self._unplaced_once.discard(form.get("cl_ord_id"))
            return self._error("EGeneral:Internal error")
        number = next(self._txids)
        txid = f"O{number:05d}-KRAKN-{number:06d}"
        volume, pair = form.get("volume", ""), form.get("pair", "")
        descr = {"pair": pair, "type": form.get("type", ""), "ordertype": form.get("ordertype", ""),
                 "price": form.get("price", "0"), "price2": "0", "leverage": "none",
                 "order": f"{form.get('type', '')} {volume} {pair} @ {form.get('ordertype', '')}", "close": ""}
        self.placed.append({"txid": txid, "refid": None, "userref": 0, "cl_ord_id": form.get("cl_ord_id"),
                            "status": "closed", "opentm": now_ms / 1000, "closetm": now_ms / 1000, "starttm": 0,
                            "expiretm": 0, "descr": descr, "vol": volume, "vol_exec": volume, "misc": "",
                            "oflags": "fciq"})
        if form.get("cl_ord_id") in self._unknown_once:
            self._unknown_once.discard(form.get("cl_ord_id"))
            return dataclasses.replace(self._error("EGeneral:Internal error"), accepted=True)
        return Answer(200, {"error": [], "result": {"descr": {"order": descr["order"]}, "txid": [txid]}}, accepted=True)

    def _query(self, form: dict[str, str]) -> Answer:
        txids = {txid.strip() for txid in form.get("txid", "").split(",") if txid.strip()}
        client_id = form.get("cl_ord_id")
        if not txids and client_id is None:
            return self._error("EGeneral:Invalid arguments")
        result = {order["txid"]: {name: value for name, value in order.items() if name != "txid"}
                  for order in self.placed if (not txids or order["txid"] in txids)
                  and (client_id is None or order["cl_ord_id"] == client_id)}
        return Answer(200, {"error": [], "result": result})

    @staticmethod
    def _error(message: str) -> Answer:
        return Answer(200, {"error": [message]})


class GithubLike:
    """docs.github.com/en/rest, "Authenticating to the REST API", "API versions", "User-Agent required", "Update
    the authenticated user": a User-Agent (else 403), a supported X-GitHub-Api-Version (else 400), a token in
    ``Authorization: Bearer`` (else 401 Bad credentials), and PATCH /user's JSON body (else 400)."""

    time_path = ""
    versions = ("2022-11-28",)
    _DOCS = "https://docs.github.com/rest"

    def __init__(self, logins: dict[str, str]) -> None:
        """``logins``: each token's user."""
        self._logins = logins

    def time(self, now_ms: int) -> Answer:
        return Answer(404, {"message": "Not Found", "documentation_url": self._DOCS, "status": "404"})

    def answer(self, request: Received, now_ms: int) -> Answer:
        headers = request.headers
        if not headers.get("User-Agent"):
            return Answer(403, "Request forbidden by administrative rules. Please make sure your request has a "
                               "User-Agent header.")
        version = headers.get("X-GitHub-Api-Version", self.versions[0])
        if version not in self.versions:
            return Answer(400, {"message": f"API version {version!r} is not supported.",
                                "documentation_url": self._DOCS, "status": "400"})
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        login = self._logins.get(token) if scheme in ("Bearer", "token") else None
        if login is None:
            return Answer(401, {"message": "Bad credentials", "documentation_url": self._DOCS, "status": "401"})
        if (request.method, request.path) != ("PATCH", "/user"):
            return Answer(404, {"message": "Not Found", "documentation_url": self._DOCS, "status": "404"})
        try:
            changes = json.loads(request.body)
        except ValueError:
            changes = None
        if not isinstance(changes, dict):
            return Answer(400, {"message": "Problems parsing JSON", "documentation_url": self._DOCS, "status": "400"})
        return Answer(200, {"login": login, "id": 1, "type": "User"} | changes, accepted=True)


class Verifier(http.server.ThreadingHTTPServer):
    """Serves ``api`` on a free loopback port, on a clock ``skew_ms`` off ours; ``accepted`` holds every request
    it accepted, ``refused`` every other answer it gave (both appended under ``lock``, read after the run)."""

    daemon_threads = True

    def __init__(self, api: DocsApi, skew_ms: int = 0, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.api = api
        self.skew_ms = skew_ms
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.lock = threading.Lock()  # guards accepted, refused and the api's own state; taken for one answer
        self.accepted: list[Received] = []
        self.refused: list[Answer] = []
        self._thread = threading.Thread(target=self.serve_forever, name="verifier", daemon=True)

    def __enter__(self) -> Verifier:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.skew_ms


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Verifier

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        target = urlsplit(self.path)
        request = Received(self.command, target.path, target.query, self.headers, body)
        now_ms = self.server.now_ms()
        with self.server.lock:
            if self.server.api.time_path and target.path == self.server.api.time_path:
                answer = self.server.api.time(now_ms)
            else:
                answer = self.server.api.answer(request, now_ms)
                (self.server.accepted if answer.accepted else self.server.refused).append(
                    request if answer.accepted else answer)
        text = isinstance(answer.body, str)
        data = (answer.body if text else json.dumps(answer.body)).encode()  # type: ignore[union-attr]
        self.send_response(answer.status)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _answer

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` of the server's own clock, skewed as the verifier is."""
        return super().date_time_string(self.server.now_ms() / 1000 if timestamp is None else timestamp)

    def log_message(self, *args: object) -> None:
        """Quiet: a test reads what was accepted, not a log."""


#: Each API by its example's name: what it takes on the command line, and its builder from those arguments.
API_ARGUMENTS = {
    "okx-like": ("KEY SECRET PASSPHRASE", lambda key, secret, passphrase: OkxLike({key: (secret, passphrase)})),
    "binance-spot-like": ("KEY SECRET", lambda key, secret: BinanceLike({key: secret})),
    "bybit-like": ("KEY SECRET", lambda key, secret: BybitLike({key: secret})),
    "kraken-like": ("KEY SECRET", lambda key, secret: KrakenLike({key: secret})),
    "coinbase-advanced-like": ("KEY_NAME PUBLIC_KEY_PEM_FILE",
                               lambda name, pem: CoinbaseAdvancedLike({name: Path(pem).read_bytes()})),
    "github-like": ("LOGIN TOKEN", lambda login, token: GithubLike({token: login})),
}


def main(argv: list[str]) -> int:
    """Serve one API's verifier on loopback until interrupted (SIGTERM or ^C)."""
    parser = argparse.ArgumentParser(prog="python -m api_verifiers", description=__doc__.split("\n\n")[0],
                                     epilog="; ".join(f"{name} {arguments}" for name, (arguments, _)
                                                      in API_ARGUMENTS.items()))
    parser.add_argument("--port", type=int, default=0, help="the loopback port (default: a free one, printed)")
    parser.add_argument("api", choices=API_ARGUMENTS)
    parser.add_argument("arguments", nargs="*", help="the API's credentials, as the list below says")
    options = parser.parse_args(argv)
    wanted, build = API_ARGUMENTS[options.api]
    if len(options.arguments) != len(wanted.split()):
        parser.error(f"{options.api} takes {wanted}")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with Verifier(build(*options.arguments), port=options.port) as server:
        print(f"{options.api} verifier on {server.url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
