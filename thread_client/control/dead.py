"""The dead letters of a results file, a page at a time, and the requests to send them again."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path

from ..request import FinalOutcome, Work
from ..requeue import REQUEUABLE, dead_letters, original_requests

__all__ = ["DeadLetters", "Page", "MAX_LIMIT", "DEFAULT_LIMIT"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict]
    next: str | None  # the cursor of the next page; None: this is the last


class DeadLetters:
    """Reads ``results`` (and its send journal ``<results>.sent``; the run's input ``source`` for a request never
    sent) at each call: a page costs one read of the file, never a send's time. A dead letter is an id's last
    record, where its outcome is not ``accepted`` (nor ``invalid_input``: no request to send again)."""

    def __init__(self, results: str, source: str | None = None) -> None:
        self.results = Path(results)
        self._source = Path(source) if source is not None else None

    def __repr__(self) -> str:
        return f"<DeadLetters {self.results}>"

    def page(self, outcomes: frozenset[FinalOutcome] = frozenset(REQUEUABLE), limit: int = DEFAULT_LIMIT,
             after: str | None = None) -> Page:
        """Up to ``limit`` dead letters of ``outcomes``, in the order of their records, after the one the cursor
        ``after`` names (ValueError if it is no cursor). A cursor stays good while records are added: the page
        after it starts past its dead letter, or, once that one was sent again, past when it had ended."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
        records = list(self._read(outcomes).values())
        start = 0 if after is None else _start_after(records, *_decode(after))
        chosen = records[start:start + limit]
        more = start + limit < len(records)
        return Page([_item(record) for record in chosen], _encode(chosen[-1]) if more and chosen else None)

    def requests(self, ids: list[str] | None = None,
                 outcomes: frozenset[FinalOutcome] = frozenset(REQUEUABLE)) -> tuple[list[Work], dict[str, dict]]:
        """The requests of the dead letters named (``ids``, else every one of ``outcomes``), as they were sent,
        with the dead records they come from; an id that is no dead letter, or whose request is found neither in
        the send journal nor in the input, is left out."""
        dead = self._read(outcomes)
        if ids is not None:
            dead = {request_id: dead[request_id] for request_id in dict.fromkeys(ids) if request_id in dead}
        found = original_requests(set(dead), Path(f"{self.results}.sent"), self._source)
        return [found[request_id] for request_id in dead if request_id in found], dead

    def _read(self, outcomes: frozenset[FinalOutcome]) -> dict[str, dict]:
        return dead_letters(self.results, outcomes) if self.results.exists() else {}


def _item(record: dict) -> dict:
    return {"id": record["id"], "outcome": record.get("outcome"), "detail": record.get("reason", ""),
            "at": record.get("finished"), "key": record.get("key")}


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
