"""Request values as the user wrote them: numbers keep their text from the input line to the wire, the signature,
the journal and the work stream; a JSON body keeps booleans, nulls and nested values typed; PATCH; header
templates over the key, its secret, the timestamp and the signature; timestamps in ms, µs, s or ISO-8601; a time
endpoint read by path in its unit; a User-Agent by default."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
from urllib.parse import parse_qsl

import pytest

from thread_client.delivery import EXACTLY_ONCE
from thread_client.io.request_writer import RequestWriter, iso_ms
from thread_client.io.resume import ResumePoint, SendJournal
from thread_client.io.transport import server_time_ms
from thread_client.limits.timestamps import ServerTimestamps
from thread_client.profile import (
    JsonPath, NonceShape, ProfileError, Secret, Signer, load_profile, profile_toml, read_profile,
)
from thread_client.profile.endpoints import Endpoints
from thread_client.profile.model import USER_AGENT
from thread_client.request import InvalidInput, Request, Work, parse_line

NUMBERS = b'{"id": "n1", "params": {"q": 0.00001, "n": 1E+3, "neg": -7.50, "big": 123456789012345678901234567890}}'
NUMBERS_AS_WRITTEN = {"q": "0.00001", "n": "1E+3", "neg": "-7.50", "big": "123456789012345678901234567890"}
NESTED = (b'{"id": "cb-1", "params": {"reduceOnly": true, "stop": null, "qty": 0.00001, '
          b'"order_configuration": {"limit_limit_gtc": {"base_size": "0.001", "post_only": false, "legs": [1, 2.50]}}}}')


def read(line: bytes, params_in: str = "query") -> Work | InvalidInput:
    """``line`` as the daemon reads it under the reference profile with its params in ``params_in``."""
    reference = load_profile()
    request = dataclasses.replace(reference.request, params_in=params_in)
    return parse_line(line, "line 4", admit=Endpoints(request, reference.limits, reference.own_params).admit)


def writer(params_in: str = "query", **request_fields) -> RequestWriter:
    return RequestWriter("", "KEY", dataclasses.replace(load_profile().request, params_in=params_in, **request_fields))


def test_a_number_goes_as_the_line_wrote_it_in_a_query_a_form_and_a_json_body():
    work = read(NUMBERS)
    assert work.params == NUMBERS_AS_WRITTEN
    _, target, _, _ = writer().write(1, "n1", work.params)
    assert target.endswith("&q=0.00001&n=1E%2B3&neg=-7.50&big=123456789012345678901234567890")
    assert dict(parse_qsl(target.partition("?")[2]))["n"] == "1E+3"
    _, _, form, _ = writer("form").write(1, "n1", read(NUMBERS, "form").params)
    assert form == b"q=0.00001&n=1E%2B3&neg=-7.50&big=123456789012345678901234567890"
    _, _, body, _ = writer("json").write(1, "n1", read(NUMBERS, "json").params)
    assert body == b'{"q":0.00001,"n":1E+3,"neg":-7.50,"big":123456789012345678901234567890}'


def test_the_signature_covers_the_number_as_sent():
    profile = read_profile('[sign]\nmessage = "{query}"\n', "signed.toml")
    signer = Signer(profile.sign, Secret("s3cret"))
    _, target, _, _ = RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, signer).write(
        5, "n1", read(NUMBERS).params)
    query, _, signature = target.partition("?")[2].rpartition("&signature=")
    assert "q=0.00001" in query
    assert signature == hmac.new(b"s3cret", query.encode(), hashlib.sha256).hexdigest()


def test_a_json_body_keeps_booleans_nulls_and_nested_values_typed():
    work = read(NESTED, "json")
    assert isinstance(work, Work)
    _, _, body, headers = writer("json", method="POST").write(9, "cb-1", work.params)
    assert headers["Content-Type"] == "application/json"
    assert body == (b'{"reduceOnly":true,"stop":null,"qty":0.00001,"order_configuration":{"limit_limit_gtc":'
                    b'{"base_size":"0.001","post_only":false,"legs":[1,2.50]}}}')
    assert json.loads(body)["order_configuration"]["limit_limit_gtc"]["post_only"] is False


@pytest.mark.parametrize("params_in, place", [("query", "in the query string"), ("form", "in a form body")])
def test_an_object_an_array_or_a_null_is_refused_with_its_line_where_params_go_as_text(params_in, place):
    refused = read(NESTED, params_in)
    assert refused == InvalidInput("line 4", "cb-1", f"parameter 'stop' is null, which only a JSON body carries "
                                                     f"(this profile sends params {place})")
    for value, kind in ((b'{"a": 1}', "an object"), (b"[1]", "an array")):
        line = b'{"id": "x", "params": {"ok": 1, "bad": ' + value + b"}}"
        assert read(line, params_in).reason.startswith(f"parameter 'bad' is {kind}, which only a JSON body carries")
    assert read(b'{"id": "b", "params": {"reduceOnly": true, "post": false}}', params_in).params == {
        "reduceOnly": "true", "post": "false"}  # a boolean as JSON writes it, not Python's True


def test_the_journal_and_the_work_stream_keep_every_value_as_written(tmp_path):
    work = read(NESTED, "json")
    journal = SendJournal(str(tmp_path / "results.jsonl"), delivery=EXACTLY_ONCE)
    journal.sending(Request(work.id, 0.0, work.params), "k1", 42)
    journal.close()
    resume = ResumePoint(str(tmp_path / "results.jsonl"), tmp_path, delivery=EXACTLY_ONCE)
    again = resume.unsettled["k1"]
    resume.close()
    first = writer("json").write(42, "cb-1", work.params)
    assert writer("json").write(again.nonce, again.id, again.params) == first  # the resend is the same bytes
    streamed = parse_line(work.as_line(), "entry 1-0")
    assert writer("json").write(42, "cb-1", streamed.params) == first
    assert parse_line(read(NUMBERS).as_line(), "entry 1-1").params == NUMBERS_AS_WRITTEN


def test_patch_is_a_method_of_a_profile_and_of_an_input_line():
    profile = read_profile('[request]\nmethod = "PATCH"\npath = "/repos/o/r/issues/1"\nparams_in = "json"\n'
                           'endpoints = ["PATCH /repos/o/r/issues/2"]\n', "github.toml")
    admit = Endpoints(profile.request, profile.limits, profile.own_params).admit
    work = parse_line(b'{"id": "i2", "method": "PATCH", "path": "/repos/o/r/issues/2", "params": {"state": "closed"}}',
                      "line 1", admit=admit)
    method, target, body, _ = RequestWriter("", "KEY", profile.request).write(1, "i2", work.params, work.method,
                                                                              work.path)
    assert (method, target.partition("?")[0], body) == ("PATCH", "/repos/o/r/issues/2", b'{"state":"closed"}')


TEMPLATED = """
[request]
key_param = ""
key_header = "X-Key"
headers = { Authorization = "Bearer {secret}", X-Auth = "{key}:{timestamp}:{signature}", X-Braces = "{{literal}}" }
[nonce]
style = "timestamp-ms"
header = "X-Ts"
[sign]
message = "{timestamp}{method}{path}"
param = ""
"""


def test_header_templates_carry_the_key_its_secret_the_timestamp_and_the_signature():
    profile = read_profile(TEMPLATED, "templated.toml")
    signer = Signer(profile.sign, Secret("s3cret"))
    write = RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, signer, Secret("s3cret")).write
    _, target, _, headers = write(1700000000123, "r1", None)
    signature = hmac.new(b"s3cret", b"1700000000123GET/api/request", hashlib.sha256).hexdigest()
    assert "signature" not in target
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["X-Auth"] == f"KEY:1700000000123:{signature}"
    assert headers["X-Braces"] == "{literal}" and headers["X-Ts"] == "1700000000123"


@pytest.mark.parametrize("headers, error", [
    ('{ X = "{timestamp}" }', "header 'X' names {timestamp}, which this profile never sends ([nonce] style is not"),
    ('{ X = "{signature}" }', "header 'X' names {signature}, which this profile never sends (it has no [sign]"),
    ('{ X = "{token}" }', "header 'X' names an unknown field {token}"),  # a named extra is {extra.token}
    ('{ X = "{secret" }', "header 'X' is not a template"),
    ('{ X = "{secret!r}" }', "header 'X' fields take no format spec or conversion"),
])
def test_profile_check_refuses_a_header_template_the_profile_cannot_fill(headers, error):
    with pytest.raises(ProfileError) as raised:
        read_profile(f"[request]\nheaders = {headers}\n", "h.toml")
    assert raised.value.errors[0].startswith(f"h.toml:2: {error}")


def test_a_secret_never_shows_in_profile_show_or_in_what_the_writer_raises():
    profile = read_profile(TEMPLATED, "templated.toml")
    assert 'Authorization = "Bearer {secret}"' in profile_toml(profile)
    assert read_profile(profile_toml(profile), "shown.toml") == dataclasses.replace(profile, source="shown.toml")
    signer = Signer(profile.sign, Secret("x"))
    with pytest.raises(ValueError) as raised:
        RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, signer, Secret("sécret-€"))
    assert "sécret" not in str(raised.value) and "header Authorization" in str(raised.value)
    with pytest.raises(ValueError, match="name {secret}: the key needs one"):
        RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, signer)
    assert "s3cret" not in repr(RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, signer,
                                              Secret("s3cret")))


class _Clock:
    """A server clock stand-in: ``now_ms`` is all ServerTimestamps reads."""

    def __init__(self, now_ms: float) -> None:
        self.value = now_ms

    def now_ms(self) -> float:
        return self.value


@pytest.mark.parametrize("style, stamp", [
    ("timestamp-ms", 1764051065123), ("timestamp-us", 1764051065123400), ("timestamp-s", 1764051065),
    ("timestamp-iso", 1764051065123),
])
def test_a_timestamp_is_drawn_in_the_profile_s_unit(style, stamp):
    assert ServerTimestamps(_Clock(1764051065123.4), NonceShape(style).per_ms).next() == stamp


def test_an_iso_timestamp_is_sent_and_signed_as_a_date_with_its_milliseconds():
    assert iso_ms(1764051065123) == "2025-11-25T06:11:05.123Z" and iso_ms(1764051065000) == "2025-11-25T06:11:05.000Z"
    profile = read_profile('[nonce]\nstyle = "timestamp-iso"\nheader = "OK-ACCESS-TIMESTAMP"\n'
                           '[sign]\nmessage = "{timestamp}{method}{path}{body}"\noutput = "base64"\n'
                           'header = "OK-ACCESS-SIGN"\n', "okx.toml")
    signer = Signer(profile.sign, Secret("s"))
    _, _, _, headers = RequestWriter("", "KEY", profile.request, profile.nonce, profile.sign, signer).write(
        1764051065123, "r", None)
    assert headers["OK-ACCESS-TIMESTAMP"] == "2025-11-25T06:11:05.123Z"
    expected = hmac.new(b"s", b"2025-11-25T06:11:05.123ZGET/api/request", hashlib.sha256).digest()
    assert headers["OK-ACCESS-SIGN"] == base64.b64encode(expected).decode()


@pytest.mark.parametrize("value, unit, reading", [
    (1764051065123, "ms", (1764051065123.0, 1.0)),
    ("1764051065123", "ms", (1764051065123.0, 1.0)),  # OKX: a string
    (1764051065, "s", (1764051065000.0, 1000.0)),  # Kraken: whole seconds, true to a second
    (1764051065.25, "s", (1764051065250.0, 1.0)),
    (1764051065123400, "us", (1764051065123.4, 1.0)),
    ("2025-11-25T06:11:05.123Z", "iso", (1764051065123.0, 1.0)),
    ("2025-11-25T06:11:05+00:00", "iso", (1764051065000.0, 1000.0)),
])
def test_a_time_endpoint_s_reading_is_taken_in_the_profile_s_unit(value, unit, reading):
    assert server_time_ms(value, unit) == pytest.approx(reading)


@pytest.mark.parametrize("value, unit", [(True, "ms"), ("soon", "s"), (None, "ms"), ("2025-11-25T06:11:05", "iso"),
                                         (1764051065, "iso"), ("NaN", "ms")])
def test_a_time_endpoint_s_reading_that_is_no_time_is_refused(value, unit):
    with pytest.raises(ValueError):
        server_time_ms(value, unit)


def test_a_time_field_is_a_path_checked_by_profile_check():
    assert JsonPath("result.unixtime").find({"error": [], "result": {"unixtime": 1764051065}}) == 1764051065
    assert JsonPath("data[0].ts").find({"code": "0", "data": [{"ts": "1764051065123"}]}) == "1764051065123"
    with pytest.raises(LookupError):
        JsonPath("data[1].ts").find({"data": [{"ts": "1"}]})
    profile = read_profile('[nonce]\nstyle = "timestamp-s"\ntime_path = "/0/public/Time"\n'
                           'time_field = "result.unixtime"\ntime_unit = "s"\n', "kraken.toml")
    assert (profile.nonce.time_field, profile.nonce.time_unit) == ("result.unixtime", "s")
    with pytest.raises(ProfileError) as raised:
        read_profile('[nonce]\nstyle = "timestamp-ms"\n\ntime_field = "data[x].ts"\ntime_unit = "days"\n', "t.toml")
    assert [error.split(": ", 1) for error in raised.value.errors] == [
        ["t.toml:5", "time_unit must be one of ms, us, s, iso, got 'days'"],
        ["t.toml:4", "time_field: 'data[x].ts' is no JSON path (names joined by dots, each with its [index]es: "
                     "result.unixtime, data[0].ts)"]]


def test_every_request_carries_a_user_agent_unless_the_profile_names_its_own():
    assert USER_AGENT.startswith("thread-client/") and USER_AGENT[len("thread-client/"):][0].isdigit()
    assert writer().write(1, "r", None)[3] == {"User-Agent": USER_AGENT}
    own = writer(headers=(("user-agent", "kraken-bot/2"),)).write(1, "r", None)[3]
    assert own == {"user-agent": "kraken-bot/2"}
