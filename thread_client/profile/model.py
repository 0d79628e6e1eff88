"""A profile compiled: plain frozen values the transport, the answer reading and the nonces read once at start-up."""

from __future__ import annotations

import dataclasses
import re
import string
from dataclasses import dataclass

from .. import __version__, defaults
from ..limits.rules import LimitRule

__all__ = [
    "ANSWER_OUTCOMES", "FIELDS_IN", "HEADER_FIELDS", "INVALID_NONCE_COSTS", "METHODS", "NONCE_SPENDERS", "NONCE_STYLES",
    "PARAMS_IN", "RETRY_OUTCOMES", "RETRY_UNITS", "SETTLE_FINDINGS", "TEMPLATE_FIELDS", "TIME_UNITS", "USER_AGENT",
    "AnswerRule", "NonceShape", "Penalty", "Profile", "RequestShape", "Settle", "Signing", "own_params",
    "header_fault", "rule_headers", "template_fields",
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
#: What spends a nonce at the exchange: an accepted request only (the reference contract: a nonce sent again is
#: refused only once its first copy was accepted), or any authenticated one (Kraken checks it before anything else).
NONCE_SPENDERS = ("accepted", "any-authenticated")
#: What a time endpoint's field holds (a number or a string of it): epoch ms, µs or s, or an ISO-8601 date.
TIME_UNITS = ("ms", "us", "s", "iso")
#: What a rule may map an answer to: the outcomes the retry policy knows, by name.
ANSWER_OUTCOMES = (
    "accepted", "invalid_nonce", "rate_limited", "key_blocked", "banned", "invalid_key", "forbidden", "rejected",
    "unavailable", "retry", "stop", "ambiguous", "duplicate",
)
#: The outcomes a retry time read from an answer serves: the key waits it out (a ban: every key).
RETRY_OUTCOMES = ("rate_limited", "unavailable", "banned")
#: How an answer may write when to try again: a delay (``s``, ``ms``), a moment since the epoch (``epoch-s``,
#: ``epoch-ms``: Kraken's ``EService: Throttled: <ts>``), or a ``date`` (an HTTP date, or ISO-8601 with its zone).
RETRY_UNITS = ("s", "ms", "epoch-s", "epoch-ms", "date")
INVALID_NONCE_COSTS = ("free", "counted")
#: What a ``[settle]`` rule may read a status answer as: the exchange has the order, has none, or cannot tell.
SETTLE_FINDINGS = ("found", "not_found", "unknown")
#: The fields a signing message may name, each filled per request. ``target``: the path, then ``?`` and the query
#: where there is one (what OKX calls the request path).
TEMPLATE_FIELDS = ("method", "path", "query", "target", "body", "nonce", "timestamp", "key", "recv_window")
#: The fields a header's template may name: the signature's (but ``target``: a header names ``{path}`` and
#: ``{query}``), the key's secret and passphrase, the signature itself.
HEADER_FIELDS = (*(name for name in TEMPLATE_FIELDS if name != "target"), "secret", "passphrase", "signature")
#: A header template's name for one of the key's named extra secrets (a TOML keys file's ``[key.extra]``).
EXTRA_FIELD = re.compile(r"extra\.([A-Za-z_][A-Za-z0-9_]*)")
#: Sent unless the profile's headers name a User-Agent of their own (some APIs refuse a request without one).
USER_AGENT = f"thread-client/{__version__}"


def header_fault(value: str) -> str:
    """Why ``value`` cannot go in a header ("": it can), never showing it: it may be the key's secret."""
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "is not Latin-1 text"
    return "holds a line break" if "\r" in value or "\n" in value else ""


def template_fields(template: str) -> set[str]:
    """The fields ``template`` names (``{key}``; ``{{`` is a literal brace). Raises ValueError if it is no template."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


@dataclass(frozen=True, slots=True)
class RequestShape:
    """How one request is built. ``key_param`` or ``key_header`` (at most one) carries the API key, or else a
    header template that names the key's credential (``Bearer {secret}``, a JWT ``{signature}``, ``{key}``);
    ``id_param`` empty: the id is not sent and an answer belongs to its connection only. The user's
    params go where ``params_in`` says; the key, nonce, receive window and id params in the query
    string (``fields_in = "query"``) or with the params in the body (``"body"``). A request goes to
    ``method`` and ``path`` unless its input line names another of ``endpoints`` (``METHOD /path``).
    A header's value is a template over ``HEADER_FIELDS`` (``Bearer {secret}``), filled per key or per request.
    ``client_id``: the param that names an order to the exchange (``newClientOrderId``), whose value is the
    line's own param of that name, else the request's id; empty: requests carry none (nothing can be settled
    by asking)."""

    method: str = "GET"
    path: str = "/api/request"
    params_in: str = "query"
    fields_in: str = "query"
    key_param: str = "api_key"
    key_header: str = ""
    id_param: str = "req_id"
    headers: tuple[tuple[str, str], ...] = ()
    endpoints: tuple[str, ...] = ()
    client_id: str = ""

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

    @property
    def extras_named(self) -> frozenset[str]:
        """The key's named extra secrets the headers carry (``passphrase``; ``token`` for ``{extra.token}``): each
        key then needs each."""
        named = {name for _, value in self.headers for name in template_fields(value)}
        return frozenset(match.group(1) for match in map(EXTRA_FIELD.fullmatch, named) if match) | (
            {"passphrase"} & named)


@dataclass(frozen=True, slots=True)
class NonceShape:
    """What proves a request fresh, and where it goes (``param`` or ``header``). A receive window of 0
    is not sent; ``time_path``: an endpoint whose JSON ``time_field`` (a path: ``result.unixtime``,
    ``data[0].ts``) is the server's clock in ``time_unit``. ``spent_by``: what spends a nonce at the
    exchange (``NONCE_SPENDERS``). ``date_lag_ms``: how far behind the server's clock an answer's ``Date``
    may be (a server that renders it once a second, as uvicorn does: up to 1000 ms; 0 for one that writes it
    as it answers, as the reference server does): the learnt clock counts on it, never on less."""

    style: str = "counter"
    param: str = "nonce"
    header: str = ""
    recv_window_ms: int = 0
    recv_window_param: str = ""
    recv_window_header: str = ""
    time_path: str = ""
    time_field: str = "serverTime"
    time_unit: str = "ms"
    spent_by: str = "accepted"
    date_lag_ms: int = 1000  # how old an answer's Date header may be when it leaves (a server that caches it)

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

    @property
    def proves_acceptance(self) -> bool:
        """Whether a nonce sent again tells its first copy's fate: refused exactly when that copy was accepted.
        It holds for an ordered nonce only an accept spends; where any authenticated request spends one, a
        first copy refused for its funds makes the resend's refusal look the same."""
        return self.ordered and self.spent_by == "accepted"


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
    body contains ``body_contains`` and whose JSON ``field`` (a path: ``error``, ``data[0].sCode``) or
    response ``header`` (one of the two) is there and, when given, ``equals`` a value (an array: ``[]`` is
    the empty array), is ``one_of`` several, ``matches`` a pattern (searched in a string or a number, or in
    any one item of an array: ``^EAPI:Invalid nonce`` in Kraken's ``error`` array), or is ``absent``, comes to
    ``outcome``. ``echo_id``: an accepted answer must echo the sent id in this field. A retry time may be read
    from a header (``retry_after_header``) or a JSON field (``retry_after_field``: a value, or an array's first
    item that matches), through ``retry_after_match`` (a pattern whose group is the time), in
    ``retry_after_unit``."""

    outcome: str
    statuses: tuple[int, int]
    body_contains: str = ""
    field: str = ""
    header: str = ""
    equals: str | int | float | bool | tuple[str | int | float | bool, ...] | None = None
    one_of: tuple[str | int | float | bool, ...] = ()
    absent: bool = False
    matches: str = ""  # a regular expression, searched
    echo_id: str = ""
    retry_after_header: str = ""
    retry_after_field: str = ""
    retry_after_match: str = ""
    retry_after_unit: str = ""  # "": seconds
    line: int = dataclasses.field(default=0, compare=False)  # where the rule stands in its file, for messages about it

    @property
    def unconditional(self) -> bool:
        return not (self.body_contains or self.field or self.header or self.echo_id)


@dataclass(frozen=True, slots=True)
class Settle:
    """The exchange's order-status endpoint (``[settle]``): ``method`` and ``path``, the client id in the param
    ``client_id_param``, the request's own ``params`` an ask carries too (Binance finds an order by its ``symbol``
    and client id), and ``rules`` (answer rules whose outcome is one of ``SETTLE_FINDINGS``) that read its answer;
    ``lag_ms``: how long after a send in doubt the exchange may still place its order, or first show it to this
    endpoint (a matching engine's lag, a status index behind the book). A send whose fate is in doubt is settled by
    asking it, never by sending the order blindly again."""

    path: str
    client_id_param: str
    method: str = "GET"
    rules: tuple[AnswerRule, ...] = ()
    params: tuple[str, ...] = ()
    lag_ms: int = defaults.SETTLE_LAG_MS  # how late the exchange may place an order in doubt, or show it

    @property
    def endpoint(self) -> str:
        """The status endpoint as a limit's cost table names it: ``METHOD /path``."""
        return f"{self.method} {self.path}"

    def ask_shape(self, request: RequestShape) -> RequestShape:
        """How a status ask is written: as the profile's ``request`` (its key, headers and id), to this endpoint. A
        GET carries its params and the profile's own fields in its query string, whatever ``params_in`` and
        ``fields_in`` say for orders (OKX's and Bybit's status endpoints are GETs beside JSON order endpoints)."""
        shape = dataclasses.replace(request, method=self.method, path=self.path, endpoints=())
        return dataclasses.replace(shape, params_in="query", fields_in="query") if self.method == "GET" else shape


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
    settle: Settle | None = None  # the order-status endpoint a send in doubt is settled by ([settle]), if any
    description: str = ""

    @property
    def own_params(self) -> frozenset[str]:
        """The params the profile sends itself: no user's param may take one of these names."""
        return frozenset(own_params(self.request, self.nonce, self.sign))

    @property
    def answer_headers(self) -> tuple[str, ...]:
        """The response headers (lowercase) some rule reads: the transport hands over these, and only these."""
        return rule_headers((*self.answers, *(self.settle.rules if self.settle is not None else ())))


def rule_headers(rules: tuple[AnswerRule, ...]) -> tuple[str, ...]:
    """The response headers (lowercase, each once, in order) ``rules`` read, for a predicate or a retry time."""
    names = (name.lower() for rule in rules for name in (rule.header, rule.retry_after_header) if name)
    return tuple(dict.fromkeys(names))


def own_params(request: RequestShape, nonce: NonceShape, sign: Signing | None) -> list[str]:
    """The names of the params a profile sends itself (its key, nonce, receive window, id and signature params),
    in that order, one per param (two alike: the profile is wrong)."""
    return [name for name in (request.key_param, nonce.param if nonce.style != "none" else "",
                              nonce.recv_window_param if nonce.recv_window_ms else "", request.id_param,
                              sign.param if sign is not None else "") if name]
