"""The request on the ground floor: what a source yields (``Work``, ``InvalidInput``, ``UnknownFate``),
how a line is read into one (``parse_line``), and the ``Request`` followed until its final outcome.

Every layer imports this module; it imports no other package module, so the sources, sinks,
journals and transports of ``io/`` and ``cluster/`` never reach into the flow."""

from __future__ import annotations

import enum
import json
import math
import re
import time
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Callable

__all__ = [
    "MAX_ID_LENGTH", "MAX_LINE_BYTES", "FinalOutcome", "InvalidInput", "Number", "Params", "Request",
    "UnknownFate", "Work", "endpoint_fields", "json_text", "parse_line", "read_json",
]


class FinalOutcome(enum.Enum):
    """How a request's journey ends, exactly one per request: decided once (by the retry policy, the
    producer or the stop) and carried as it is to the graveyard, the results and the summary."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"  # the API refused the request itself
    RETRIES_EXHAUSTED = "retries_exhausted"
    INVALID_INPUT = "invalid_input"  # a line that is no request: never sent
    KEY_BLOCKED = "key_blocked"  # work left when every key was retired that no next run can take up (resumability.py)
    SHUTDOWN = "shutdown"  # work still queued at a stop that no next run can take up: generated, a pipe, --results -
    UNKNOWN = "unknown"  # may have been accepted, and exactly-once could not settle it
    DUPLICATE = "duplicate"  # the exchange already has an order of its client id: the first copy exists

    def reason(self, detail: str = "") -> str:
        """The outcome in words, with the detail after a colon: ``retries exhausted: timeout``."""
        words = self.value.replace("_", " ")
        return f"{words}: {detail}" if detail else words

class Number(str):
    """A JSON number as the input line wrote it (``0.00001``, ``1E+3``, ``-7``, 30 digits): sent as this very
    text, in a query, a form or a JSON body, never through a float (``1e-05``) or an int."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Number({str.__repr__(self)})"


#: A parameter's value as the line gave it: a string, a ``Number``, a boolean, null, or (for a JSON body) an
#: object or array of them.
Value = str | bool | None | list | dict
Params = dict[str, Value]


def read_json(raw: bytes | str) -> object:
    """``raw`` as JSON, each number a ``Number`` that keeps its text (NaN and Infinity are no JSON: ValueError)."""
    return json.loads(raw, parse_float=Number, parse_int=Number, parse_constant=_no_constant)


def json_text(value: object, *, separators: tuple[str, str] = (",", ":"), ensure_ascii: bool = True) -> str:
    """``value`` as JSON, as ``json.dumps`` writes it with these ``separators`` and ``ensure_ascii``, save that a
    ``Number`` keeps its own text: what ``read_json`` reads back to the same values."""
    if isinstance(value, Number):
        return str.__str__(value)
    quote = encode_basestring_ascii if ensure_ascii else encode_basestring
    if isinstance(value, str):  # as json.dumps writes a string, without building an encoder per value
        return quote(value)
    item, key = separators
    if isinstance(value, dict):
        return "{" + item.join(f"{quote(str(name))}{key}"
                               f"{json_text(part, separators=separators, ensure_ascii=ensure_ascii)}"
                               for name, part in value.items()) + "}"
    if isinstance(value, list):
        return "[" + item.join(json_text(part, separators=separators, ensure_ascii=ensure_ascii)
                               for part in value) + "]"
    return json.dumps(value, ensure_ascii=ensure_ascii)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is no JSON number")


MAX_ID_LENGTH = 256
#: A key's id as ``limits.keys.key_id`` makes it: what a requeued line's ``sent_on`` names.
_KEY_ID = re.compile(r"[0-9a-f]{16}")
#: The longest line a source reads as a request; a longer one is ``invalid_input``, read past in
#: bounded memory (a line is one request, not a file).
MAX_LINE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Work:
    """One request to send: the user's id (sent as ``req_id``) and its parameters as the line gave them; the
    ``method`` and ``path`` it goes to ("": the profile's, as the line leaves them to it) and its ``weight``
    (what a limit whose cost is ``"weight"`` counts it as)."""

    id: str
    params: Params = field(default_factory=dict)
    resumed: bool = False  # in flight when an earlier run crashed: it may have been accepted already
    sent_on: str = ""  # resumed: the id of the key its latest send went on, if known (whose account has the order)
    receipt: str | None = None  # what to acknowledge to the source once the request is final (a stream entry id)
    where: str = ""  # where the source read it (``line 12``), as its final record says
    method: str = ""
    path: str = ""
    weight: int = 1

    def as_line(self) -> str:
        """The request as an input line that reads back to it (a work stream's entry); a resumed one says so
        (``sent_on``): the daemon asks the exchange for its order before sending it again."""
        return json_text({"id": self.id, "params": self.params, **endpoint_fields(self),
                          **({"sent_on": self.sent_on} if self.resumed else {})})


@dataclass(frozen=True, slots=True)
class InvalidInput:
    """A line that is no request: never sent, recorded as ``invalid_input`` with where it was
    (``line 12``, ``entry 1700000000000-0``) and, for a file's line, a digest of its bytes: with
    ``where``, how a rerun knows the lines it recorded (another input may hold another line there)."""

    where: str
    id: str
    reason: str
    receipt: str | None = None  # as Work's: acknowledged with the invalid_input record
    digest: str = field(default="", compare=False)

@dataclass(frozen=True, slots=True)
class UnknownFate:
    """A request an earlier holder may have sent, whose fate cannot be settled here (exactly-once never
    sends it again): recorded ``unknown`` with ``reason``."""

    id: str
    reason: str
    receipt: str | None = None



@dataclass(slots=True, eq=False)
class Request:
    """Mutable, but owned by exactly one thread at a time (whoever took it from a queue).

    ``req_id`` is sent as the contract's ``req_id``. ``created_at`` and ``deadline`` are
    monotonic seconds; ``created_wall`` is kept only for the graveyard record.
    ``failures`` counts attempts that spent a retry, ``unsent`` those that could not
    be sent at all (the exchange unreachable), which cost nothing, ``ambiguous`` those
    that may have been accepted although no answer said so. ``method``, ``path`` and
    ``weight`` are its ``Work``'s, checked against the profile (both "": the profile's endpoint).
    """

    req_id: str
    created_at: float
    params: Params = field(default_factory=dict)  # the user's parameters, sent with each attempt
    resumed: bool = False  # in flight when an earlier run crashed
    sent_on: str = ""  # the id of the key its latest send went on, if known ("": not known): whose account has its order
    receipt: str | None = None  # what the source wants acknowledged with the final record (a stream entry id)
    where: str = ""  # where the source read it (``line 12``, ``entry 1700000000000-0``)
    digest: str = ""  # an invalid line's: a digest of its bytes, as its record keeps it (``InvalidInput``)
    method: str = ""
    path: str = ""
    weight: int = 1
    requeue: int = 0  # the n-th time an operator sent this id again after its dead record (0: never)
    deadline: float = math.inf  # set by renew() when a worker takes the request
    created_wall: float = field(default_factory=time.time)
    failures: int = 0
    unsent: int = 0
    attempts: int = 0  # attempts that went out (or tried to)
    ambiguous: int = 0  # attempts the exchange may have accepted without saying so
    # A send of it went unanswered, or was answered "duplicate", even if an ask found no order then: its order may be
    # in the account of the key that sent it, which alone would refuse its client id again (``sent_on``).
    placed_maybe: bool = False
    # Its latest send may have placed its order and nothing settled that (resumed after a crash; the client failed
    # after the bytes left): where the exchange can be asked, it is, before the request is sent again.
    unsettled: bool = False
    # What the latest failed attempt came to: an ``Outcome`` (``policy.answers``; a layer above, so not named here).
    last_failure: enum.Enum | None = None
    # The latest attempt, for the final record: which key and nonce, and what the exchange answered.
    key: str = ""
    nonce: int | None = None
    http_status: int | None = None
    body: bytes = b""

    def __post_init__(self) -> None:
        if self.resumed:  # the earlier run's send was never settled
            self.unsettled = self.placed_maybe = True

    def note_attempt(self, key: str, nonce: int, http_status: int | None, body: bytes) -> None:
        """An attempt went out on ``key`` with ``nonce``; ``http_status`` None: no answer came."""
        self.key, self.nonce, self.http_status, self.body = key, nonce, http_status, body
        self.attempts += 1

    def note_failure(self, outcome: enum.Enum, spend: bool = True) -> None:
        """An attempt failed, as ``outcome``; ``spend`` says whether it counts against the retry budget."""
        if spend:
            self.failures += 1
        else:
            self.unsent += 1
        self.last_failure = outcome

    def renew(self, now: float, ttl: float) -> None:
        """Taken by a worker: a fresh time-to-live for the wait for a slot, from ``now``."""
        self.deadline = now + ttl


def endpoint_fields(item: Work | Request) -> dict[str, str | int]:
    """The fields a request's line, or a journal line of its send, names beyond its id and params: its
    endpoint and weight, each only where it is not the profile's (a usual line stays as it always was)."""
    fields: dict[str, str | int] = {"method": item.method} if item.method else {}
    if item.path:
        fields["path"] = item.path
    if item.weight != 1:
        fields["weight"] = item.weight
    return fields


def parse_line(
    raw: bytes | str, where: str, receipt: str | None = None,
    admit: Callable[[Work], Work | InvalidInput] | None = None,
) -> Work | InvalidInput:
    """One line read against the request format; never raises, whatever the line holds (any bytes,
    any depth, any Unicode). ``where`` names it in the reason; ``receipt`` goes with the result,
    valid or not. ``admit``: the profile's check of a request's endpoint and weight (``Endpoints``)."""
    item = _read_request(raw, where)
    if admit is not None and isinstance(item, Work):
        item = admit(item)
    return replace(item, receipt=receipt) if receipt is not None else item


def _read_request(raw: bytes | str, where: str) -> Work | InvalidInput:
    if len(raw) > MAX_LINE_BYTES:
        return InvalidInput(where, "", f"longer than {MAX_LINE_BYTES} bytes")
    try:
        value = read_json(raw)
    except ValueError:
        return InvalidInput(where, "", "not JSON")
    except RecursionError:
        return InvalidInput(where, "", "nested too deep")
    if not isinstance(value, dict):
        return InvalidInput(where, "", "not a JSON object")
    request_id = value.get("id")
    if not _is_text(request_id) or not 0 < len(request_id) <= MAX_ID_LENGTH:
        return InvalidInput(where, "", f"no \"id\" string of 1 to {MAX_ID_LENGTH} characters")
    if not _encodable(request_id):
        return InvalidInput(where, "", "the id is not valid Unicode (a lone surrogate)")
    unknown = set(value) - {"id", "params", "method", "path", "weight", "sent_on"}
    if unknown:
        return InvalidInput(where, request_id, f"unknown field(s) {', '.join(sorted(unknown))}")
    method, path, weight = value.get("method", ""), value.get("path", ""), _whole(value.get("weight", Number(1)))
    if not _is_text(method) or "method" in value and not method:
        return InvalidInput(where, request_id, '"method" is not a method name such as "POST"')
    if not _is_text(path) or "path" in value and not path.startswith("/"):
        return InvalidInput(where, request_id, '"path" is not a path starting with /')
    if weight is None or weight < 1:
        return InvalidInput(where, request_id, '"weight" is not a positive integer')
    sent_on = value.get("sent_on", "")
    if "sent_on" in value and not (_is_text(sent_on) and _KEY_ID.fullmatch(sent_on)):
        return InvalidInput(where, request_id, '"sent_on" is not the id of a key (16 hex digits, as thread-client '
                                               'requeue writes it)')
    params = value.get("params", {})
    if not isinstance(params, dict):
        return InvalidInput(where, request_id, "\"params\" is not an object")
    for name, param in params.items():
        try:
            encodable = _encodable(name) and _all_encodable(param)
        except RecursionError:
            return InvalidInput(where, request_id, "nested too deep")
        if not encodable:
            return InvalidInput(where, request_id, f"parameter {name!r} is not valid Unicode (a lone surrogate)")
    return Work(request_id, params, where=where, method=method, path=path, weight=weight, resumed="sent_on" in value,
                sent_on=sent_on)


def _is_text(value: object) -> bool:
    """Whether ``value`` is a JSON string (a ``Number`` is a str, but no string)."""
    return isinstance(value, str) and not isinstance(value, Number)


def _whole(value: object) -> int | None:
    """A JSON number written as a whole number (``4``; not ``4.0``, ``"4"`` or ``true``), else None."""
    if not isinstance(value, Number) or not value.lstrip("-").isdecimal() or len(value) > 18:
        return None
    return int(value)


def _all_encodable(value: Value) -> bool:
    """Whether every string in ``value`` (names of nested objects too) can be sent as UTF-8."""
    if isinstance(value, str):
        return _encodable(value)
    if isinstance(value, dict):
        return all(_encodable(name) and _all_encodable(item) for name, item in value.items())
    if isinstance(value, list):
        return all(map(_all_encodable, value))
    return True


def _encodable(text: str) -> bool:
    """Whether ``text`` can be sent and stored as UTF-8 (JSON admits lone surrogates; UTF-8 does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
