"""Answer rules as real exchanges need them: predicates on headers and on JSON values by path (an empty array,
absent, one of), the ``ambiguous`` and ``duplicate`` outcomes, a retry time read from a header or a body field,
the shipped Kraken-like profile read through its real file, and what spends a nonce."""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import json
import os
import subprocess
import sys

import pytest

from conftest import KEYS, ROOT
from thread_client.config import Config
from thread_client.delivery import EXACTLY_ONCE
from thread_client.errors import ConfigError
from thread_client.policy.answers import AnswerTable, Outcome
from thread_client.policy.retry import KeyStep, RetryPolicy
from thread_client.profile import Profile, Secret, load_profile, profile_toml, read_profile
from thread_client.profile.command import profile_main

NOW = 1_764_051_000.0  # the wall clock the tables below read (epoch seconds)
ACCEPT = '[[answers.rule]]\nstatus = 200\nfield = "ok"\nequals = true\noutcome = "accepted"\n'


def table(rules: str) -> AnswerTable:
    """A table of ``rules`` (TOML), then an accepted rule every profile needs; its wall clock stands at NOW."""
    return AnswerTable(read_profile(rules + ACCEPT, "rules.toml"), wall=lambda: NOW)


def body(payload: object) -> bytes:
    return json.dumps(payload).encode()


# -- predicates on JSON values by path --------------------------------------------------------


def test_a_field_that_equals_an_empty_array_matches_only_an_empty_array():
    rules = table('[[answers.rule]]\nstatus = 200\nfield = "error"\nequals = []\noutcome = "accepted"\n')
    assert rules.classify(200, body({"error": [], "result": {}}), "7").outcome is Outcome.ACCEPTED
    for other in ({"error": ["EOrder:Insufficient funds"]}, {"error": {}}, {"error": ""}, {"result": {}}):
        assert rules.classify(200, body(other), "7").outcome is Outcome.BAD_ANSWER, other


def test_a_field_by_path_walks_names_and_indexes():
    rules = table('[[answers.rule]]\nstatus = 200\nfield = "data[0].sCode"\nequals = "51008"\noutcome = "rejected"\n')
    assert rules.classify(200, body({"data": [{"sCode": "51008"}]}), "7").outcome is Outcome.REJECTED
    assert rules.classify(200, body({"data": [{"sCode": "0"}]}), "7").outcome is Outcome.BAD_ANSWER
    assert rules.classify(200, body({"data": []}), "7").outcome is Outcome.BAD_ANSWER


def test_a_field_may_be_one_of_several_values():
    rules = table('[[answers.rule]]\nstatus = 400\nfield = "code"\none_of = [-1021, "-1099"]\noutcome = "invalid_nonce"\n'
                  '[[answers.rule]]\nstatus = 400\noutcome = "rejected"\n')
    assert rules.classify(400, body({"code": -1021}), "7").outcome is Outcome.INVALID_NONCE
    assert rules.classify(400, body({"code": "-1021"}), "7").outcome is Outcome.INVALID_NONCE
    assert rules.classify(400, body({"code": -1099}), "7").outcome is Outcome.INVALID_NONCE
    assert rules.classify(400, body({"code": -2010}), "7").outcome is Outcome.REJECTED
    assert rules.classify(400, body({}), "7").outcome is Outcome.REJECTED


def test_a_field_may_be_required_absent():
    rules = table('[[answers.rule]]\nstatus = 200\nfield = "result.txid"\nabsent = true\nbody_contains = "{"\n'
                  'outcome = "rejected"\n')
    assert rules.classify(200, body({"result": {}}), "7").outcome is Outcome.REJECTED
    assert rules.classify(200, body({"result": {"txid": ["O1"]}}), "7").outcome is Outcome.BAD_ANSWER
    assert rules.classify(200, b"not json {", "7").outcome is Outcome.BAD_ANSWER  # no JSON: no field is read



def test_a_field_may_match_a_pattern_in_its_text_or_in_any_one_item_of_its_array():
    """Kraken's errors are strings in an array, in no promised order, a warning ("W...") maybe first: a pattern is
    searched in a string's or a number's text, and in each item of an array until one holds it."""
    rules = table('[[answers.rule]]\nstatus = 200\nfield = "error"\nmatches = \'^EAPI:Invalid nonce\'\n'
                  'outcome = "invalid_nonce"\n'
                  '[[answers.rule]]\nstatus = 400\nfield = "code"\nmatches = "^-100[67]$"\noutcome = "ambiguous"\n'
                  '[[answers.rule]]\nstatus = 503\nheader = "X-State"\nmatches = "^unknown"\noutcome = "ambiguous"\n')
    for payload in ({"error": ["EAPI:Invalid nonce"]}, {"error": ["WGeneral:Slow", "EAPI:Invalid nonce"]},
                    {"error": "EAPI:Invalid nonce"}):
        assert rules.classify(200, body(payload), "7").outcome is Outcome.INVALID_NONCE, payload
    for other in ({"error": []}, {"error": ["WGeneral:EAPI:Invalid nonce"]}, {"error": [["EAPI:Invalid nonce"]]},
                  {"error": [{"e": "EAPI:Invalid nonce"}]}, {"result": {"descr": "EAPI:Invalid nonce"}}):
        assert rules.classify(200, body(other), "7").outcome is Outcome.BAD_ANSWER, other  # nowhere but the array
    assert rules.classify(400, body({"code": -1006}), "7").outcome is Outcome.AMBIGUOUS  # a number's text
    assert rules.classify(400, body({"code": "-1007"}), "7").outcome is Outcome.AMBIGUOUS
    assert rules.classify(400, body({"code": -10070}), "7").outcome is Outcome.SERVER_ERROR
    assert rules.classify(400, body({"code": True}), "7").outcome is Outcome.SERVER_ERROR
    assert rules.classify(503, b"", "7", {"x-state": "unknown, ask"}).outcome is Outcome.AMBIGUOUS
    assert rules.classify(503, b"", "7", {"x-state": "known"}).outcome is Outcome.SERVER_ERROR


def test_a_boolean_matches_only_a_boolean_never_1_or_0():
    """``true == 1`` in Python: an exchange's ``"ok": 1`` (or a code 0) must not read as a rule's ``equals = true``
    (or ``false``), nor a ``true`` as ``equals = 1``."""
    rules = table('[[answers.rule]]\nstatus = 400\nfield = "code"\nequals = 1\noutcome = "rejected"\n')
    assert rules.classify(200, body({"ok": True}), "7").outcome is Outcome.ACCEPTED
    assert rules.classify(200, body({"ok": 1}), "7").outcome is Outcome.BAD_ANSWER
    assert rules.classify(400, body({"code": 1}), "7").outcome is Outcome.REJECTED
    assert rules.classify(400, body({"code": True}), "7").outcome is not Outcome.REJECTED

# -- predicates on headers ----------------------------------------------------------------


def test_a_rule_reads_a_response_header_by_its_name_in_any_case():
    rules = table('[[answers.rule]]\nstatus = 200\nheader = "X-Order-State"\none_of = ["unknown", "pending"]\n'
                  'outcome = "ambiguous"\n'
                  '[[answers.rule]]\nstatus = 503\nheader = "X-Upstream"\noutcome = "ambiguous"\n'
                  '[[answers.rule]]\nstatus = 503\nheader = "Retry-After"\nabsent = true\noutcome = "retry"\n'
                  '[[answers.rule]]\nstatus = 503\noutcome = "unavailable"\n')
    assert rules.headers == ("x-order-state", "x-upstream", "retry-after")
    assert rules.classify(200, b"{}", "7", {"x-order-state": "pending"}).outcome is Outcome.AMBIGUOUS
    assert rules.classify(200, b"{}", "7", {"x-order-state": "done"}).outcome is Outcome.BAD_ANSWER
    assert rules.classify(503, b"", "7", {"x-upstream": "timeout"}).outcome is Outcome.AMBIGUOUS
    assert rules.classify(503, b"", "7", {}).outcome is Outcome.SERVER_ERROR
    assert rules.classify(503, b"", "7", {"retry-after": "3"}).outcome is Outcome.UNAVAILABLE


def test_a_profile_that_reads_no_header_asks_for_none():
    assert AnswerTable(load_profile()).headers == ()


# -- the ambiguous and duplicate outcomes -------------------------------------------------


def test_ambiguous_and_duplicate_are_outcomes_a_rule_may_name():
    rules = table('[[answers.rule]]\nstatus = [400, 599]\nfield = "code"\nequals = -1007\noutcome = "ambiguous"\n'
                  '[[answers.rule]]\nstatus = 400\nfield = "code"\nequals = -2010\nbody_contains = "Duplicate"\n'
                  'outcome = "duplicate"\n')
    unknown = rules.classify(503, body({"code": -1007, "msg": "Timeout waiting for response"}), "7")
    assert unknown.outcome is Outcome.AMBIGUOUS and unknown.outcome.ambiguous
    duplicate = rules.classify(400, body({"code": -2010, "msg": "Duplicate order sent."}), "7")
    assert duplicate.outcome is Outcome.DUPLICATE and not duplicate.outcome.ambiguous


# -- a retry time read from a header or a body field ----------------------------------------


@pytest.mark.parametrize("unit, text, seconds", [
    ("s", "12", 12.0),
    ("s", "1.5", 1.5),
    ("ms", "2500", 2.5),
    ("epoch-s", str(int(NOW) + 30), 30.0),
    ("epoch-ms", str(int(NOW * 1000) + 4000), 4.0),
    ("epoch-s", str(int(NOW) - 30), 1.0),  # a time gone by (the server's clock behind ours): a short pause
    ("date", email.utils.formatdate(NOW - 5, usegmt=True), 1.0),
    ("date", email.utils.formatdate(NOW + 60, usegmt=True), 60.0),
    ("date", "2025-11-25T06:11:00Z", 60.0),  # NOW is 2025-11-25T06:10:00Z
    ("s", "soon", None),
    ("date", "tomorrow", None),
])
def test_a_retry_time_is_read_from_a_header_in_its_unit(unit, text, seconds):
    rules = table(f'[[answers.rule]]\nstatus = 429\nretry_after_header = "X-Retry"\nretry_after_unit = "{unit}"\n'
                  'outcome = "rate_limited"\n')
    reading = rules.classify(429, b"", "7", {"x-retry": text})
    assert reading.outcome is Outcome.RATE_LIMITED
    assert reading.retry_after == (pytest.approx(seconds) if seconds is not None else None)


def test_a_retry_time_is_read_from_a_body_field_through_a_pattern_and_the_first_array_item_that_matches():
    rules = table('[[answers.rule]]\nstatus = 200\nbody_contains = "Throttled"\nretry_after_field = "error"\n'
                  'retry_after_match = \'Throttled: (\\d+)\'\nretry_after_unit = "epoch-s"\noutcome = "unavailable"\n')
    throttled = body({"error": ["EGeneral:Busy", f"EService: Throttled: {int(NOW) + 7}"]})
    assert rules.classify(200, throttled, "7").retry_after == pytest.approx(7.0)
    assert rules.classify(200, body({"error": ["EService: Throttled"]}), "7").retry_after is None


def test_a_reading_without_a_retry_rule_has_no_retry_time():
    assert table("").classify(200, body({"ok": True}), "7").retry_after is None


# -- the rules are checked where they stand ---------------------------------------------------

BROKEN_RULES = [
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\nheader = "B"\noutcome = "rejected"\n', 4, "field or header, not both"),
    ('[[answers.rule]]\nstatus = 200\nheader = "B"\nequals = []\noutcome = "rejected"\n', 4, "a header holds text"),
    ('[[answers.rule]]\nstatus = 200\nheader = "B c"\noutcome = "rejected"\n', 3, "header must be an HTTP token"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\nabsent = true\nequals = 1\noutcome = "rejected"\n', 4,
     "absent, equals, one_of and matches: give one"),
    ('[[answers.rule]]\nstatus = 200\none_of = [1]\noutcome = "rejected"\n', 3, "one_of needs the field or header"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\none_of = []\noutcome = "rejected"\n', 4, "one_of needs a value"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\nequals = [{ x = 1 }]\noutcome = "rejected"\n', 4,
     "equals must be a string, a number, a boolean or an array of them"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a..b"\noutcome = "rejected"\n', 3, "is no JSON path"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\nmatches = "(E"\noutcome = "rejected"\n', 4,
     "matches is no pattern"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\nmatches = ""\noutcome = "rejected"\n', 4,
     "matches needs a pattern"),
    ('[[answers.rule]]\nstatus = 200\nmatches = "^E"\noutcome = "rejected"\n', 3, "matches needs the field or header"),
    ('[[answers.rule]]\nstatus = 200\nfield = "a"\none_of = ["x"]\nmatches = "^E"\noutcome = "rejected"\n', 4,
     "absent, equals, one_of and matches: give one"),
    ('[[answers.rule]]\nstatus = 429\nretry_after_header = "R"\nretry_after_field = "r"\noutcome = "rate_limited"\n',
     4, "retry_after_header or retry_after_field, not both"),
    ('[[answers.rule]]\nstatus = 429\nretry_after_header = "R"\nretry_after_match = "(\\\\d"\n'
     'outcome = "rate_limited"\n', 4, "retry_after_match is no pattern"),
    ('[[answers.rule]]\nstatus = 429\nretry_after_header = "R"\nretry_after_match = "\\\\d+"\n'
     'outcome = "rate_limited"\n', 4, "one group"),
    ('[[answers.rule]]\nstatus = 429\nretry_after_unit = "s"\noutcome = "rate_limited"\n', 3,
     "retry_after_unit needs retry_after_header or retry_after_field"),
    ('[[answers.rule]]\nstatus = 429\nretry_after_header = "R"\nretry_after_unit = "minutes"\noutcome = "rate_limited"\n',
     4, "retry_after_unit must be one of s, ms, epoch-s, epoch-ms, date"),
    ('[[answers.rule]]\nstatus = 400\nretry_after_header = "R"\noutcome = "rejected"\n', 3,
     "a retry time serves a rate_limited, unavailable or banned rule"),
    ('[nonce]\nspent_by = "every request"\n', 2, "spent_by must be one of accepted, any-authenticated"),
]


@pytest.mark.parametrize("text, line, words", BROKEN_RULES, ids=[words for _, _, words in BROKEN_RULES])
def test_profile_check_names_the_line_of_each_broken_rule(tmp_path, capsys, text, line, words):
    path = tmp_path / "broken.toml"
    path.write_text(text + ACCEPT)
    assert profile_main(["check", str(path)], "thread-client") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert any(error.startswith(f"{path}:{line}: ") and words in error for error in errors), errors


@pytest.mark.parametrize("text", [
    '[[answers.rule]]\nstatus = 200\nfield = "error"\nequals = []\noutcome = "accepted"\n',
    '[[answers.rule]]\nstatus = 200\nfield = "e"\nequals = ["a", 1, true, 1.5]\noutcome = "rejected"\n',
    '[[answers.rule]]\nstatus = 400\nfield = "code"\none_of = [-1021, "x"]\noutcome = "invalid_nonce"\n',
    '[[answers.rule]]\nstatus = 200\nheader = "X-State"\nabsent = true\noutcome = "ambiguous"\n',
    '[[answers.rule]]\nstatus = 409\nfield = "code"\nequals = "DUP"\noutcome = "duplicate"\n',
    '[[answers.rule]]\nstatus = 200\nfield = "error"\nmatches = \'^EService: ?Throttled: \\d+\'\n'
    'outcome = "unavailable"\n',
    '[[answers.rule]]\nstatus = 200\nretry_after_field = "error"\nretry_after_match = \'Throttled: (\\d+)\'\n'
    'retry_after_unit = "epoch-s"\nbody_contains = "Throttled"\noutcome = "unavailable"\n',
    '[nonce]\nspent_by = "any-authenticated"\n',
])
def test_the_new_rule_fields_read_back_from_show(text):
    profile = read_profile(text + ACCEPT, "new.toml", "new")
    assert read_profile(profile_toml(profile), "shown", "new") == profile


# -- the shipped examples, read through their real files ------------------------------------

KRAKEN = str(ROOT / "examples" / "profiles" / "kraken-like.toml")


@pytest.mark.parametrize("payload, outcome", [
    ({"error": ["EOrder:Insufficient funds"], "result": {}}, Outcome.REJECTED),  # issue 33: it was read accepted
    ({"error": ["EGeneral:Invalid arguments"]}, Outcome.REJECTED),
    ({"error": [], "result": {"descr": {"order": "buy 1 XBTUSD @ market"}, "txid": ["OUF4EM-FRGI2-MQMWZD"]}},
     Outcome.ACCEPTED),
    ({"result": {"txid": ["OUF4EM-FRGI2-MQMWZD"]}}, Outcome.BAD_ANSWER),  # no error array: nothing says accepted
    ({"error": ["EAPI:Invalid nonce"]}, Outcome.INVALID_NONCE),
    ({"error": ["EService:Unavailable"]}, Outcome.UNAVAILABLE),
    ({"error": ["EService:Busy"]}, Outcome.UNAVAILABLE),
    ({"error": ["EAPI:Rate limit exceeded"]}, Outcome.RATE_LIMITED),
    ({"error": ["EOrder:Rate limit exceeded"]}, Outcome.RATE_LIMITED),
    ({"error": ["EGeneral:Temporary lockout"]}, Outcome.BANNED),
    ({"error": ["EAPI:Invalid key"], "result": {}}, Outcome.INVALID_KEY),
    ({"error": ["EAPI:Invalid signature"]}, Outcome.INVALID_KEY),
    ({"error": ["EGeneral:Permission denied"]}, Outcome.FORBIDDEN),
    ({"error": ["EGeneral:Internal error"]}, Outcome.AMBIGUOUS),
    # Issue 41, 4.9: the error array is read before any body text, and W is a warning. A warning beside a result
    # (the docs give its form, "<severity><category>:<message>", not its words: these are made up) is a success.
    ({"error": ["WGeneral:Deprecated field"], "result": {"descr": {"order": "buy 1.25 XBTUSD @ market"},
                                                         "txid": ["OUF4EM-FRGI2-MQMWZD"]}}, Outcome.ACCEPTED),
    ({"error": ["WGeneral:Deprecated field", "EOrder:Insufficient funds"]}, Outcome.REJECTED),
    ({"error": ["WGeneral:Deprecated field", "EAPI:Invalid nonce"]}, Outcome.INVALID_NONCE),
    # An error's words elsewhere in the body (an order's description) are no error: placed, or refused as it says.
    ({"error": [], "result": {"descr": {"order": "buy 1.25 XBTUSD @ limit 100", "close": "EAPI:Invalid key"},
                              "txid": ["OUF4EM-FRGI2-MQMWZD"]}}, Outcome.ACCEPTED),
    ({"error": [], "result": {"descr": {"order": "EService: Throttled: 1764051065"}}}, Outcome.ACCEPTED),
    ({"error": ["EOrder:Insufficient funds"], "result": {"descr": {"order": "Rate limit exceeded"}}},
     Outcome.REJECTED),
    ({"error": [5]}, Outcome.BAD_ANSWER),  # neither an error nor a warning: nothing says placed, nor refused
])
def test_the_kraken_like_profile_reads_kraken_s_answers(payload, outcome):
    assert AnswerTable(load_profile(KRAKEN)).classify(200, body(payload), "7").outcome is outcome


def test_the_kraken_like_profile_waits_out_a_throttle_until_the_time_it_names():
    reading = AnswerTable(load_profile(KRAKEN), wall=lambda: NOW).classify(200, body({"error": [f"EService: Throttled: {int(NOW) + 9}"]}), "7")
    assert reading.outcome is Outcome.UNAVAILABLE and reading.retry_after == pytest.approx(9.0)


def test_a_throttle_time_our_clock_has_passed_still_pauses_the_key():
    """Our wall clock 4 s ahead of Kraken's: read as 0, the throttled request came back at once, no pause, no retry
    spent, for as long as the clocks disagree."""
    reading = AnswerTable(load_profile(KRAKEN), wall=lambda: NOW + 4).classify(
        200, body({"error": [f"EService: Throttled: {int(NOW)}"]}), "7")
    action = RetryPolicy().decide(reading.outcome, 0, reading.retry_after)
    assert (action.key, action.key_delay) == (KeyStep.PAUSE, 1.0)


def test_the_kraken_like_profile_says_any_authenticated_request_spends_a_nonce():
    assert load_profile(KRAKEN).nonce.spent_by == "any-authenticated"
    assert load_profile().nonce.spent_by == "accepted"  # the reference contract's


# -- exactly-once only where its nonce proof holds ------------------------------------------


def kraken_without_settle() -> Profile:
    """The Kraken-like example as it was before it could ask: no [settle], and so no call counter for its asks."""
    kraken = load_profile(KRAKEN)
    return dataclasses.replace(kraken, settle=None,
                               limits=tuple(rule for rule in kraken.limits if rule.name != "call counter"))


def test_exactly_once_is_refused_in_one_line_for_a_profile_whose_nonces_any_authenticated_request_spends(tmp_path):
    """Kraken checks the nonce before anything else: a first copy refused for its funds spends it, and the
    resend's "invalid nonce" would read as proof of an accept. With no [settle] endpoint to ask, exactly-once
    cannot be kept."""
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{KEYS[0]} {base64.b64encode(b'secret of the key').decode()}\n")
    keys.chmod(0o600)
    profile = tmp_path / "kraken-without-settle.toml"
    profile.write_text(profile_toml(kraken_without_settle()))
    hook = ROOT / "examples" / "profiles" / "kraken_like_sign.py"
    (tmp_path / hook.name).write_bytes(hook.read_bytes())  # found next to the profile, as the example's is
    refused = subprocess.run(
        [sys.executable, "-m", "thread_client", "--profile", str(profile), "--keys-file", str(keys), "--delivery",
         "exactly-once", "--url", "http://127.0.0.1:9"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == "" and "Traceback" not in refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "spent_by = \"any-authenticated\"" in lines[0] and "[settle]" in lines[0], lines


def test_exactly_once_is_kept_where_only_an_accept_spends_a_nonce_or_the_exchange_is_asked():
    """The Kraken-like example asks QueryOrders by cl_ord_id ([settle]): exactly-once holds for it as shipped."""
    kraken = kraken_without_settle()
    secret = (Secret(base64.b64encode(b"secret of the key").decode()),)
    with pytest.raises(ConfigError, match="any-authenticated"):
        Config(keys=KEYS[:1], secrets=secret, profile=kraken, delivery=EXACTLY_ONCE, threads_per_key=1)
    accepted_only = dataclasses.replace(kraken, nonce=dataclasses.replace(kraken.nonce, spent_by="accepted"))
    assert Config(keys=KEYS[:1], secrets=secret, profile=accepted_only, delivery=EXACTLY_ONCE, threads_per_key=1)
    assert Config(keys=KEYS[:1], secrets=secret, profile=load_profile(KRAKEN), delivery=EXACTLY_ONCE,
                  threads_per_key=1)


def test_exactly_once_is_kept_where_a_settle_endpoint_asks_the_exchange_whatever_the_nonce_proves():
    """A timestamp proves nothing of a first copy's fate, but a profile with a [settle] endpoint asks the
    exchange instead: exactly-once holds for it (Binance's order status by client id)."""
    binance = load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml"))
    assert not binance.nonce.proves_acceptance and binance.settle is not None
    secret = (Secret("binance secret"),)
    assert Config(keys=KEYS[:1], secrets=secret, profile=binance, delivery=EXACTLY_ONCE, threads_per_key=1)
    with pytest.raises(ConfigError, match="timestamp-ms, which the exchange would take twice"):
        Config(keys=KEYS[:1], secrets=secret, profile=dataclasses.replace(binance, settle=None), delivery=EXACTLY_ONCE,
               threads_per_key=1)
