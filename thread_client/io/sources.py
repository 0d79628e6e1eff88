"""Where requests come from: the synthetic loads, or the user's own requests as JSON lines (a file or a pipe)."""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import BinaryIO, Iterator

from .resume import ResumePoint
from .seen_ids import SeenIds

__all__ = ["LOADS", "RESERVED_PARAMS", "InvalidInput", "JsonLinesSource", "SyntheticSource", "UnknownFate", "Work", "parse_line"]

#: Names the contract uses itself: a request's own parameters may not take them.
RESERVED_PARAMS = frozenset({"api_key", "nonce", "req_id"})
_MAX_ID_LENGTH = 256


@dataclass(frozen=True, slots=True)
class Work:
    """One request to send: the user's id (sent as ``req_id``) and its parameters, as strings."""

    id: str
    params: dict[str, str] = field(default_factory=dict)
    resumed: bool = False  # in flight when an earlier run crashed: it may have been accepted already
    receipt: str | None = None  # what to acknowledge to the source once the request is final (a stream entry id)


@dataclass(frozen=True, slots=True)
class InvalidInput:
    """A line that is no request: never sent, recorded as ``invalid_input`` with where it was
    (``line 12``, ``entry 1700000000000-0``)."""

    where: str
    id: str
    reason: str
    receipt: str | None = None  # as Work's: acknowledged with the invalid_input record

@dataclass(frozen=True, slots=True)
class UnknownFate:
    """A request an earlier holder may have sent, whose fate cannot be settled here (exactly-once never
    sends it again): recorded ``unknown`` with ``reason``."""

    id: str
    reason: str
    receipt: str | None = None


#: "exercise": the original load, a request then a sleep of randint(0, 21) ms (~91-95/s offered).
#: "saturate": no sleep; the main queue stays full, to measure capacity.
LOADS = ("exercise", "saturate")
_EXERCISE_MAX_GAP_MS = 21


class SyntheticSource:
    """Request ids 1, 2, 3 ... paced like the original exercise, or as fast as they are taken."""

    def __init__(self, load: str = "exercise", rng: random.Random | None = None) -> None:
        if load not in LOADS:
            raise ValueError(f"load must be one of {LOADS}, got {load!r}")
        self.load = load
        self._rng = rng or random.Random()
        self._ids = itertools.count(1)  # kept across read() calls: a restarted producer never repeats an id

    def __repr__(self) -> str:
        return f"<SyntheticSource {self.load}>"

    def read(self, stop: threading.Event) -> Iterator[Work | InvalidInput]:
        """Yield requests until ``stop`` is set; the exercise pause waits on ``stop``, so it ends at once."""
        for req_id in self._ids:
            if stop.is_set():
                return
            yield Work(str(req_id))
            if self.load == "exercise" and stop.wait(self._rng.randint(0, _EXERCISE_MAX_GAP_MS) / 1000):
                return


class JsonLinesSource:
    """The user's requests, one JSON object per line: ``{"id": "...", "params": {"name": scalar, ...}}``.

    Read lazily from a file (``path``) or standard input (``"-"``): the producer
    takes the next line only when the main queue has room, so memory stays flat
    however long the input. Ids are checked for duplicates within the run on
    disk (``SeenIds``). With ``follow`` the end of a file is not the end: the
    source waits for more lines, like ``tail -f``, until ``stop``.
    """

    def __init__(
        self,
        path: str,
        *,
        follow: bool = False,
        poll: float = 0.25,
        state_dir: str | None = None,
        resume: ResumePoint | None = None,
    ) -> None:
        self.path = path
        self._follow = follow
        self._poll = poll
        self._state_dir = state_dir
        self._resume = resume

    def __repr__(self) -> str:
        return f"<JsonLinesSource {self.path}{' (follow)' if self._follow else ''}>"

    def read(self, stop: threading.Event) -> Iterator[Work | InvalidInput]:
        seen = SeenIds(self._state_dir)
        stream: BinaryIO = sys.stdin.buffer if self.path == "-" else open(self.path, "rb")  # noqa: SIM115
        try:
            for number, raw in enumerate(self._lines(stream, stop), 1):
                if not raw.strip():
                    continue
                item = parse_line(raw, f"line {number}")
                if isinstance(item, Work) and self._resume is not None:
                    if item.id in self._resume.skip:
                        continue  # it has its final record from an earlier run, or is being settled now
                    if item.id in self._resume.resumed:
                        item = Work(item.id, item.params, resumed=True)
                if isinstance(item, Work) and not seen.add(item.id):
                    item = InvalidInput(f"line {number}", item.id, f"duplicate id {item.id!r}")
                yield item
        finally:
            seen.close()
            if self._resume is not None:
                self._resume.close()
            if stream is not sys.stdin.buffer:
                stream.close()

    def _lines(self, stream: BinaryIO, stop: threading.Event) -> Iterator[bytes]:
        """Whole lines; a last line without its newline counts once the input has ended (not when following)."""
        partial = b""
        while not stop.is_set():
            chunk = stream.readline()
            if chunk.endswith(b"\n"):
                yield partial + chunk
                partial = b""
            elif chunk:
                partial += chunk
            elif not self._follow:
                if partial:
                    yield partial
                return
            elif stop.wait(self._poll):
                return


def parse_line(raw: bytes | str, where: str, receipt: str | None = None) -> Work | InvalidInput:
    """One line read against the request format; never raises. ``where`` names it in the reason;
    ``receipt`` goes with the result, valid or not."""
    item = _read_request(raw, where)
    return replace(item, receipt=receipt) if receipt is not None else item


def _read_request(raw: bytes | str, where: str) -> Work | InvalidInput:
    try:
        value = json.loads(raw)
    except ValueError:
        return InvalidInput(where, "", "not JSON")
    if not isinstance(value, dict):
        return InvalidInput(where, "", "not a JSON object")
    request_id = value.get("id")
    if not isinstance(request_id, str) or not 0 < len(request_id) <= _MAX_ID_LENGTH:
        return InvalidInput(where, "", f"no \"id\" string of 1 to {_MAX_ID_LENGTH} characters")
    unknown = set(value) - {"id", "params"}
    if unknown:
        return InvalidInput(where, request_id, f"unknown field(s) {', '.join(sorted(unknown))}")
    params = value.get("params", {})
    if not isinstance(params, dict):
        return InvalidInput(where, request_id, "\"params\" is not an object")
    reserved = RESERVED_PARAMS & set(params)
    if reserved:
        return InvalidInput(where, request_id, f"reserved parameter name(s) {', '.join(sorted(reserved))}")
    as_text = {}
    for name, scalar in params.items():
        if isinstance(scalar, bool):
            as_text[name] = "true" if scalar else "false"
        elif isinstance(scalar, str) or (isinstance(scalar, (int, float)) and math.isfinite(scalar)):
            as_text[name] = str(scalar)
        else:
            return InvalidInput(where, request_id, f"parameter {name!r} is not a string, number or boolean")
    return Work(request_id, as_text)
