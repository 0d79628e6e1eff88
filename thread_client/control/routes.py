"""The control API's routes: an HTTP request's method, path, token and body to a JSON answer, apart from any
server (the contract: docs/operating/console.md)."""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import KeyCommandRefused, RequeueRefused, StoreUnavailable
from ..request import FinalOutcome
from ..requeue import DOUBLE_RISK, NO_WAY_TO_ASK, REQUEUABLE, double_risk, outcomes
from .dead import DEFAULT_LIMIT, Page

__all__ = ["NoResults", "Panel", "Reply", "Router", "STATIC", "Unsupported"]

log = logging.getLogger(__name__)

#: The console page's folder: ``/`` is its index.html, ``/static/NAME`` its other files; nothing else on disk.
STATIC = Path(__file__).with_name("static")
#: A command's body is small: ids of dead letters at most.
MAX_BODY = 1 << 20

_KEY_COMMAND = re.compile(r"/api/v1/keys/([^/]+)/(pause|resume|retire|unpark)")
_STATIC_FILE = re.compile(r"/static/([A-Za-z0-9_-][A-Za-z0-9_.-]*)")


class NoResults(LookupError):
    """Raised by a ``Panel`` asked for dead letters when the run writes no results file."""


class Unsupported(Exception):
    """Raised by a ``Panel`` asked for a command it has no way to carry out (the cluster console's drain): 409."""


class Panel(Protocol):
    """What the routes ask of the running daemon (``DaemonPanel``; a fake in the unit tests)."""

    def status(self) -> dict: ...

    def pause_key(self, key: str, paused: bool) -> str | None:
        """Pause or resume the key whose short id is ``key``; its state then, None if there is no such key."""

    def retire_key(self, key: str, last: bool) -> str | None:
        """Retire the key whose short id is ``key`` for the rest of the run (``last``: even the last one that may
        send, which stops the daemon); its state then, None if there is no such key (KeyCommandRefused: why not)."""

    def unpark_key(self, key: str) -> str | None:
        """Let the parked key whose short id is ``key`` send again, with a fresh strike budget for this run; its
        state then, None if there is no such key (KeyCommandRefused: not parked, or its lifetime budget spent)."""

    def pause(self, paused: bool) -> bool:
        """Pause or resume the whole daemon; whether it is paused then."""

    def drain(self) -> None:
        """The graceful stop of SIGTERM (Unsupported where there is none to give)."""

    def dead(self, chosen: frozenset[FinalOutcome], limit: int, after: str | None) -> Page:
        """A page of dead letters (NoResults: no results file; ValueError: a bad cursor or limit)."""

    def requeue(self, ids: list[str] | None, chosen: frozenset[FinalOutcome],
                may_double: bool) -> tuple[list[str], list[str]]:
        """Send again the dead letters named (``ids``, else every one of ``chosen``), those whose order may be at
        the exchange asked about first, or refused where the daemon cannot ask, unless ``may_double`` (``ask_first``);
        the ids sent and those refused (NoResults; RequeueRefused: the main queue is full)."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, value: object, status: int = 200) -> "Reply":
        return cls(status, json.dumps(value).encode())


class _Refused(Exception):
    """A request the API answers with an error; the status and the words of its ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Router:
    """Answers one request at a time, from any thread: GETs need nothing, every POST the bearer ``token``."""

    def __init__(self, panel: Panel, token: str, static: Path = STATIC) -> None:
        self._panel = panel
        self._token = token.encode()
        self._static = static
        self._gets: dict[str, Callable[[dict[str, list[str]]], Reply]] = {
            "/": lambda query: self._file("index.html"),
            "/api/v1/status": lambda query: Reply.json(self._panel.status()),
            "/api/v1/dead": self._dead,
        }
        self._posts: dict[str, Callable[[bytes], Reply]] = {
            "/api/v1/pause": lambda body: Reply.json({"paused": self._panel.pause(True)}),
            "/api/v1/resume": lambda body: Reply.json({"paused": self._panel.pause(False)}),
            "/api/v1/drain": self._drain,
            "/api/v1/dead/requeue": self._requeue,
        }

    def __repr__(self) -> str:
        return f"<Router {self._panel!r}>"

    def route(self, method: str, target: str, authorization: str | None, body: bytes, client: str = "") -> Reply:
        """The answer to ``method`` ``target`` (a path with its query) with the ``Authorization`` header given."""
        parts = urlsplit(target)
        path, query = unquote(parts.path), parse_qs(parts.query)
        try:
            if method == "GET":
                return self._get(path, query)
            if method == "POST":
                self._authorize(authorization, method, path, client)
                return self._post(path, body)
            raise _Refused(405, f"method {method} is not allowed")
        except _Refused as refused:
            return Reply.json({"error": str(refused)}, refused.status)
        except Unsupported as exc:
            return Reply.json({"error": str(exc)}, 409)
        except StoreUnavailable as exc:  # the cluster console's store: ask again once it answers
            return Reply.json({"error": str(exc)}, 503)

    def _get(self, path: str, query: dict[str, list[str]]) -> Reply:
        if path in self._gets:
            return self._gets[path](query)
        if (static := _STATIC_FILE.fullmatch(path)) is not None:
            return self._file(static.group(1))
        raise _Refused(405 if path in self._posts or _KEY_COMMAND.fullmatch(path) else 404, f"no GET {path}")

    def _post(self, path: str, body: bytes) -> Reply:
        if path in self._posts:
            return self._posts[path](body)
        if (command := _KEY_COMMAND.fullmatch(path)) is not None:
            key, verb = command.groups()
            try:
                state = self._key_command(key, verb, body)
            except KeyCommandRefused as exc:
                raise _Refused(409, str(exc)) from None
            if state is None:
                raise _Refused(404, f"no key {key}")
            return Reply.json({"key": key, "state": state})
        raise _Refused(405 if path in self._gets else 404, f"no POST {path}")

    def _key_command(self, key: str, verb: str, body: bytes) -> str | None:
        """The key's state after ``verb``; None if there is no such key."""
        if verb == "retire":
            last = _json_object(body).get("last", False)
            if not isinstance(last, bool):
                raise _Refused(400, '"last" must be true or false')
            return self._panel.retire_key(key, last)
        if verb == "unpark":
            return self._panel.unpark_key(key)
        return self._panel.pause_key(key, verb == "pause")

    def _authorize(self, authorization: str | None, method: str, path: str, client: str) -> None:
        """A POST carries ``Bearer <token>``; one that does not is refused (401) and logged, without what it gave."""
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token):
            return
        why = "no token" if not authorization else "a wrong token"
        log.warning("control API: %s %s from %s refused: %s", method, path, client or "?", why)
        raise _Refused(401, f"{why}: every command needs Authorization: Bearer <the token of --control-token-file>")

    def _file(self, name: str) -> Reply:
        try:
            content = (self._static / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise _Refused(404, f"no file {name}") from None
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Reply(200, content, f"{kind}; charset=utf-8" if kind.startswith("text/") or kind.endswith("script")
                     else kind)

    def _dead(self, query: dict[str, list[str]]) -> Reply:
        chosen = _outcomes(_one(query, "outcome"))
        limit_text = _one(query, "limit")
        try:
            limit = DEFAULT_LIMIT if limit_text is None else int(limit_text)
        except ValueError:
            raise _Refused(400, f"limit must be a whole number, got {limit_text!r}") from None
        try:
            page = self._panel.dead(chosen, limit, _one(query, "after"))
        except NoResults as exc:
            raise _Refused(404, str(exc)) from None
        except ValueError as exc:  # a limit out of range, a cursor that is none
            raise _Refused(400, str(exc)) from None
        return Reply.json({"items": page.items, "next": page.next})

    def _requeue(self, body: bytes) -> Reply:
        asked = _json_object(body)
        ids, outcome = asked.get("ids"), asked.get("outcome")
        if (ids is None) == (outcome is None):
            raise _Refused(400, 'give either "ids" (a list of request ids) or "outcome" (names, comma-separated)')
        if ids is not None and not (isinstance(ids, list) and all(isinstance(one, str) for one in ids)):
            raise _Refused(400, '"ids" must be a list of strings')
        if outcome is not None and not isinstance(outcome, str):
            raise _Refused(400, '"outcome" must be a string of names, comma-separated')
        may_double = asked.get("may_double", False)
        if not isinstance(may_double, bool):
            raise _Refused(400, '"may_double" must be true or false')
        chosen = _outcomes(outcome) | (frozenset(DOUBLE_RISK) if may_double and ids is not None else frozenset())
        if (risk := double_risk(chosen)) is not None and not may_double:
            raise _Refused(400, f'{risk}: add "may_double": true to take that risk')
        try:
            sent, refused = self._panel.requeue(ids, chosen, may_double)
        except NoResults as exc:
            raise _Refused(404, str(exc)) from None
        except RequeueRefused as exc:  # the handler never waits for room: the operator asks again
            return Reply.json({"error": str(exc), "requeued": len(exc.queued), "ids": exc.queued}, 503)
        return Reply.json({"requeued": len(sent), "ids": sent,
                           **({"refused": refused, "refused_because": f'{NO_WAY_TO_ASK}: add "may_double": true to '
                                                                     "send them again anyway"} if refused else {})})

    def _drain(self, body: bytes) -> Reply:
        self._panel.drain()
        return Reply.json({"draining": True})


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _outcomes(text: str | None) -> frozenset[FinalOutcome]:
    """The outcomes named (when none is, every one requeued by default: not those that risk a double order); 400
    for a name that is none."""
    if text is None or not text.strip():
        return frozenset(REQUEUABLE)
    try:
        return outcomes(text)
    except argparse.ArgumentTypeError as exc:
        raise _Refused(400, str(exc)) from None


def _json_object(body: bytes) -> dict:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        raise _Refused(400, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise _Refused(400, "the body must be a JSON object")
    return value
