"""A profile compiled: plain frozen values the transport, the answer reading and the nonces read once at start-up."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import defaults
from ..limits.rules import LimitRule

__all__ = [
    "ANSWER_OUTCOMES", "FIELDS_IN", "INVALID_NONCE_COSTS", "METHODS", "NONCE_STYLES", "PARAMS_IN", "TEMPLATE_FIELDS",
    "AnswerRule", "NonceShape", "Penalty", "Profile", "RequestShape", "Signing",
]

METHODS = ("GET", "POST", "PUT", "DELETE")
#: Where a request's own parameters travel: the query string, a form-encoded body, or a JSON object body.
PARAMS_IN = ("query", "form", "json")
#: Where the profile's own params (key, nonce, receive window, id) travel: the query string, or the body.
FIELDS_IN = ("query", "body")
#: ``counter``: strictly increasing per key (wall-clock microseconds, durable across runs);
#: ``timestamp-ms``/``-us``: the server's clock as the daemon estimates it; ``none``: nothing is sent.
NONCE_STYLES = ("counter", "timestamp-ms", "timestamp-us", "none")
#: What a rule may map an answer to: the outcomes the retry policy knows, by name.
ANSWER_OUTCOMES = (
    "accepted", "invalid_nonce", "rate_limited", "key_blocked", "banned", "invalid_key", "forbidden", "rejected",
    "unavailable", "retry", "stop",
)
INVALID_NONCE_COSTS = ("free", "counted")
#: The fields a signing message may name, each filled per request.
TEMPLATE_FIELDS = ("method", "path", "query", "body", "nonce", "timestamp", "key", "recv_window")


@dataclass(frozen=True, slots=True)
class RequestShape:
    """How one request is built. ``key_param`` or ``key_header`` (exactly one) carries the API key;
    ``id_param`` empty: the id is not sent and an answer belongs to its connection only. The user's
    params go where ``params_in`` says; the key, nonce, receive window and id params in the query
    string (``fields_in = "query"``) or with the params in the body (``"body"``). A request goes to
    ``method`` and ``path`` unless its input line names another of ``endpoints`` (``METHOD /path``)."""

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


@dataclass(frozen=True, slots=True)
class NonceShape:
    """What proves a request fresh, and where it goes (``param`` or ``header``). A receive window of 0
    is not sent; ``time_path``: an endpoint whose JSON ``time_field`` is the server's clock in ms."""

    style: str = "counter"
    param: str = "nonce"
    header: str = ""
    recv_window_ms: int = 0
    recv_window_param: str = ""
    recv_window_header: str = ""
    time_path: str = ""
    time_field: str = "serverTime"

    @property
    def is_timestamp(self) -> bool:
        return self.style.startswith("timestamp")

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
