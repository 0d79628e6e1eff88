"""Requests that will never be accepted: one JSON line each on disk, counts by reason in memory."""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from ..flow.request import Request

__all__ = ["Graveyard"]

log = logging.getLogger(__name__)


class Graveyard:
    """Append-only record of buried requests, safe to call from many threads.

    Each record is written with one ``os.write`` on an ``O_APPEND`` descriptor as
    soon as the request is buried, so records of different threads never
    interleave and a crash (even SIGKILL) leaves no torn line. Memory stays
    bounded: only the counts by reason are kept, the file is the record.

    A write that fails (disk full) loses nothing: the record is kept in memory
    (``unwritten``), the count still moves, the error is logged once and
    ``on_write_error`` is told, so the daemon stops instead of piling them up.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None, on_write_error: Callable[[OSError], None] = lambda exc: None
    ) -> None:
        self.path = Path(path) if path else None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if self.path else None
        self.on_write_error = on_write_error
        # Guards the counts and the unwritten records; the file write happens outside it.
        self._lock = threading.Lock()
        self._by_reason: collections.Counter[str] = collections.Counter()
        self._unwritten: list[str] = []

    def __repr__(self) -> str:
        return f"<Graveyard {self.path} buried={len(self)}>"

    def __len__(self) -> int:
        with self._lock:
            return sum(self._by_reason.values())

    def bury(self, request: Request, reason: str) -> None:
        record = {
            "req_id": request.req_id,
            "reason": reason,
            "attempts": request.failures,
            "ambiguous_attempts": request.ambiguous,
            "last_failure": request.last_failure,
            "created": round(request.created_wall, 6),
            "buried": round(time.time(), 6),
        }
        line = json.dumps(record)
        failure: OSError | None = None
        if self._fd is not None:
            try:
                os.write(self._fd, (line + "\n").encode())
            except OSError as exc:
                failure = exc
        with self._lock:
            self._by_reason[reason.split(":")[0]] += 1
            if failure is not None:
                self._unwritten.append(line)
                first = len(self._unwritten) == 1
        if failure is not None:
            if first:
                log.error("cannot write the graveyard file %s (%s): its records are kept in memory; stopping",
                          self.path, failure.strerror or failure)
            self.on_write_error(failure)

    def unwritten(self) -> list[str]:
        """The JSON lines that could not be written to the file."""
        with self._lock:
            return list(self._unwritten)

    def by_reason(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_reason)

    def close(self) -> None:
        """Close the file; idempotent. Burying after close only counts."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
