"""Profiles: every example and built-in checks clean and reads back from ``profile show``; every error of a
broken profile names its line; the compiled profile drives the request writer and the answer table."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import ROOT
from thread_client.policy.answers import AnswerTable, Outcome, Reading
from thread_client.profile import JsonPath, ProfileError, builtin_names, load_profile, profile_toml, read_profile
from thread_client.profile.command import profile_main

EXAMPLES = sorted((ROOT / "examples" / "profiles").glob("*.toml"))


def test_the_examples_are_there_and_the_built_ins_are_examples_too():
    assert {path.stem for path in EXAMPLES} >= {"reference", "signed-post-json", "binance-spot-like", "kraken-like",
                                                "leaky-bucket-gateway", "decaying-counter", "fixed-window-weights",
                                                "okx-like", "bybit-like", "coinbase-advanced-like", "github-like"}
    assert set(builtin_names()) == {"reference", "signed-post-json"}
    for name in builtin_names():
        assert load_profile(name) == load_profile(str(ROOT / "examples" / "profiles" / f"{name}.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_every_example_checks_clean_and_reads_back_from_show(path, capsys):
    assert profile_main(["check", str(path)], "thread-client") == 0
    assert "ok" in capsys.readouterr().out
    profile = load_profile(str(path))
    again = read_profile(profile_toml(profile), "shown", hook_dir=str(path.parent))
    assert again == profile


def test_profile_list_and_show(capsys):
    assert profile_main(["list"], "thread-client") == 0
    listed = capsys.readouterr().out
    assert listed.splitlines()[0].startswith("reference\t") and "signed-post-json" in listed
    assert profile_main(["show", "reference"], "thread-client") == 0
    shown = capsys.readouterr().out
    assert 'key_param = "api_key"' in shown and "[[answers.rule]]" in shown and "strikes_to_block = 10" in shown
    assert profile_main(["show", "no-such-profile"], "thread-client") == 2
    assert "no built-in profile 'no-such-profile'" in capsys.readouterr().err


# A [settle] table, and its rules as the reference order profile writes them.
SETTLE = '[request]\nclient_id = "req_id"\n\n[settle]\npath = "/api/order"\nclient_id_param = "clientId"\n\n'
FOUND = '[[settle.rule]]\nstatus = 200\nfield = "status"\nequals = "FOUND"\noutcome = "found"\n\n'
NOT_FOUND = '[[settle.rule]]\nstatus = 400\nfield = "code"\nequals = -2013\noutcome = "not_found"\n'

# Each broken profile, the line the error must name, and words of the message.
BROKEN = [
    ("[request]\nmethod = \"GET\"\nverb = \"x\"\n", 3, "unknown field 'verb' in [request]"),
    ("[requests]\nmethod = \"GET\"\n", 1, "unknown table [requests]"),
    ("[request]\nmethod = \"TRACE\"\n", 2, "method must be one of GET, POST, PUT, PATCH, DELETE"),
    ("[request]\npath = 5\n", 2, "path must be a string, got 5"),
    ("[request]\npath = \"api\"\n", 2, "path must start with /"),
    ("[request]\nkey_param = \"k\"\nkey_header = \"K\"\n", 3, "key_param or key_header, not both"),
    ("[nonce]\nstyle = \"random\"\n", 2, "style must be one of counter"),
    ("[nonce]\nstyle = \"counter\"\ntime_path = \"/t\"\n", 3, "time_path serves the timestamp styles only"),
    ("[nonce]\nrecv_window_ms = true\n", 2, "recv_window_ms must be an integer"),
    ("[sign]\nmessage = \"{query}{secret}\"\n", 2, "unknown field {secret}"),
    ("[sign]\nmessage = \"{timestamp}{body}\"\n", 2, "never sends ([nonce] style is not a timestamp)"),
    ("[sign]\nalgorithm = \"md5\"\n", 2, "algorithm must be one of hmac-sha256, hmac-sha512"),
    ("[sign]\nhook = \"no_such_module_here:sign\"\n", 2, "cannot import no_such_module_here"),
    ("[answers]\n\n[[answers.rule]]\nstatus = 429\noutcome = \"rate_limited\"\n\n[[answers.rule]]\nstatus = 429\n"
     "field = \"error_msg\"\noutcome = \"key_blocked\"\n", 7, "can never match: the rule on line 3"),
    ("[[answers.rule]]\nstatus = 700\noutcome = \"retry\"\n", 2, "status must be an HTTP status"),
    ("[[answers.rule]]\nstatus = [500, 400]\noutcome = \"retry\"\n", 2, "status must be an HTTP status"),
    ("[[answers.rule]]\nstatus = 200\noutcome = \"won\"\n", 3, "outcome must be one of accepted"),
    ("[[answers.rule]]\nstatus = 400\noutcome = \"rejected\"\necho_id = \"id\"\n", 4, "echo_id belongs to an accepted"),
    ("[[answers.rule]]\nstatus = 400\n", 1, "needs a status and an outcome"),
    ("[penalty]\nstrikes_to_block = 0\n", 2, "strikes_to_block must be at least 1"),
    ("[penalty]\ninvalid_nonce = \"cheap\"\n", 2, "invalid_nonce must be one of free, counted"),
    ("[penalty]\nrate_limited_holds = \"ip\"\n", 2, "rate_limited_holds must be one of key, account, host, got 'ip'"),
    ("[penalty]\nrate_limited_strikes = 0\n", 2, "rate_limited_strikes must be a boolean, got 0"),
    ("[request]\nmethod = \"GET\"\nmethod = \"POST\"\n", 3, "not TOML"),
    ("[nonce]\nstyle = \"timestamp-ms\"\n[sign]\nmessage = \"{nonce:d}{body}\"\n", 4, "no format spec or conversion"),
    ("[sign]\nmessage = \"{body!r}\"\n", 2, "no format spec or conversion"),
    ("[[answers.rule]]\nstatus = 400\noutcome = \"rejected\"\n", 1, "no answers rule accepts a 2xx"),
    ("[request]\nkey_param = \"\"\n", 2, "the key goes nowhere"),
    ("[nonce]\nparam = \"\"\n", 2, "the nonce goes nowhere"),
    ("[sign]\nparam = \"\"\n", 2, "the signature goes nowhere"),
    ("[request]\nid_param = \"nonce\"\n", 2, "own params must have different names: api_key, nonce, nonce"),
    ("[request]\nheaders = { \"Accept-é\" = \"x\" }\n", 2, "a name must be an HTTP token"),
    ("[request]\nheaders = { \"A\" = \"x\\ny\" }\n", 2, "Latin-1 text on one line"),
    ("[request]\npath = \"/a\\tb\"\n", 2, "must start with /"),
    ("[request]\nfields_in = \"body\"\n", 2, "needs a body"),
    ("[request]\npath = \"/ordér\"\n", 2, "non-ASCII"),
    ("[[answers.rule]]\nstatus = 200\nfield = \"x\"\nequals = nan\noutcome = \"accepted\"\n", 4, "finite"),
    ("[request]\nendpoints = \"POST /api/order\"\n", 2, "endpoints must be an array"),
    ("[request]\n\nendpoints = [\"TRACE /api/order\"]\n", 3, "endpoints must each be \"METHOD /path\""),
    ("[request]\nendpoints = [\"POST api/order\"]\n", 2, "got 'POST api/order'"),
    ("[request]\nendpoints = [5]\n", 2, "got 5"),
    ("[[limit]]\nalgorithm = \"rolling-window\"\nlimit = 5\nperiod_ms = 1000\ncost = { \"POST /api/order\" = 2 }\n", 5,
     "cost names POST /api/order, an endpoint the profile does not allow"),
    # Issue 41, 4.7: a status alone proves no order's fate (a proxy's 200 page, a 400 of another kind).
    (SETTLE + "[[settle.rule]]\nstatus = 200\noutcome = \"found\"\n\n" + NOT_FOUND, 8,
     "a found rule must read the answer (body_contains, field, header or echo_id)"),
    (SETTLE + FOUND + "[[settle.rule]]\nstatus = [400, 404]\noutcome = \"not_found\"\n", 14,
     "a not_found rule must read the answer"),
    ("[request]\nheaders = { \"X-Target\" = \"{target}\" }\n", 2, "names an unknown field {target}"),
]


@pytest.mark.parametrize("text, line, words", BROKEN, ids=[words for _, _, words in BROKEN])
def test_profile_check_names_the_line_of_every_error(tmp_path, capsys, text, line, words):
    path = tmp_path / "broken.toml"
    path.write_text(text)
    assert profile_main(["check", str(path)], "thread-client") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert any(error.startswith(f"{path}:{line}: ") and words in error for error in errors), errors


def test_every_error_is_reported_at_once():
    text = "[request]\nmethod = \"TRACE\"\nverb = 1\n[nonce]\nstyle = \"x\"\n"
    with pytest.raises(ProfileError) as raised:
        read_profile(text, "p.toml")
    assert [error.split(": ")[0] for error in raised.value.errors] == ["p.toml:2", "p.toml:3", "p.toml:5"]


def test_what_a_profile_leaves_out_is_the_reference_s_rules_and_all():
    """All but the one thing the reference profile knows of its own server: that it writes each Date fresh."""
    reference = load_profile()
    assert read_profile("", "empty.toml", "empty") == dataclasses.replace(
        reference, name="empty", description="", nonce=dataclasses.replace(reference.nonce, date_lag_ms=1000))


@pytest.mark.parametrize("text", [
    '[nonce]\nstyle = "none"\n',
    '[penalty]\nrate_limited_holds = "host"\nrate_limited_strikes = false\n',
    '[request]\nheaders = { "X.Dot" = "y", "Accept" = "é/x" }\n',
    '[request]\nmethod = "POST"\nparams_in = "form"\nfields_in = "body"\nkey_header = "K"\n',
    '[[answers.rule]]\nstatus = [200, 299]\nfield = "ok"\nequals = 1.5\noutcome = "accepted"\n',
    # The key in no param or header of its own: a header that carries the credential names the key (a login as
    # the User-Agent), the secret (a bearer token) or the signature (a JWT that names the key inside).
    '[request]\nkey_param = ""\nheaders = { "User-Agent" = "{key}", Authorization = "Bearer {secret}" }\n',
    '[request]\nkey_param = ""\nheaders = { Authorization = "Bearer {signature}" }\n[sign]\nparam = ""\n',
    '[request]\nendpoints = ["POST /api/order"]\n[[limit]]\nalgorithm = "rolling-window"\nlimit = 8\nperiod_ms = 1000\n'
    'cost = { "GET /api/request" = 1, "POST /api/order" = 4 }\n',
])
def test_odd_profiles_read_back_from_show(text):
    profile = read_profile(text, "odd.toml", "odd")
    assert read_profile(profile_toml(profile), "shown", "odd") == profile


def test_the_reference_profile_is_the_contract_s_request_and_table():
    profile = load_profile()
    assert (profile.request.method, profile.request.path, profile.request.key_param, profile.request.id_param) == (
        "GET", "/api/request", "api_key", "req_id")
    assert profile.nonce.style == "counter" and profile.sign is None
    assert (profile.penalty.strikes_to_block, profile.penalty.invalid_nonce) == (10, "free")
    assert (profile.penalty.rate_limited_holds, profile.penalty.rate_limited_strikes) == ("key", True)  # a strike on one key


def rules(text: str) -> AnswerTable:
    return AnswerTable(read_profile(text, "rules.toml"))


def test_rules_match_in_order_on_status_ranges_body_text_and_json_fields():
    table = rules("""
[answers]
message = "err.text"
[[answers.rule]]
status = 200
body_contains = "Invalid nonce"
outcome = "invalid_nonce"
[[answers.rule]]
status = 200
field = "err.code"
equals = -1003
outcome = "rate_limited"
[[answers.rule]]
status = 200
echo_id = "data.id"
outcome = "accepted"
[[answers.rule]]
status = [500, 599]
outcome = "retry"
""")
    assert table.classify(200, b'{"err": {"text": "EAPI:Invalid nonce"}}', "7").outcome is Outcome.INVALID_NONCE
    limited = table.classify(200, json.dumps({"err": {"code": "-1003", "text": "slow down"}}).encode(), "7")
    assert limited.outcome is Outcome.RATE_LIMITED and limited.detail == "slow down"
    assert table.classify(200, b'{"data": {"id": "7"}}', "7").outcome is Outcome.ACCEPTED
    unmatched = table.classify(200, b'{"data": {"id": "8"}}', "7")
    assert unmatched.outcome is Outcome.BAD_ANSWER and unmatched.unmatched  # ambiguous, as today's "anything else"
    assert table.classify(502, b"Bad Gateway", "7") == Reading(Outcome.SERVER_ERROR, "502 Bad Gateway")
    teapot = table.classify(418, b"", "7")
    assert teapot.outcome is Outcome.SERVER_ERROR and teapot.unmatched


def test_a_settle_rule_that_reads_its_answer_and_one_that_reads_unknown_on_a_status_alone_are_taken():
    profile = read_profile(SETTLE + FOUND + NOT_FOUND + '\n[[settle.rule]]\nstatus = 503\noutcome = "unknown"\n',
                           "orders.toml")
    assert [rule.outcome for rule in profile.settle.rules] == ["found", "not_found", "unknown"]


def test_a_status_ask_is_written_as_the_profile_s_requests_but_a_get_carries_everything_in_its_query():
    okx = load_profile(str(ROOT / "examples" / "profiles" / "okx-like.toml"))
    shape = okx.settle.ask_shape(okx.request)
    assert (shape.method, shape.path, shape.params_in, shape.fields_in) == ("GET", "/api/v5/trade/order", "query",
                                                                            "query")
    assert dataclasses.replace(shape, method="POST", path="/api/v5/trade/order", params_in="json",
                               fields_in="body") == okx.request  # the key, headers and id as the orders'
    kraken = load_profile(str(ROOT / "examples" / "profiles" / "kraken-like.toml"))
    assert kraken.settle.ask_shape(kraken.request) == dataclasses.replace(kraken.request, path="/0/private/QueryOrders")


def test_a_json_path_star_stands_for_any_one_member_the_rest_of_the_path_is_found_in():
    """Kraken keys an order by its own txid, which the client never learnt: ``result.*.cl_ord_id``."""
    answer = {"error": [], "result": {"OQCLML-BW3P3-BUCMWZ": {"status": "closed"},
                                      "OB5VMB-B4U2U-DK2WRW": {"cl_ord_id": "o1"}}, "list": [{}, {"id": 7}]}
    assert JsonPath("result.*.cl_ord_id").find(answer) == "o1"
    assert JsonPath("list.*.id").find(answer) == 7 and JsonPath("result.*").find(answer) == {"status": "closed"}
    for nothing in ("result.*.txid", "error.*", "list[0].*", "error.*.x"):
        with pytest.raises(LookupError):
            JsonPath(nothing).find(answer)


def test_a_profile_file_that_cannot_be_read_is_one_clear_error(tmp_path):
    with pytest.raises(ProfileError, match="cannot read it"):
        load_profile(str(tmp_path / "missing.toml"))
    with pytest.raises(ProfileError, match="no built-in profile 'nope'"):
        load_profile("nope")


def test_the_hook_of_a_profile_is_found_next_to_it(tmp_path: Path):
    (tmp_path / "my_hook.py").write_text("def sign(secret, parts):\n    return 'sig-' + parts.nonce\n")
    (tmp_path / "p.toml").write_text('[sign]\nhook = "my_hook:sign"\n')  # every other field: the reference's
    assert load_profile(str(tmp_path / "p.toml")).sign.hook == "my_hook:sign"
    (tmp_path / "q.toml").write_text('[sign]\nhook = "my_hook:nothing"\n')
    with pytest.raises(ProfileError, match="q.toml:2: hook 'my_hook:nothing': my_hook has no function nothing"):
        load_profile(str(tmp_path / "q.toml"))


def test_a_profile_without_rules_reads_the_id_echo_where_it_sends_the_id():
    table = AnswerTable(read_profile('[request]\nid_param = "clientOrderId"\n', "p.toml"))
    assert table.classify(200, b'{"status": "OK", "clientOrderId": "7"}', "7").outcome is Outcome.ACCEPTED
    assert table.classify(200, b'{"status": "OK", "req_id": "7"}', "7").outcome is Outcome.BAD_ANSWER
    no_id = AnswerTable(read_profile('[request]\nid_param = ""\n', "p.toml"))
    assert no_id.classify(200, b'{"status": "OK"}', "7").outcome is Outcome.ACCEPTED


def test_the_weights_example_costs_each_endpoint_of_each_limit_as_its_docs_say():
    """The request weight is the host's, every endpoint weighing its own; the order count is the account's and
    only orders spend it."""
    profile = load_profile(str(ROOT / "examples" / "profiles" / "fixed-window-weights.toml"))
    weight, orders = profile.limits
    assert (weight.scope, orders.scope) == ("host", "account")
    costs = {endpoint: (weight.cost_of(endpoint, 1), orders.cost_of(endpoint, 1))
             for endpoint in ("GET /api/request", "POST /api/order", "GET /api/depth")}
    assert costs == {"GET /api/request": (1, 0), "POST /api/order": (1, 1), "GET /api/depth": (5, 0)}


# The new examples against their APIs' documented answers (bodies and headers as the docs show them; the id sent
# is "o1"): (example, status, body, headers, the outcome it must come to).
DOCUMENTED_ANSWERS = [
    ("okx-like", 200, {"code": "0", "msg": "", "data": [{"clOrdId": "o1", "ordId": "9", "sCode": "0", "sMsg": ""}]},
     {}, "accepted"),
    ("okx-like", 200, {"code": "0", "msg": "", "data": [{"clOrdId": "o2", "ordId": "9", "sCode": "0", "sMsg": ""}]},
     {}, "ambiguous"),  # another order's answer: never this one's acceptance, nor its refusal
    ("okx-like", 200, {"code": "1", "msg": "Operation failed.", "data": [
        {"clOrdId": "o1", "ordId": "", "sCode": "51008", "sMsg": "Order failed. Insufficient balance"}]}, {},
     "rejected"),
    ("okx-like", 200, {"code": "1", "msg": "Operation failed.", "data": [
        {"clOrdId": "o1", "ordId": "", "sCode": "51016", "sMsg": "Duplicated clOrdId"}]}, {}, "duplicate"),
    ("okx-like", 400, {"code": "50004", "msg": "API endpoint request timeout"}, {}, "ambiguous"),
    # Issue 41, 4.9: 51016 and 50004 wherever OKX may put them: the order's sCode beside code "1" (or "2"), or the
    # request's own top-level code.
    ("okx-like", 200, {"code": "2", "msg": "", "data": [
        {"clOrdId": "o1", "ordId": "", "sCode": "51016", "sMsg": "Duplicated clOrdId"}]}, {}, "duplicate"),
    ("okx-like", 200, {"code": "51016", "msg": "Duplicated clOrdId", "data": []}, {}, "duplicate"),
    ("okx-like", 200, {"code": "1", "msg": "Operation failed.", "data": [
        {"clOrdId": "o1", "ordId": "", "sCode": "50004", "sMsg": "API endpoint request timeout (does not mean that "
                                                               "the request was successful or failed)"}]}, {},
     "ambiguous"),
    ("okx-like", 200, {"code": "50004", "msg": "API endpoint request timeout (does not mean that the request was "
                                               "successful or failed, please check the request result)",
                       "data": []}, {}, "ambiguous"),
    ("okx-like", 401, {"code": "50102", "msg": "Timestamp request expired"}, {}, "invalid_nonce"),
    ("okx-like", 401, {"code": "50113", "msg": "Invalid Sign"}, {}, "invalid_key"),
    ("bybit-like", 200, {"retCode": 0, "retMsg": "OK", "result": {"orderId": "9", "orderLinkId": "o1"}}, {},
     "accepted"),
    ("bybit-like", 200, {"retCode": 10002, "retMsg": "invalid request, please check your server timestamp or "
                                                     "recv_window param", "result": {}}, {}, "invalid_nonce"),
    ("bybit-like", 200, {"retCode": 10004, "retMsg": "error sign!", "result": {}}, {}, "invalid_key"),
    ("bybit-like", 200, {"retCode": 110007, "retMsg": "ab not enough for new order", "result": {}}, {}, "rejected"),
    ("bybit-like", 200, {"retCode": 110072, "retMsg": "OrderLinkedID is duplicate", "result": {}}, {}, "duplicate"),
    ("bybit-like", 200, {"retCode": 10000, "retMsg": "Server Timeout", "result": {}}, {}, "ambiguous"),
    # Issue 41, 4.9: a server error may have placed the order; a spot order's own "Duplicate clientOrderId"; the
    # gateway's HTTP 429 (system level frequency protection) and 401 (the key).
    ("bybit-like", 200, {"retCode": 10016, "retMsg": "Server error.", "result": {}}, {}, "ambiguous"),
    ("bybit-like", 200, {"retCode": 12141, "retMsg": "Duplicate clientOrderId", "result": {}}, {}, "duplicate"),
    ("bybit-like", 200, {"retCode": 170141, "retMsg": "Duplicate clientOrderId", "result": {}}, {}, "duplicate"),
    ("bybit-like", 200, {"retCode": 10006, "retMsg": "Too many visits!", "result": {}}, {}, "rate_limited"),
    ("bybit-like", 429, "System level frequency protection. Please retry when encounter this", {}, "rate_limited"),
    ("bybit-like", 401, "401 Authorization Required", {}, "invalid_key"),
    # A 0 that names no orderLinkId, or another: something was placed, never proven refused (issue 33's review).
    ("bybit-like", 200, {"retCode": 0, "retMsg": "OK", "result": {}}, {}, "ambiguous"),
    ("bybit-like", 200, {"retCode": 0, "retMsg": "OK", "result": {"orderId": "1", "orderLinkId": ""}}, {},
     "ambiguous"),
    # A 5xx to an order may have placed it (a gateway's 502, Cloudflare's 524 in front of Kraken).
    ("bybit-like", 502, {}, {}, "ambiguous"),
    ("okx-like", 502, {}, {}, "ambiguous"),
    ("kraken-like", 524, {"error": []}, {}, "ambiguous"),
    # Kraken lists "EGeneral:Internal error" among the errors that leave an order's status unknown.
    ("kraken-like", 200, {"error": ["EGeneral:Internal error"]}, {}, "ambiguous"),
    # -2010 is Binance's generic "new order rejected": only "Duplicate order sent." says the client id was seen.
    ("binance-spot-like", 400, {"code": -2010, "msg": "Account has insufficient balance for requested action."}, {},
     "rejected"),
    ("binance-spot-like", 400, {"code": -2010, "msg": "Duplicate order sent."}, {}, "duplicate"),
    # Issue 41, 4.9: -1006, like -1007, leaves the order's execution status unknown, whatever the HTTP status; a 403
    # is the firewall in front (a WAF rule): nothing was placed, and it says nothing of the key, never retired for it.
    ("binance-spot-like", 400, {"code": -1006, "msg": "An unexpected response was received from the message bus. "
                                                      "Execution status unknown."}, {}, "ambiguous"),
    ("binance-spot-like", 503, {"code": -1006, "msg": "An unexpected response was received from the message bus. "
                                                      "Execution status unknown."}, {}, "ambiguous"),
    ("binance-spot-like", 400, {"code": -1007, "msg": "Timeout waiting for response from backend server. Send status "
                                                      "unknown; execution status unknown."}, {}, "ambiguous"),
    ("binance-spot-like", 403, "<html><head><title>403 Forbidden</title></head><body><h1>403 Forbidden</h1></body>"
                               "</html>", {}, "unavailable"),
    ("binance-spot-like", 403, "", {}, "unavailable"),
    ("coinbase-advanced-like", 200, {"success": True, "success_response": {"order_id": "9", "client_order_id": "o1"}},
     {}, "accepted"),
    ("coinbase-advanced-like", 200, {"success": False, "error_response": {
        "error": "INSUFFICIENT_FUND", "message": "Insufficient balance in source account"}}, {}, "rejected"),
    ("coinbase-advanced-like", 401, "Unauthorized", {}, "invalid_key"),
    ("github-like", 200, {"login": "octocat", "bio": "x"}, {}, "accepted"),
    # A 200 that is no user (a captive portal's page, an empty answer) is no proof it was updated (issue 41, 4.7).
    ("github-like", 200, "<html><body>Sign in to the network</body></html>", {}, "bad_answer"),
    ("github-like", 200, {}, {}, "bad_answer"),
    ("github-like", 403, {"message": "API rate limit exceeded for user ID 1."},
     {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1764051060"}, "rate_limited"),
    ("github-like", 429, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."},
     {"retry-after": "60"}, "rate_limited"),
    ("github-like", 403, {"message": "Resource not accessible by personal access token"},
     {"x-ratelimit-remaining": "4999"}, "forbidden"),
    ("github-like", 401, {"message": "Bad credentials"}, {}, "invalid_key"),
]


@pytest.mark.parametrize("example, status, body, headers, outcome", DOCUMENTED_ANSWERS,
                         ids=[f"{row[0]}-{row[1]}-{row[4]}" for row in DOCUMENTED_ANSWERS])
def test_each_new_example_reads_its_api_s_documented_answers(example, status, body, headers, outcome):
    table = AnswerTable(load_profile(str(ROOT / "examples" / "profiles" / f"{example}.toml")), wall=lambda: 1764051000)
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    reading = table.classify(status, data, "o1", headers)
    assert reading.outcome.value == outcome, reading
    if "x-ratelimit-reset" in headers:  # the primary limit: wait until its reset, an epoch second
        assert reading.retry_after == 60


def test_a_settle_lag_below_zero_is_refused_by_its_line():
    text = (ROOT / "examples" / "profiles" / "reference-orders.toml").read_text().replace("lag_ms = 1500", "lag_ms = -1")
    with pytest.raises(ProfileError, match=r"lag_ms must be 0 or more, got -1"):
        read_profile(text, "orders.toml")
