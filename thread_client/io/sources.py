"""Where requests come from: the synthetic loads, or the user's own requests as JSON lines (a file or a pipe)."""

from __future__ import annotations

import itertools
import random
import sys
import threading
from typing import BinaryIO, Iterator

from ..request import InvalidInput, Work, parse_line
from .resume import ResumePoint
from .seen_ids import SeenIds

__all__ = ["LOADS", "JsonLinesSource", "SyntheticSource"]

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
