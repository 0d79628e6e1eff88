"""The answer table: what one HTTP attempt came to, read from the API's answer by the profile's ordered rules.

Real servers and proxies answer things the reference server never does (an
HTML 429 from a load balancer, a 404 for a wrong path, a 403 from a firewall);
each gets a rule in the profile, and the retry policy decides what to do about it.
"""

from __future__ import annotations

import enum
import functools
import http
import json
import re
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from ..parts import NO_HEADERS
from ..profile import AnswerRule, JsonPath, Profile, load_profile
from ..profile.model import rule_headers
from .retry_time import retry_seconds

__all__ = ["AnswerTable", "Outcome", "Reading", "reference_table"]


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    BAD_ANSWER = "bad_answer"  # a 200 no rule accepts: it may have been accepted (ambiguous)
    INVALID_NONCE = "invalid_nonce"  # the nonce (or timestamp) was refused: retry with a fresh one
    REJECTED = "rejected"  # the request itself is refused, final
    INVALID_KEY = "invalid_key"  # 401
    FORBIDDEN = "forbidden"  # 403
    ENDPOINT_NOT_FOUND = "endpoint_not_found"  # 404 or 405: --url points at the wrong place
    KEY_BLOCKED = "key_blocked"  # the key is dead for good
    RATE_LIMITED = "rate_limited"  # a strike
    BANNED = "banned"  # the whole host is refused (a 418 ban): every key pauses until it ends
    UNAVAILABLE = "unavailable"  # 503: with a Retry-After, the key pauses that long
    SERVER_ERROR = "server_error"  # any other 5xx, or a status no rule reads
    TIMEOUT = "timeout"  # no answer within the HTTP timeout after the request was written (ambiguous)
    CONNECTION_RESET = "connection_reset"  # dropped after the request was written (ambiguous)
    UNREACHABLE = "unreachable"  # refused, name not resolved, TLS handshake failed: nothing was sent
    EXPIRED = "expired"  # the time-to-live passed before a slot was free
    INTERNAL_ERROR = "internal_error"  # the client itself failed while handling the attempt
    UNKNOWN = "unknown"  # exactly-once: the fate of an ambiguous attempt could not be settled (stopped first)
    AMBIGUOUS = "ambiguous"  # the exchange says it does not know (Binance's -1007): it may have executed
    DUPLICATE = "duplicate"  # the exchange says this client id was seen (Binance's -2010): the first copy exists

    @property
    def ambiguous(self) -> bool:
        """The exchange may have accepted the request although no definite answer said so."""
        return self in (Outcome.BAD_ANSWER, Outcome.TIMEOUT, Outcome.CONNECTION_RESET, Outcome.AMBIGUOUS)


#: A profile's outcome names, as the policy knows them.
_BY_NAME = {
    "accepted": Outcome.ACCEPTED, "invalid_nonce": Outcome.INVALID_NONCE, "rate_limited": Outcome.RATE_LIMITED,
    "key_blocked": Outcome.KEY_BLOCKED, "banned": Outcome.BANNED, "invalid_key": Outcome.INVALID_KEY,
    "forbidden": Outcome.FORBIDDEN, "rejected": Outcome.REJECTED, "unavailable": Outcome.UNAVAILABLE,
    "retry": Outcome.SERVER_ERROR, "stop": Outcome.ENDPOINT_NOT_FOUND, "ambiguous": Outcome.AMBIGUOUS,
    "duplicate": Outcome.DUPLICATE,
}
# Outcomes whose words start with the status: they say something about the server, not the request.
_STATUS_FIRST = (Outcome.ENDPOINT_NOT_FOUND, Outcome.UNAVAILABLE, Outcome.SERVER_ERROR)
# Outcomes that retire a key: their words are the server's message or the status, never a page of HTML.
_MESSAGE_ONLY = (Outcome.INVALID_KEY, Outcome.FORBIDDEN)


@dataclass(frozen=True, slots=True)
class Reading:
    """An answer read against the table: its outcome, and the server's own words (for reasons and logs).
    ``unmatched``: no rule read it (it is counted by status). ``retry_after``: the seconds the rule read from
    the answer until the exchange says to try again (None: it names none, or the rule reads none)."""

    outcome: Outcome
    detail: str = ""
    unmatched: bool = False
    retry_after: float | None = None


class _Rule:
    """A rule compiled once: its outcome resolved, its paths parsed, its test and its retry time made closures."""

    __slots__ = ("outcome", "contains", "field", "header", "test", "echo", "reads_json", "retry")

    def __init__(self, rule: AnswerRule, wall: Callable[[], float]) -> None:
        self.outcome = _BY_NAME[rule.outcome]
        self.contains = rule.body_contains.encode()
        self.field = JsonPath(rule.field) if rule.field else None
        self.header = rule.header.lower()
        self.test = _test(rule)
        self.echo = JsonPath(rule.echo_id) if rule.echo_id else None
        self.reads_json = self.field is not None or self.echo is not None  # no JSON object: the rule cannot match
        self.retry = _RetryTime(rule, wall) if rule.retry_after_header or rule.retry_after_field else None


class _RetryTime:
    """Where a rule reads when to try again: a header or a JSON field (each item of an array in turn), the text
    through a pattern's group, in the rule's unit; seconds from the wall clock's now."""

    __slots__ = ("header", "field", "pattern", "unit", "wall")

    def __init__(self, rule: AnswerRule, wall: Callable[[], float]) -> None:
        self.header = rule.retry_after_header.lower()
        self.field = JsonPath(rule.retry_after_field) if rule.retry_after_field else None
        self.pattern = re.compile(rule.retry_after_match) if rule.retry_after_match else None
        self.unit = rule.retry_after_unit or "s"
        self.wall = wall

    def seconds(self, payload: dict | None, headers: Mapping[str, str]) -> float | None:
        if self.field is None:
            found: object = headers.get(self.header, _MISSING)
        else:
            found = _MISSING if payload is None else _find(payload, self.field)
        for value in found if isinstance(found, list) else (found,):
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                continue
            text = str(value)
            if self.pattern is not None:
                match = self.pattern.search(text)
                if match is None or match.group(1) is None:
                    continue
                text = match.group(1)
            seconds = retry_seconds(text, self.unit, self.wall())
            if seconds is not None:
                return seconds
        return None


class AnswerTable:
    """A profile's answer rules, by status: ``classify`` finds the first rule an answer meets. An answer
    no rule meets is today's "anything else": ambiguous for a 200, retried as a server error otherwise.
    ``headers``: the response headers (lowercase) the rules read, which ``classify`` must be given.
    ``wall``: the wall clock a retry time written as a moment (an epoch, a date) is counted from."""

    def __init__(self, profile: Profile, wall: Callable[[], float] = time.time) -> None:
        rules = [(rule.statuses, _Rule(rule, wall)) for rule in profile.answers]
        self._by_status = {status: tuple(compiled for (low, high), compiled in rules if low <= status <= high)
                           for status in range(100, 600)}
        self._message = JsonPath(profile.message_field) if profile.message_field else None
        self.headers = rule_headers(profile.answers)

    def classify(self, status: int, body: bytes, req_id: str, headers: Mapping[str, str] = NO_HEADERS) -> Reading:
        """Read one answer. ``req_id`` is the id that was sent; an echo of it as a JSON number counts.
        ``headers``: the answer's headers by lowercase name (those in ``self.headers`` at least)."""
        payload: dict | None = None
        parsed = False
        for rule in self._by_status.get(status, ()):
            if rule.contains and rule.contains not in body:
                continue
            if rule.header and not rule.test(headers.get(rule.header, _MISSING)):
                continue
            if rule.reads_json:
                if not parsed:
                    payload, parsed = _json_object(body), True
                if payload is None:
                    continue
                if rule.field is not None and not rule.test(_find(payload, rule.field)):
                    continue
                if rule.echo is not None and not _same_id(_find(payload, rule.echo), req_id):
                    continue
            if rule.outcome is Outcome.ACCEPTED:
                return _ACCEPTED
            if not parsed:
                payload, parsed = _json_object(body), True
            retry_after = rule.retry.seconds(payload, headers) if rule.retry is not None else None
            return Reading(rule.outcome, self._words(rule.outcome, status, payload, body), retry_after=retry_after)
        if not parsed:
            payload = _json_object(body)
        if status == 200:
            return Reading(Outcome.BAD_ANSWER, "200 that no answers rule accepts for this id", unmatched=True)
        return Reading(Outcome.SERVER_ERROR, self._words(Outcome.SERVER_ERROR, status, payload, body), unmatched=True)

    def _words(self, outcome: Outcome, status: int, payload: dict | None, body: bytes) -> str:
        """The server's own words for the record: its message field, else the start of the body, else the status."""
        message = _find(payload, self._message) if payload is not None and self._message is not None else _MISSING
        if message is not _MISSING and message not in (None, ""):
            words = str(message)
        else:
            words = "" if outcome in _MESSAGE_ONLY else _text(body)
        if outcome in _STATUS_FIRST:
            return f"{status} {words}".strip()
        return words or f"{status} {_phrase(status)}".strip()


@functools.cache
def reference_table() -> AnswerTable:
    """The reference exchange's table (the built-in ``reference`` profile's), read once."""
    return AnswerTable(load_profile())


_ACCEPTED = Reading(Outcome.ACCEPTED)
_MISSING = object()


def _find(payload: dict, path: JsonPath) -> object:
    """What ``payload`` holds at ``path``, or ``_MISSING``."""
    try:
        return path.find(payload)
    except LookupError:
        return _MISSING


def _test(rule: AnswerRule) -> Callable[[object], bool]:
    """A rule's test of the value at its field or header (``_MISSING`` if there is none) as a closure."""
    if rule.absent:
        return lambda found: found is _MISSING
    if rule.one_of:
        return lambda found: any(_equal(found, wanted) for wanted in rule.one_of)
    if isinstance(rule.equals, tuple):  # a JSON array, item by item: [] is the empty array
        return lambda found: (isinstance(found, list) and len(found) == len(rule.equals)
                              and all(map(_equal, found, rule.equals)))
    if rule.equals is not None:
        return lambda found: _equal(found, rule.equals)
    if rule.matches:  # a pattern found in the text, or in one item of an array (Kraken's error array)
        pattern = re.compile(rule.matches)
        return lambda found: any(_matches(pattern, item) for item in (found if isinstance(found, list) else (found,)))
    return lambda found: found is not _MISSING  # the field only has to be there


def _equal(found: object, wanted: object) -> bool:
    """A JSON value (or a header's text) against a rule's: ``1`` matches ``"1"`` the way an exchange's error code
    may be either."""
    if found is _MISSING:
        return False
    if isinstance(found, bool) or isinstance(wanted, bool):
        return found is wanted
    return found == wanted or str(found) == str(wanted)


def _matches(pattern: re.Pattern[str], found: object) -> bool:
    """Whether ``found`` is a JSON string or number (or a header's text) ``pattern`` is found in."""
    if not isinstance(found, (str, int, float)) or isinstance(found, bool):
        return False
    return pattern.search(str(found)) is not None


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _json_object(body: bytes) -> dict | None:
    """The body as a JSON object, or None for anything else: not JSON, not UTF-8, or nested so deep
    that the parser gives up (a body is the server's, and must never crash the reading of it)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _same_id(echoed: object, sent: str) -> bool:
    if isinstance(echoed, str):
        return echoed == sent
    return isinstance(echoed, int) and not isinstance(echoed, bool) and str(echoed) == sent


def _text(body: bytes, limit: int = 80) -> str:
    """The start of a non-JSON body, on one line, for a log or a reason."""
    return " ".join(body[:limit].decode("utf-8", "replace").split())
