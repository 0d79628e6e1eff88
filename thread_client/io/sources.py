"""Where requests come from: the synthetic loads, or the user's own requests as JSON lines (a file or a pipe)."""

from __future__ import annotations

import itertools
import random
import sys
import threading
from dataclasses import replace
from typing import BinaryIO, Iterator

from ..request import MAX_LINE_BYTES, InvalidInput, Work, parse_line
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

    def close(self) -> None:
        """Nothing is held between reads."""


class JsonLinesSource:
    """The user's requests, one JSON object per line: ``{"id": "...", "params": {"name": scalar, ...}}``.

    Read lazily from a file (``path``) or standard input (``"-"``): the producer
    takes the next line only when the main queue has room, so memory stays flat
    however long the input (a line is read in at most ``MAX_LINE_BYTES``; a longer
    one is ``invalid_input``). Ids are checked for duplicates within the run on
    disk (``SeenIds``). With ``follow`` the end of a file is not the end: the
    source waits for more lines, like ``tail -f``, until ``stop``.

    ``read()`` goes on where an earlier call stopped: a producer restarted after a
    crash never reads a line twice. What it holds open is let go by ``close()``.
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
        # The reading position, kept across read() calls; touched only by the producer thread.
        self._stream: BinaryIO | None = None
        self._seen: SeenIds | None = None
        self._number = 0  # lines read so far
        self._partial = b""  # the start of a line whose end has not been read yet
        self._too_long = False  # past MAX_LINE_BYTES of the current line: its rest is read past

    def __repr__(self) -> str:
        return f"<JsonLinesSource {self.path}{' (follow)' if self._follow else ''} at line {self._number}>"

    def read(self, stop: threading.Event) -> Iterator[Work | InvalidInput]:
        if self._stream is None:
            self._seen = SeenIds(self._state_dir)
            self._stream = sys.stdin.buffer if self.path == "-" else open(self.path, "rb")  # noqa: SIM115
        for raw in self._lines(self._stream, stop):
            self._number += 1
            if not raw.strip():
                continue
            item = self._item(raw, f"line {self._number}", self._seen)
            if item is not None:
                yield item

    def _item(self, raw: bytes, where: str, seen: SeenIds) -> Work | InvalidInput | None:
        """What one line is for this run: None if an earlier run recorded it (or settles it now)."""
        item = parse_line(raw, where)
        resume = self._resume
        if isinstance(item, InvalidInput):
            return None if resume is not None and where in resume.invalid_lines else item
        if resume is not None:
            if item.id in resume.skip:
                return None  # it has its final record from an earlier run, or is being settled now
            if item.id in resume.resumed:
                item = replace(item, resumed=True)
        if not seen.add(item.id):
            if resume is not None and where in resume.invalid_lines:
                return None  # recorded as a duplicate by an earlier run
            return InvalidInput(where, item.id, f"duplicate id {item.id!r}")
        return item

    def _lines(self, stream: BinaryIO, stop: threading.Event) -> Iterator[bytes]:
        """Whole lines, each cut at ``MAX_LINE_BYTES + 1`` (enough to be refused as too long: the rest
        is read past); a last line without its newline counts once the input has ended (not when following)."""
        while not stop.is_set():
            chunk = stream.readline(MAX_LINE_BYTES + 1)
            if not chunk:
                if not self._follow:
                    if self._partial or self._too_long:
                        yield self._end_line()
                    return
                if stop.wait(self._poll):
                    return
                continue
            if not self._too_long:
                self._partial += chunk[:MAX_LINE_BYTES + 1 - len(self._partial)]
                self._too_long = len(self._partial) > MAX_LINE_BYTES
            if chunk.endswith(b"\n"):
                yield self._end_line()

    def _end_line(self) -> bytes:
        line, self._partial, self._too_long = self._partial, b"", False
        return line

    def close(self) -> None:
        """Let go of the input, the duplicate check and the resume point; idempotent."""
        stream, self._stream = self._stream, None
        if stream is not None and stream is not sys.stdin.buffer:
            stream.close()
        if self._seen is not None:
            self._seen.close()
            self._seen = None
        if self._resume is not None:
            self._resume.close()
