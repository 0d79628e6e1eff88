"""Requests that will never be accepted: one JSON line each on disk, counts by reason in memory."""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path

from ..request import FinalOutcome, Request
from .jsonlines import JsonLinesFile, JsonLinesOutput

__all__ = ["Graveyard"]


class Graveyard(JsonLinesOutput):
    """The requests never accepted, one JSON line each (``JsonLinesFile``: whole lines, nothing lost on
    a failed write), and their counts by outcome in memory. Safe to call from many threads.

    Memory stays bounded: only the counts by outcome are kept, the file is the record.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None
        self._file = JsonLinesFile(self.path) if self.path else None
        # Guards the counts.
        self._lock = threading.Lock()
        self._by_outcome: collections.Counter[str] = collections.Counter()

    def __repr__(self) -> str:
        return f"<Graveyard {self.path} buried={len(self)}>"

    def __len__(self) -> int:
        with self._lock:
            return sum(self._by_outcome.values())

    def bury(self, request: Request, outcome: FinalOutcome, detail: str = "") -> None:
        with self._lock:
            self._by_outcome[outcome.value] += 1
        if self._file:
            self._file.append({
                "req_id": request.req_id,
                "outcome": outcome.value,
                "reason": outcome.reason(detail),
                "attempts": request.attempts,
                "ambiguous_attempts": request.ambiguous,
                "last_failure": None if request.last_failure is None else request.last_failure.value,
                "created": round(request.created_wall, 6),
                "buried": round(time.time(), 6),
            })

    def by_outcome(self) -> dict[str, int]:
        """Burials by final outcome (``{"shutdown": 13, "retries_exhausted": 2}``)."""
        with self._lock:
            return dict(self._by_outcome)
