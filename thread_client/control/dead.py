"""The dead letters of a results file, a page at a time, and the requests to send them again."""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..io.jsonlines import objects_in
from ..request import FinalOutcome, InvalidInput, Work
from ..requeue import DEAD, REQUEUABLE, in_doubt, keep_last, original_requests

__all__ = ["DeadLetters", "Page", "MAX_LIMIT", "DEFAULT_LIMIT", "check_limit", "dead_item"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: What the index keeps of a dead letter's record: what a page shows, and its cursor.
_SHOWN = ("id", "outcome", "reason", "finished", "key", "requeue", "ambiguous_attempts", "resumed_after_crash")
_DEAD = {outcome.value for outcome in DEAD}


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict]
    next: str | None  # the cursor of the next page; None: this is the last


class DeadLetters:
    """The dead letters of ``results`` (with its send journal ``<results>.sent``; the run's input ``source`` for a
    request never sent) from an index kept up to date: each call reads only the bytes added to the file since the
    last (a line not yet whole waits for the next), so a page costs what was written since, never the whole file
    again. A dead letter is an id's last record, where its outcome is not ``accepted`` (nor ``invalid_input``: no
    request to send again). Memory: the fields shown of each dead letter; an accepted id costs nothing. A file
    replaced or cut shorter is read again from its start. Safe from any thread; no lock is held while reading."""

    def __init__(self, results: str, source: str | None = None,
                 admit: Callable[[Work], Work | InvalidInput] | None = None) -> None:
        self.results = Path(results)
        self._source = Path(source) if source is not None else None
        self._admit = admit  # the profile's checks of an input line: a line never sent is read through them
        # Guards the index: _dead (id -> its dead record's shown fields, in the order of those records), _read_to
        # (the bytes of the file read into it) and _file (the file's identity then). Never held while reading.
        self._lock = threading.Lock()
        self._dead: dict[str, dict] = {}
        self._read_to = 0
        self._file: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"<DeadLetters {self.results} {len(self._dead)} dead, {self._read_to} bytes read>"

    def page(self, outcomes: frozenset[FinalOutcome] = frozenset(REQUEUABLE), limit: int = DEFAULT_LIMIT,
             after: str | None = None) -> Page:
        """Up to ``limit`` dead letters of ``outcomes``, in the order of their records, after the one the cursor
        ``after`` names (ValueError if it is no cursor). A cursor stays good while records are added: the page
        after it starts past its dead letter, or, once that one was sent again, past when it had ended."""
        check_limit(limit)
        records = list(self._read(outcomes).values())
        start = 0 if after is None else _start_after(records, *_decode(after))
        chosen = records[start:start + limit]
        more = start + limit < len(records)
        return Page([dead_item(record) for record in chosen], _encode(chosen[-1]) if more and chosen else None)

    def requests(self, ids: list[str] | None = None,
                 outcomes: frozenset[FinalOutcome] = frozenset(REQUEUABLE)) -> tuple[list[Work], dict[str, dict]]:
        """The requests of the dead letters named (``ids``, else every one of ``outcomes``), as they were sent,
        with the dead records they come from; an id that is no dead letter, or whose request is found neither in
        the send journal nor in the input, is left out."""
        dead = self._read(outcomes)
        if ids is not None:
            dead = {request_id: dead[request_id] for request_id in dict.fromkeys(ids) if request_id in dead}
        found = original_requests(set(dead), Path(f"{self.results}.sent"), self._source, self._admit)
        return [found[request_id] for request_id in dead if request_id in found], dead

    def _read(self, outcomes: frozenset[FinalOutcome]) -> dict[str, dict]:
        """The dead letters of ``outcomes`` once the index has read what was added to the file."""
        self._catch_up()
        wanted = {outcome.value for outcome in outcomes}
        with self._lock:
            return {request_id: record for request_id, record in self._dead.items() if record["outcome"] in wanted}

    def _catch_up(self) -> None:
        """Read the whole lines added since the index's last read into it. Two readers at once may read the same
        bytes: the first back adds them, the other's are dropped (the index already has them)."""
        with self._lock:
            start, known = self._read_to, self._file
        try:
            with self.results.open("rb") as file:
                info = os.fstat(file.fileno())
                identity = (info.st_dev, info.st_ino)
                again = identity != known or info.st_size < start  # a new file, or this one cut shorter
                offset = 0 if again else start
                file.seek(offset)
                added = file.read()
        except FileNotFoundError:
            identity, again, offset, added = None, True, 0, b""
        whole = added[:added.rfind(b"\n") + 1]  # a line being written is read once whole
        records = [{name: record[name] for name in _SHOWN if name in record}
                   for record in objects_in(whole.splitlines())]
        with self._lock:
            if (self._file, self._read_to) != (known, start):
                return
            if again:
                self._dead = {}
            self._file, self._read_to = identity, offset + len(whole)
            for record in records:
                keep_last(self._dead, record, _DEAD)


def check_limit(limit: int) -> None:
    """ValueError unless ``limit`` is a page's size."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")


def dead_item(record: dict) -> dict:
    """A dead record as the API shows it (the file's, the dead stream's)."""
    return {"id": record["id"], "outcome": record.get("outcome"), "detail": record.get("reason", ""),
            "at": record.get("finished"), "key": record.get("key"), "requeue": record.get("requeue", 0),
            "in_doubt": in_doubt(record)}


def _encode(record: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps([record.get("finished"), record["id"]]).encode()).decode()


def _decode(cursor: str) -> tuple[float, str]:
    try:
        finished, request_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return float(finished), str(request_id)
    except (ValueError, TypeError, binascii.Error):
        raise ValueError(f"not a cursor: {cursor!r}") from None


def _start_after(records: list[dict], finished: float, request_id: str) -> int:
    """The index past the cursor's dead letter; once that one is gone, of the first that ended after it."""
    for index, record in enumerate(records):
        if record["id"] == request_id:
            return index + 1
    return next((index for index, record in enumerate(records) if (record.get("finished") or 0) > finished),
                len(records))
