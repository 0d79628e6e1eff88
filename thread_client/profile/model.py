"""A profile compiled: plain frozen values the transport, the answer reading and the nonces read once at start-up."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import string
from dataclasses import dataclass

from .. import defaults
from ..limits.rules import LimitRule

__all__ = [
    "ANSWER_OUTCOMES", "FIELDS_IN", "HEADER_FIELDS", "INVALID_NONCE_COSTS", "METHODS", "NONCE_STYLES", "PARAMS_IN",
    "TEMPLATE_FIELDS", "TIME_UNITS", "USER_AGENT", "AnswerRule", "NonceShape", "Penalty", "Profile", "RequestShape",
    "Signing", "template_fields",
]

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: Where a request's own parameters travel: the query string, a form-encoded body, or a JSON object body.
PARAMS_IN = ("query", "form", "json")
#: Where the profile's own params (key, nonce, receive window, id) travel: the query string, or the body.
FIELDS_IN = ("query", "body")
#: ``counter``: strictly increasing per key (wall-clock microseconds, durable across runs);
#: ``timestamp-ms``/``-us``/``-s``: the server's clock as the daemon estimates it, a whole number of those units;
#: ``timestamp-iso``: the same in ISO-8601 UTC with ms (``2026-11-25T06:11:05.123Z``); ``none``: nothing is sent.
NONCE_STYLES = ("counter", "timestamp-ms", "timestamp-us", "timestamp-s", "timestamp-iso", "none")
#: What a time endpoint's field holds (a number or a string of it): epoch ms, µs or s, or an ISO-8601 date.
TIME_UNITS = ("ms", "us", "s", "iso")
#: What a rule may map an answer to: the outcomes the retry policy knows, by name.
ANSWER_OUTCOMES = (
    "accepted", "invalid_nonce", "rate_limited", "key_blocked", "banned", "invalid_key", "forbidden", "rejected",
    "unavailable", "retry", "stop",
)
INVALID_NONCE_COSTS = ("free", "counted")
#: The fields a signing message may name, each filled per request.
TEMPLATE_FIELDS = ("method", "path", "query", "body", "nonce", "timestamp", "key", "recv_window")
#: The fields a header's template may name: the signature's, the key's secret and the signature itself.
HEADER_FIELDS = (*TEMPLATE_FIELDS, "secret", "signature")
#: Sent unless the profile's headers name a User-Agent of their own (some APIs refuse a request without one).
USER_AGENT = f"thread-client/{importlib.metadata.version('thread_client')}"


def template_fields(template: str) -> set[str]:
    """The fields ``template`` names (``{key}``; ``{{`` is a literal brace). Raises ValueError if it is no template."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


@dataclass(frozen=True, slots=True)
class RequestShape:
    """How one request is built. ``key_param`` or ``key_header`` (exactly one) carries the API key;
    ``id_param`` empty: the id is not sent and an answer belongs to its connection only. The user's
    params go where ``params_in`` says; the key, nonce, receive window and id params in the query
    string (``fields_in = "query"``) or with the params in the body (``"body"``). A request goes to
    ``method`` and ``path`` unless its input line names another of ``endpoints`` (``METHOD /path``).
    A header's value is a template over ``HEADER_FIELDS`` (``Bearer {secret}``), filled per key or per request."""

    method: str = "GET"
    path: str = "/api/request"
    params_in: str = "query"
    fields_in: str = "query"
    key_param: str = "api_key"
    key_header: str = ""
    id_param: str = "req_id"
    headers: tuple[tuple[str, str], ...] = ()
    endpoints: tuple[str, ...] = ()

    @property
    def endpoint(self) -> str:
        """The profile's own endpoint, as a limit's cost table names it: ``METHOD /path``."""
        return f"{self.method} {self.path}"

    @property
    def user_agent(self) -> str:
        """The User-Agent every request carries: the profile's own header, else ``USER_AGENT``."""
        return next((value for name, value in self.headers if name.lower() == "user-agent"), USER_AGENT)

    @property
    def names_secret(self) -> bool:
        """Whether a header carries the key's secret (each key then needs one)."""
        return any("secret" in template_fields(value) for _, value in self.headers)


@dataclass(frozen=True, slots=True)
class NonceShape:
    """What proves a request fresh, and where it goes (``param`` or ``header``). A receive window of 0
    is not sent; ``time_path``: an endpoint whose JSON ``time_field`` (a path: ``result.unixtime``,
    ``data[0].ts``) is the server's clock in ``time_unit``."""

    style: str = "counter"
    param: str = "nonce"
    header: str = ""
    recv_window_ms: int = 0
    recv_window_param: str = ""
    recv_window_header: str = ""
    time_path: str = ""
    time_field: str = "serverTime"
    time_unit: str = "ms"

    @property
    def is_timestamp(self) -> bool:
        return self.style.startswith("timestamp")

    @property
    def per_ms(self) -> float:
        """A timestamp style's units per millisecond (an ISO timestamp is drawn in ms, then written as a date)."""
        return {"timestamp-us": 1000, "timestamp-s": 0.001}.get(self.style, 1)

    @property
    def ordered(self) -> bool:
        """Whether the exchange refuses a nonce at or below the key's last one (the order rule matters)."""
        return self.style == "counter"


@dataclass(frozen=True, slots=True)
class Signing:
    """An HMAC over ``message`` (a template over ``TEMPLATE_FIELDS``) with the key's secret, or a
    user's ``hook`` (``module:function``) where a template cannot say it; into ``param`` or ``header``."""

    algorithm: str = "hmac-sha256"
    message: str = "{query}{body}"
    secret_encoding: str = "raw"
    output: str = "hex"
    param: str = "signature"
    header: str = ""
    hook: str = ""
    hook_dir: str = ""  # the profile file's folder, where a hook module not on the path is looked for


@dataclass(frozen=True, slots=True)
class AnswerRule:
    """One row of the answer table: an answer whose status lies in ``statuses`` (inclusive), whose
    body contains ``body_contains`` and whose JSON ``field`` (a dotted path) equals ``equals`` (when
    given) comes to ``outcome``. ``echo_id``: an accepted answer must echo the sent id in this field."""

    outcome: str
    statuses: tuple[int, int]
    body_contains: str = ""
    field: str = ""
    equals: str | int | float | bool | None = None
    echo_id: str = ""
    line: int = dataclasses.field(default=0, compare=False)  # where the rule stands in its file, for messages about it

    @property
    def unconditional(self) -> bool:
        return not (self.body_contains or self.field or self.echo_id)


@dataclass(frozen=True, slots=True)
class Penalty:
    """What the exchange does about refusals: blocks a key for good at ``strikes_to_block`` 429s, and
    counts invalid nonces against it (``counted``) or only spends their slot (``free``). A 429 is the
    refusal of a limit of ``rate_limited_holds`` (a limit's scope: the key that read it, every key of
    its account, or every key sent to the host), which it holds; it counts toward the block unless
    ``rate_limited_strikes`` is false."""

    strikes_to_block: int = defaults.SERVER_MAX_429
    invalid_nonce: str = "free"
    rate_limited_holds: str = "key"
    rate_limited_strikes: bool = True


@dataclass(frozen=True, slots=True)
class Profile:
    """Everything the daemon knows about one API's request side, compiled once at start-up."""

    name: str
    source: str = dataclasses.field(compare=False)  # the file it was read from, or ``built-in NAME``
    request: RequestShape = RequestShape()
    nonce: NonceShape = NonceShape()
    sign: Signing | None = None
    message_field: str = "error_msg"  # the JSON field holding the server's own words, for records and logs
    answers: tuple[AnswerRule, ...] = ()
    penalty: Penalty = Penalty()
    limits: tuple[LimitRule, ...] = ()  # every limit a send must fit ([[limit]]); the reference's if none given
    description: str = ""
