"""Reading a profile: TOML (``tomllib``) checked field by field, every error named ``file:line: what``,
then compiled into the frozen values of ``model``. Built-in profiles are package data."""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .json_path import JsonPath
from .model import (
    ANSWER_OUTCOMES, EXTRA_FIELD, FIELDS_IN, HEADER_FIELDS, INVALID_NONCE_COSTS, METHODS, NONCE_SPENDERS, NONCE_STYLES,
    PARAMS_IN, RETRY_OUTCOMES, RETRY_UNITS, SETTLE_FINDINGS, TEMPLATE_FIELDS, TIME_UNITS, AnswerRule, NonceShape,
    Penalty, Profile, RequestShape, Settle, Signing, header_fault, own_params, template_fields,
)
from .signing import HookError, load_hook
from ..limits.rate_limit_scope import HOLDS
from ..limits.rules import ALGORITHMS, SCOPES, LimitRule
from ..toml_text import LineFinder, read_toml

__all__ = ["DEFAULT_PROFILE", "ProfileError", "builtin_names", "load_profile", "read_profile"]

DEFAULT_PROFILE = "reference"
_DEFAULT_MESSAGE = Signing().message
_BUILTIN = "builtin"


class ProfileError(ValueError):
    """Raised when a profile cannot be used; ``errors`` lists each problem as ``file:line: what``."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class _Field:
    """One field a table may hold: its TOML type(s), and the values it may take (None: any)."""

    types: tuple[type, ...]
    choices: tuple[str, ...] | None = None


_TEXT = _Field((str,))
_NUMBER = _Field((int, float))
_TABLES: dict[str, dict[str, _Field]] = {
    "": {"name": _TEXT, "description": _TEXT, "limit": _Field((list,))},
    "request": {
        "method": _Field((str,), METHODS), "path": _TEXT, "params_in": _Field((str,), PARAMS_IN),
        "fields_in": _Field((str,), FIELDS_IN),
        "key_param": _TEXT, "key_header": _TEXT, "id_param": _TEXT, "headers": _Field((dict,)),
        "endpoints": _Field((list,)), "client_id": _TEXT,
    },
    "nonce": {
        "style": _Field((str,), NONCE_STYLES), "param": _TEXT, "header": _TEXT, "recv_window_ms": _Field((int,)),
        "recv_window_param": _TEXT, "recv_window_header": _TEXT, "time_path": _TEXT, "time_field": _TEXT,
        "time_unit": _Field((str,), TIME_UNITS), "spent_by": _Field((str,), NONCE_SPENDERS),
        "date_lag_ms": _Field((int,)),
    },
    "sign": {
        "algorithm": _Field((str,), ("hmac-sha256", "hmac-sha512")), "message": _TEXT,
        "secret_encoding": _Field((str,), ("raw", "base64")), "output": _Field((str,), ("hex", "base64")),
        "param": _TEXT, "header": _TEXT, "hook": _TEXT,
    },
    "answers": {"message": _TEXT, "rule": _Field((list,))},
    "answers.rule": {
        "status": _Field((int, list)), "body_contains": _TEXT, "field": _TEXT, "header": _TEXT,
        "equals": _Field((str, int, float, bool, list)), "one_of": _Field((list,)), "absent": _Field((bool,)),
        "matches": _TEXT, "echo_id": _TEXT, "retry_after_header": _TEXT, "retry_after_field": _TEXT,
        "retry_after_match": _TEXT, "retry_after_unit": _Field((str,), RETRY_UNITS),
        "outcome": _Field((str,), ANSWER_OUTCOMES),
    },
    "settle": {
        "method": _Field((str,), METHODS), "path": _TEXT, "client_id_param": _TEXT, "params": _Field((list,)),
        "rule": _Field((list,)), "lag_ms": _Field((int,)),
    },
    "penalty": {
        "strikes_to_block": _Field((int,)), "invalid_nonce": _Field((str,), INVALID_NONCE_COSTS),
        "rate_limited_holds": _Field((str,), HOLDS), "rate_limited_strikes": _Field((bool,)),
    },
    "limit": {
        "name": _TEXT, "algorithm": _Field((str,), tuple(ALGORITHMS)), "scope": _Field((str,), SCOPES),
        "cost": _Field((int, str, dict)), "limit": _Field((int,)), "period_ms": _NUMBER, "rate_per_s": _NUMBER,
        "burst": _Field((int,)), "max": _Field((int,)), "decay_per_s": _NUMBER,
    },
}
# A status answer is read in the answers' own predicates, to a finding instead of an outcome.
_TABLES["settle.rule"] = {name: field for name, field in _TABLES["answers.rule"].items()
                          if not name.startswith("retry_after")} | {"outcome": _Field((str,), SETTLE_FINDINGS)}
#: Tables given as arrays (``[[limit]]``): their fields are checked one entry at a time.
_ARRAY_TABLES = ("answers.rule", "limit", "settle.rule")
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array",
               dict: "a table"}


def builtin_names() -> list[str]:
    """The profiles shipped inside the package, by name."""
    folder = importlib.resources.files(__package__) / _BUILTIN
    return sorted(entry.name.removesuffix(".toml") for entry in folder.iterdir() if entry.name.endswith(".toml"))


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """A built-in profile by name, or a profile file by path (anything with a ``/`` or ending in
    ``.toml``). Raises ProfileError naming every problem found."""
    if "/" not in name_or_path and not name_or_path.endswith(".toml"):
        if name_or_path not in builtin_names():
            raise ProfileError([f"no built-in profile {name_or_path!r} (built in: {', '.join(builtin_names())}; "
                                "a file is named by its path)"])
        resource = importlib.resources.files(__package__) / _BUILTIN / f"{name_or_path}.toml"
        return read_profile(resource.read_text(encoding="utf-8"), f"built-in {name_or_path}", name_or_path)
    path = Path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ProfileError([f"{name_or_path}: cannot read it: {reason}"]) from exc
    return read_profile(text, name_or_path, path.stem, hook_dir=str(path.resolve().parent))


def read_profile(text: str, source: str, default_name: str = "", hook_dir: str = "") -> Profile:
    """The profile in ``text`` (read from ``source``, which names it in errors), compiled."""
    try:
        data = read_toml(text, source)
    except ValueError as exc:
        raise ProfileError([str(exc)]) from exc
    return _Compiler(source, LineFinder(text), hook_dir).compile(data, default_name)


class _Compiler:
    """Checks the parsed TOML against ``_TABLES`` and builds the Profile; every error is collected."""

    def __init__(self, source: str, finder: LineFinder, hook_dir: str) -> None:
        self._source = source
        self._finder = finder
        self._hook_dir = hook_dir
        self._errors: list[str] = []

    def _error(self, line: int, what: str) -> None:
        self._errors.append(f"{self._source}:{line}: {what}")

    def compile(self, data: dict[str, Any], default_name: str) -> Profile:
        tables = [name for name in _TABLES if name and name not in _ARRAY_TABLES]
        for name, value in data.items():
            if isinstance(value, dict) and name not in tables:
                self._error(self._finder.line(name), f"unknown table [{name}] (tables: {', '.join(tables)})")
        top = self._table(data, "")
        request = self._request(self._table(data, "request"))
        nonce = self._nonce(self._table(data, "nonce"))
        sign = self._sign(self._table(data, "sign"), nonce, request) if "sign" in data else None
        for name, template in request.headers:
            extras = {field for field in _fields_or_none(template) if EXTRA_FIELD.fullmatch(field)}  # the key's own
            self._template(template, ("request", "headers"), f"header {name!r}", (*HEADER_FIELDS, *sorted(extras)),
                           _available_fields(nonce, request) | {"secret", "passphrase"} | extras
                           | ({"signature"} if sign is not None else set()))
        names = own_params(request, nonce, sign)
        if len(set(names)) != len(names):
            self._error(self._finder.line("request", "id_param"),
                        f"the profile's own params must have different names: {', '.join(names)}")
        answers = self._table(data, "answers")
        try:
            JsonPath(answers.get("message", "error_msg"))
        except ValueError as exc:
            self._error(self._finder.line("answers", "message"), f"message: {exc}")
        rules = self._rules(answers.get("rule", []), request)
        settle = self._settle(self._table(data, "settle"), request) if "settle" in data else None
        limits = self._limits(top.get("limit", []), request, settle)
        penalty = self._table(data, "penalty")
        if penalty.get("strikes_to_block", 1) < 1:
            self._error(self._finder.line("penalty", "strikes_to_block"), "strikes_to_block must be at least 1")
        if self._errors:
            raise ProfileError(self._errors)
        return Profile(
            name=top.get("name", default_name), source=self._source, description=top.get("description", ""),
            request=request, nonce=nonce, sign=sign, message_field=answers.get("message", "error_msg"),
            answers=rules, penalty=Penalty(**penalty), limits=limits, settle=settle,
        )

    def _table(self, data: dict[str, Any], table: str, index: int = 0) -> dict[str, Any]:
        """The fields of ``table`` that have the right type and value (the others are reported)."""
        values = data if not table or table in _ARRAY_TABLES else data.get(table, {})
        if not isinstance(values, dict):
            return {}
        schema, kept = _TABLES[table], {}
        for name, value in values.items():
            if not table and isinstance(value, dict):
                continue  # a table: checked on its own
            line = self._finder.line(table, name, index)
            field = schema.get(name)
            if field is None:
                self._error(line, f"unknown field {name!r} in [{table or 'the top level'}] "
                                  f"(fields: {', '.join(schema)})")
            elif not isinstance(value, field.types) or (isinstance(value, bool) and bool not in field.types):
                wanted = " or ".join(_TYPE_NAMES[kind] for kind in field.types)
                self._error(line, f"{name} must be {wanted}, got {value!r}")
            elif field.choices is not None and value not in field.choices:
                self._error(line, f"{name} must be one of {', '.join(field.choices)}, got {value!r}")
            else:
                kept[name] = value
        return kept

    def _request(self, values: dict[str, Any]) -> RequestShape:
        headers = values.pop("headers", {})
        for name, value in headers.items():
            line = self._finder.at("request", "headers", name)
            if not isinstance(value, str):
                self._error(line, f"header {name!r} must be a string, got {value!r}")
            elif not _HEADER_NAME.fullmatch(name) or header_fault(value):
                self._error(line, f"header {name!r}: a name must be an HTTP token and a value Latin-1 text on one line")
        for place in ("key_header",):
            if values.get(place) and not _HEADER_NAME.fullmatch(values[place]):
                self._error(self._finder.line("request", place), f"{place} must be an HTTP token, got {values[place]!r}")
        key_places = [place for place in ("key_param", "key_header") if values.get(place)]
        if len(key_places) > 1:
            self._error(self._finder.line("request", "key_header"), "give key_param or key_header, not both")
        elif key_places == ["key_header"]:
            values.setdefault("key_param", "")
        elif not key_places and "key_param" in values and not any(
                _fields_or_none(value) & _CREDENTIAL_FIELDS for value in headers.values() if isinstance(value, str)):
            self._error(self._finder.line("request", "key_param"),
                        "the key goes nowhere: give key_param or key_header (or name {key}, {secret} or {signature} "
                        "in a header)")
        if values.get("fields_in") == "body" and values.get("params_in", "query") == "query":
            self._error(self._finder.line("request", "fields_in"), 'fields_in = "body" needs a body: params_in form or json')
        self._check_path(values.get("path"), "request", "path")
        endpoints = []
        for index, endpoint in enumerate(values.pop("endpoints", [])):
            method, _, path = endpoint.partition(" ") if isinstance(endpoint, str) else ("", "", "")
            if method in METHODS and _path_ok(path):
                endpoints.append(endpoint)
            else:
                self._error(self._finder.line("request.endpoints", "", index),
                            f'endpoints must each be "METHOD /path" (a method of {", ".join(METHODS)}; a path from / '
                            f"with no query, space or non-ASCII character), got {endpoint!r}")
        return RequestShape(**values, headers=tuple((str(name), str(value)) for name, value in headers.items()),
                            endpoints=tuple(endpoints))

    def _nonce(self, values: dict[str, Any]) -> NonceShape:
        style = values.get("style", "counter")
        if values.get("param") and values.get("header"):
            self._error(self._finder.line("nonce", "header"), "give the nonce's param or header, not both")
        elif values.get("header"):
            values.setdefault("param", "")
        if style == "none" and ("param" in values or "header" in values):
            self._error(self._finder.line("nonce", "style"), "style none sends no nonce: drop param and header")
        if not 0 <= values.get("date_lag_ms", 1000) <= 60_000:
            self._error(self._finder.line("nonce", "date_lag_ms"), "date_lag_ms must be between 0 and 60000")
        window = values.get("recv_window_ms", 0)
        if not 0 <= window <= 3_600_000:
            self._error(self._finder.line("nonce", "recv_window_ms"), "recv_window_ms must be between 0 and 3600000")
        if window and not (values.get("recv_window_param") or values.get("recv_window_header")):
            if "recv_window_param" in values:
                self._error(self._finder.line("nonce", "recv_window_param"), "the receive window goes nowhere")
            values.setdefault("recv_window_param", "recvWindow")
        for place in ("header", "recv_window_header"):
            if values.get(place) and not _HEADER_NAME.fullmatch(values[place]):
                self._error(self._finder.line("nonce", place), f"{place} must be an HTTP token, got {values[place]!r}")
        try:
            JsonPath(values.get("time_field", "serverTime"))
        except ValueError as exc:
            self._error(self._finder.line("nonce", "time_field"), f"time_field: {exc}")
        if values.get("time_path"):
            self._check_path(values["time_path"], "nonce", "time_path")
            if not style.startswith("timestamp"):
                self._error(self._finder.line("nonce", "time_path"), "time_path serves the timestamp styles only")
        if style == "none":
            values.setdefault("param", "")
        elif "param" in values and not values["param"] and not values.get("header"):
            self._error(self._finder.line("nonce", "param"), "the nonce goes nowhere: give param or header "
                                                             '(or style = "none")')
        return NonceShape(**values)

    def _sign(self, values: dict[str, Any], nonce: NonceShape, request: RequestShape) -> Signing | None:
        if values.get("param") and values.get("header"):
            self._error(self._finder.line("sign", "header"), "give the signature's param or header, not both")
        elif values.get("header"):
            values.setdefault("param", "")
        elif "param" in values and not values["param"] and not any(
                "signature" in _fields_or_none(template) for _, template in request.headers):
            self._error(self._finder.line("sign", "param"), "the signature goes nowhere: give param or header "
                                                            "(or name {signature} in a [request] header)")
        if values.get("header") and not _HEADER_NAME.fullmatch(values["header"]):
            self._error(self._finder.line("sign", "header"), f"header must be an HTTP token, got {values['header']!r}")
        hook = values.get("hook", "")
        if hook:
            try:
                load_hook(hook, self._hook_dir)
            except HookError as exc:
                self._error(self._finder.line("sign", "hook"), str(exc))
        self._template(values.get("message", _DEFAULT_MESSAGE), ("sign", "message"), "message", TEMPLATE_FIELDS,
                       _available_fields(nonce, request))
        return Signing(**values, hook_dir=self._hook_dir if hook else "")

    def _template(self, text: str, place: tuple[str, str], what: str, fields: tuple[str, ...],
                  available: set[str]) -> None:
        """Check a template (``{field}``, ``{{`` a literal brace) that names only ``fields``, each ``available``."""
        line = self._finder.line(*place)
        try:
            parsed = [part for part in string.Formatter().parse(text) if part[1] is not None]
        except ValueError as exc:
            self._error(line, f"{what} is not a template: {exc} (a literal brace is written {{{{ or }}}})")
            return
        if any(part[2] or part[3] for part in parsed):
            self._error(line, f"{what} fields take no format spec or conversion ({{nonce}}, not {{nonce:d}} or "
                              "{nonce!r}): what is signed is what is sent")
        for _, name, _, _ in parsed:
            if name not in fields:
                self._error(line, f"{what} names an unknown field {{{name}}} (fields: {', '.join(fields)})")
            elif name not in available:
                self._error(line, f"{what} names {{{name}}}, which this profile never sends ({_why_missing(name)})")

    def _settle(self, values: dict[str, Any], request: RequestShape) -> Settle | None:
        """The ``[settle]`` order-status endpoint: it names a client id the profile's requests carry, and rules
        that read found and not found, each from what the answer says, never its status alone (anything no rule
        reads is unknown: asked again)."""
        missing = [name for name in ("path", "client_id_param") if not values.get(name)]
        if missing:
            self._error(self._finder.line("settle"), f"[settle] needs {' and '.join(missing)}")
        if not request.client_id:
            self._error(self._finder.line("settle"), "[settle] asks by client id: give [request] client_id, the "
                                                     "param that carries it")
        self._check_path(values.get("path"), "settle", "path")
        rules = self._rules(values.pop("rule", []), request, "settle.rule")
        if not {"found", "not_found"} <= {rule.outcome for rule in rules}:
            self._error(self._finder.line("settle"), "[settle] needs a rule that reads found and one that reads "
                                                     "not_found ([[settle.rule]])")
        params = self._settle_params(values.pop("params", []), values.get("client_id_param"))
        if values.get("lag_ms", 0) < 0:
            self._error(self._finder.line("settle", "lag_ms"), f"[settle] lag_ms must be 0 or more, got {values['lag_ms']}")
        return None if missing else Settle(**values, rules=rules, params=params)

    def _settle_params(self, names: list[Any], client_id_param: str | None) -> tuple[str, ...]:
        """``[settle] params``: the names of the request's own params a status ask carries too, each once, none the
        client id's param (the ask fills that one itself)."""
        line = self._finder.line("settle", "params")
        params: list[str] = []
        for name in names:
            if not isinstance(name, str) or not name:
                self._error(line, f"[settle] params must each be a param's name, got {name!r}")
            elif name in params:
                self._error(line, f"[settle] params names {name!r} twice")
            elif name == client_id_param:
                self._error(line, f"[settle] params names {name!r}, the client id's own param (client_id_param): "
                                  "every ask carries it")
            else:
                params.append(name)
        return tuple(params)

    def _rules(self, raw: list[Any], request: RequestShape, table: str = "answers.rule") -> tuple[AnswerRule, ...]:
        """The rules of ``table``: the answers' (``answers.rule``) or the status endpoint's (``settle.rule``),
        in the one predicate language."""
        accepting = "accepted" if table == "answers.rule" else "found"
        if not raw and table == "answers.rule":  # no rules given: the reference's, like every other default, the id echo read where it is sent
            if self._source == f"built-in {DEFAULT_PROFILE}":
                return ()
            return tuple(dataclasses.replace(rule, echo_id=request.id_param) if rule.echo_id else rule
                         for rule in load_profile(DEFAULT_PROFILE).answers)
        rules: list[AnswerRule] = []
        for index, entry in enumerate(raw):
            line = self._finder.line(table, "", index)
            if not isinstance(entry, dict):
                self._error(line, f"each {table.replace('.', ' ')} must be a table ([[{table}]])")
                continue
            values = self._table(entry, table, index)
            if "outcome" not in values or "status" not in values:
                if "outcome" not in entry or "status" not in entry:
                    self._error(line, f"a {table.replace('.', ' ')} needs a status and an outcome")
                continue
            statuses = self._statuses(values.pop("status"), self._finder.line(table, "status", index))
            if statuses is None:
                continue
            self._reading(values, table, index)
            if values.get("echo_id") and values["outcome"] != accepting:
                self._error(self._finder.line(table, "echo_id", index), f"echo_id belongs to an {accepting} rule")
            if values.get("echo_id") and not request.id_param and table == "answers.rule":
                self._error(self._finder.line(table, "echo_id", index),
                            "echo_id needs the id to be sent ([request] id_param)")
            rule = AnswerRule(statuses=statuses, line=line, **values)
            if table == "settle.rule" and rule.outcome != "unknown" and rule.unconditional:
                self._error(line, f"a {rule.outcome} rule must read the answer (body_contains, field, header or "
                                  "echo_id): a status alone is no proof of an order's fate (a proxy's page, an error "
                                  "of another kind)")
            shadow = next((earlier for earlier in rules if earlier.unconditional
                           and earlier.statuses[0] <= statuses[0] and statuses[1] <= earlier.statuses[1]), None)
            if shadow is not None:
                self._error(line, f"this rule can never match: the rule on line {shadow.line} takes every status "
                                  f"it covers first")
            rules.append(rule)
        if table == "answers.rule" and not any(rule.outcome == "accepted" and rule.statuses[0] <= 299
                                               and rule.statuses[1] >= 200 for rule in rules):
            self._error(self._finder.line("answers.rule"),
                        "no answers rule accepts a 2xx: every answer would be retried as ambiguous")
        return tuple(rules)

    def _reading(self, values: dict[str, Any], table: str, index: int) -> None:
        """Check what one rule reads: its subject (a JSON ``field`` or a ``header``), the one test on it (``equals``,
        ``one_of``, ``matches``, ``absent``; none: it is there), and where a retry time comes from. Arrays become
        tuples."""
        def line(name: str) -> int:
            return self._finder.line(table, name, index)

        if values.get("field") and values.get("header"):
            self._error(line("header"), "a rule reads a field or header, not both")
        for name in ("field", "retry_after_field", "echo_id"):
            if values.get(name):
                try:
                    JsonPath(values[name])
                except ValueError as exc:
                    self._error(line(name), f"{name}: {exc}")
        for name in ("header", "retry_after_header"):
            if values.get(name) and not _HEADER_NAME.fullmatch(values[name]):
                self._error(line(name), f"{name} must be an HTTP token, got {values[name]!r}")
        tests = [name for name in ("absent", "equals", "one_of", "matches")
                 if name in values and values[name] is not False]
        if len(tests) > 1:
            self._error(line(tests[0]), "absent, equals, one_of and matches: give one")
        for name in tests:
            if not (values.get("field") or values.get("header")):
                self._error(line(name), f"{name} needs the field or header it tests")
        for name in ("equals", "one_of"):
            value = values.get(name)
            items = value if isinstance(value, list) else [value] if name in values else []
            if not all(isinstance(item, (str, int, float, bool)) for item in items):
                self._error(line(name), f"{name} must be a string, a number, a boolean or an array of them")
            elif any(isinstance(item, float) and not math.isfinite(item) for item in items):
                self._error(line(name), f"{name} must be a finite number")
            if isinstance(value, list):
                values[name] = tuple(value)
        if "one_of" in values and not values["one_of"]:
            self._error(line("one_of"), "one_of needs a value (an empty array matches nothing)")
        if "matches" in values:
            try:
                re.compile(values["matches"])
            except re.error as exc:
                self._error(line("matches"), f"matches is no pattern: {exc}")
            else:
                if not values["matches"]:
                    self._error(line("matches"), "matches needs a pattern (an empty one matches any text)")
        if isinstance(values.get("equals"), tuple) and values.get("header"):
            self._error(line("equals"), "a header holds text: an array is equalled by a JSON field")
        self._retry_time(values, line)

    def _retry_time(self, values: dict[str, Any], line: Callable[[str], int]) -> None:
        """Check where a rule's retry time comes from: a header or a JSON field, through a pattern of one group."""
        sources = [name for name in ("retry_after_header", "retry_after_field") if values.get(name)]
        if len(sources) > 1:
            self._error(line(sources[1]), "give retry_after_header or retry_after_field, not both")
        for name in ("retry_after_match", "retry_after_unit"):
            if values.get(name) and not sources:
                self._error(line(name), f"{name} needs retry_after_header or retry_after_field")
        if sources and values["outcome"] not in RETRY_OUTCOMES:
            self._error(line(sources[0]), f"a retry time serves a {', '.join(RETRY_OUTCOMES[:-1])} or "
                                          f"{RETRY_OUTCOMES[-1]} rule")
        if values.get("retry_after_match"):
            try:
                groups = re.compile(values["retry_after_match"]).groups
            except re.error as exc:
                self._error(line("retry_after_match"), f"retry_after_match is no pattern: {exc}")
            else:
                if groups != 1:
                    self._error(line("retry_after_match"),
                                f"retry_after_match must have one group (the time), got {groups}")

    def _limits(self, raw: list[Any], request: RequestShape, settle: Settle | None) -> tuple[LimitRule, ...]:
        """The ``[[limit]]`` rules; none given: the reference's rolling window, as every other default. A cost
        table may name only the endpoints ``request`` allows and the ``settle`` status endpoint."""
        if not raw:
            return () if self._source == f"built-in {DEFAULT_PROFILE}" else load_profile(DEFAULT_PROFILE).limits
        limits: list[LimitRule] = []
        for index, entry in enumerate(raw):
            line = self._finder.line("limit", "", index)
            if not isinstance(entry, dict):
                self._error(line, "each limit must be a table ([[limit]])")
                continue
            values = self._table(entry, "limit", index)
            if "algorithm" not in values:
                if "algorithm" not in entry:
                    self._error(line, f"a limit needs an algorithm ({', '.join(ALGORITHMS)})")
                continue
            unused = sorted(set(values) - {"name", "algorithm", "scope", "cost"} - set(ALGORITHMS[values["algorithm"]]))
            if unused:
                self._error(line, f"{values['algorithm']} takes {', '.join(ALGORITHMS[values['algorithm']])}, not "
                                  f"{', '.join(unused)}")
                continue
            values.setdefault("name", f"limit {index + 1}")
            if isinstance(values.get("cost"), dict):  # by endpoint: "METHOD /path" = cost
                values["cost"] = tuple(sorted(values["cost"].items()))
                allowed = {request.endpoint, *request.endpoints, *([settle.endpoint] if settle is not None else [])}
                for endpoint in sorted({endpoint for endpoint, _ in values["cost"]} - allowed):
                    self._error(self._finder.at("limit", index, "cost", endpoint),
                                f"cost names {endpoint}, an endpoint the profile does not allow (allowed: "
                                f"{', '.join(sorted(allowed))}; more go in [request] endpoints)")
            try:
                limits.append(LimitRule(**values))
            except ValueError as exc:
                self._error(line, f"limit {values['name']!r}: {exc}")
        names = [rule.name for rule in limits]
        if len(set(names)) != len(names):
            self._error(self._finder.line("limit"), f"two limits share a name: {', '.join(names)}")
        return tuple(limits)

    def _statuses(self, status: int | list[Any], line: int) -> tuple[int, int] | None:
        bounds = [status, status] if isinstance(status, int) else status
        if (len(bounds) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
                or not 100 <= bounds[0] <= bounds[1] <= 599):
            self._error(line, f"status must be an HTTP status (100 to 599) or a range [low, high] of them, got {status!r}")
            return None
        return bounds[0], bounds[1]

    def _check_path(self, path: str | None, table: str, name: str) -> None:
        if path is not None and not _path_ok(path):
            self._error(self._finder.line(table, name),
                        f"{name} must start with / and hold no query, space or non-ASCII character, got {path!r}")


def _path_ok(path: str) -> bool:
    """Whether ``path`` can be sent as a request's path: from /, with no query, space or non-ASCII character."""
    return path.startswith("/") and path.isascii() and path.isprintable() and not any(c in path for c in "?# ")


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _available_fields(nonce: NonceShape, request: RequestShape) -> set[str]:
    available = {"method", "path", "query", "target", "body", "key"}
    if nonce.style == "counter":
        available.add("nonce")
    elif nonce.is_timestamp:
        available |= {"nonce", "timestamp"}
    if nonce.recv_window_ms:
        available.add("recv_window")
    return available


def _why_missing(name: str) -> str:
    return {"nonce": "[nonce] style is none", "timestamp": "[nonce] style is not a timestamp",
            "recv_window": "[nonce] recv_window_ms is 0", "signature": "it has no [sign] table"}.get(name, "")


#: What a header may carry the key's credential in, instead of a key param or header of its own: a bearer token
#: (``{secret}``), a token that names the key inside (a JWT ``{signature}``) or the key itself.
_CREDENTIAL_FIELDS = frozenset({"key", "secret", "signature"})


def _fields_or_none(template: str) -> set[str]:
    """The fields ``template`` names; none if it is no template (reported where the template is checked)."""
    try:
        return template_fields(template)
    except ValueError:
        return set()

