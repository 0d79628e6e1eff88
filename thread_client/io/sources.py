"""Where requests come from: the synthetic loads, or the user's own requests as JSON lines (a file or a pipe)."""

from __future__ import annotations

import io
import itertools
import os
import random
import select
import stat
import sys
import threading
from dataclasses import replace
from typing import BinaryIO, Callable, Iterator

from ..errors import StateNotWritten
from ..request import MAX_LINE_BYTES, InvalidInput, Work, parse_line
from ..selectable_event import SelectableEvent
from .resume import ResumePoint, line_digest
from .seen_ids import SeenIds

__all__ = ["LOADS", "JsonLinesSource", "SyntheticSource"]

#: "exercise": the original load, a request then a sleep of randint(0, 21) ms (~91-95/s offered).
#: "saturate": no sleep; the main queue stays full, to measure capacity.
LOADS = ("exercise", "saturate")
_EXERCISE_MAX_GAP_MS = 21
_PIPE_CHUNK = 64 * 1024  # read from a pipe at most this much at once


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

    def left_over(self) -> Iterator[Work | InvalidInput]:
        """Nothing: a request is made only when it is given out."""
        return iter(())

    def close(self) -> None:
        """Nothing is held between reads."""


class JsonLinesSource:
    """The user's requests, one JSON object per line: ``{"id": "...", "params": {"name": scalar, ...}}``, and
    optionally its ``method``, ``path`` and ``weight``, which ``admit`` checks against the profile.

    Read lazily from a file (``path``) or standard input (``"-"``): the producer
    takes the next line only when the main queue has room, so memory stays flat
    however long the input (a line is read in at most ``MAX_LINE_BYTES``; a longer
    one is ``invalid_input``). Ids are checked for duplicates within the run on
    disk (``SeenIds``). With ``follow`` the end of a file is not the end: the
    source waits for more lines, like ``tail -f``, until ``stop``. A pipe (or a
    terminal) is read only when it has bytes: the producer waits on it and on
    ``stop`` at once, so a stop ends the reading of an idle pipe whose writer lives on.

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
        admit: Callable[[Work], Work | InvalidInput] | None = None,
        client_id_param: str = "",
    ) -> None:
        self.path = path
        self._client_id = client_id_param  # a param naming the order to the exchange: one value per run
        self._follow = follow
        self._admit = admit
        self._poll = poll
        self._state_dir = state_dir
        self._resume = resume
        # The reading position, kept across read() calls; touched only by the producer thread.
        self._stream: BinaryIO | None = None
        self._pipe = False  # the stream may block: it is read when poll() says it has bytes
        self._unread = io.BytesIO()  # bytes read from a pipe and not given out yet
        self._seen: SeenIds | None = None
        self._client_ids: SeenIds | None = None  # the client ids taken in this run (where not the id itself)
        self._number = 0  # lines read so far
        self._partial = b""  # the start of a line whose end has not been read yet
        self._too_long = False  # past MAX_LINE_BYTES of the current line: its rest is read past
        self._state_failure: StateNotWritten | None = None  # the state dir refused a pipe's line, taken in anyway

    def __repr__(self) -> str:
        return f"<JsonLinesSource {self.path}{' (follow)' if self._follow else ''} at line {self._number}>"

    def read(self, stop: SelectableEvent) -> Iterator[Work | InvalidInput]:
        if self._stream is None:
            self._seen = SeenIds(self._state_dir)
            self._client_ids = SeenIds(self._state_dir) if self._client_id else None
            self._stream = self._open()
            self._pipe = not stat.S_ISREG(os.fstat(self._stream.fileno()).st_mode)
        for raw in self._lines(self._stream, stop):
            self._number += 1
            if not raw.strip():
                continue
            item = self._item(raw, f"line {self._number}", self._seen)
            if item is not None:
                yield item
            if self._state_failure is not None:
                raise self._state_failure

    def _open(self) -> BinaryIO:
        """The input: standard input, a named pipe opened without waiting for its writer (so a stop still
        wakes the reading, which waits in poll() instead), or a file."""
        if self.path == "-":
            return sys.stdin.buffer
        if stat.S_ISFIFO(os.stat(self.path).st_mode):
            return os.fdopen(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK), "rb")
        return open(self.path, "rb")  # noqa: SIM115 - closed by close()

    def _item(self, raw: bytes, where: str, seen: SeenIds) -> Work | InvalidInput | None:
        """What one line is for this run: None if an earlier run recorded it (or settles it now)."""
        item = parse_line(raw, where, admit=self._admit)
        resume = self._resume
        if isinstance(item, InvalidInput):
            item = replace(item, digest=line_digest(raw))
            return None if resume is not None and resume.recorded_invalid(item) else item
        if resume is not None:
            if item.id in resume.skip:
                return None  # it has its final record from an earlier run, or is being settled now
            if (sent_on := resume.resumed.word_of(item.id)) is not None:
                item = replace(item, resumed=True, sent_on=sent_on)
        try:
            fresh = seen.add(item.id)
            repeated = fresh and self._client_ids is not None and not self._client_ids.add(item.params[self._client_id])
        except StateNotWritten as failure:
            if not self._pipe:
                raise  # a file: the next run reads this line again
            # A pipe's line cannot be read again: it is taken in (the stop records it), then reading stops.
            self._state_failure = failure
            return item
        if not fresh:
            duplicate = InvalidInput(where, item.id, f"duplicate id {item.id!r}", digest=line_digest(raw))
            return None if resume is not None and resume.recorded_invalid(duplicate) else duplicate
        if repeated:  # the exchange would refuse its order, and a status ask would find the earlier line's
            return InvalidInput(where, item.id, f"client id {item.params[self._client_id]!r} of an earlier line",
                                digest=line_digest(raw))
        return item

    def left_over(self) -> Iterator[Work | InvalidInput]:
        """A pipe's lines read ahead into this source and not given out, then the start of a line whose end
        has not come (``invalid_input``: cut short by the stop); nothing for a file, read again by a next run."""
        if not self._pipe or self._seen is None:
            return
        while piece := self._unread.readline(MAX_LINE_BYTES + 1):
            line = self._add_piece(piece)
            if line is not None:
                self._number += 1
                item = self._item(line, f"line {self._number}", self._seen) if line.strip() else None
                if item is not None:
                    yield item
        if self._partial or self._too_long:
            self._number += 1
            self._end_line()
            yield InvalidInput(f"line {self._number}", "", "cut short: the daemon stopped before its end was read")

    def _lines(self, stream: BinaryIO, stop: SelectableEvent) -> Iterator[bytes]:
        """Whole lines, each cut at ``MAX_LINE_BYTES + 1`` (enough to be refused as too long: the rest
        is read past); a last line without its newline counts once the input has ended (not when following)."""
        while not stop.is_set():
            chunk = self._piece(stream, stop) if self._pipe else stream.readline(MAX_LINE_BYTES + 1)
            if chunk is None:
                return
            if not chunk:
                if not self._follow:
                    if self._partial or self._too_long:
                        yield self._end_line()
                    return
                if stop.wait(self._poll):
                    return
                continue
            line = self._add_piece(chunk)
            if line is not None:
                yield line

    def _add_piece(self, chunk: bytes) -> bytes | None:
        """Add a piece of the current line; the whole line once ``chunk`` ends it, else None."""
        if not self._too_long:
            self._partial += chunk[:MAX_LINE_BYTES + 1 - len(self._partial)]
            self._too_long = len(self._partial) > MAX_LINE_BYTES
        return self._end_line() if chunk.endswith(b"\n") else None

    def _piece(self, stream: BinaryIO, stop: SelectableEvent) -> bytes | None:
        """A pipe's ``readline(MAX_LINE_BYTES + 1)`` that a stop wakes: the next piece of a line (up to its
        newline, if read already), b"" at the end of the input, None once ``stop`` is set while the pipe had
        nothing to give. Read from the file descriptor: a buffered reader would hold bytes poll() cannot see."""
        piece = self._unread.readline(MAX_LINE_BYTES + 1)
        if piece:
            return piece
        waiting = select.poll()
        waiting.register(stream, select.POLLIN)
        waiting.register(stop, select.POLLIN)
        while True:
            waiting.poll()
            if stop.is_set():
                return None
            try:
                self._unread = io.BytesIO(os.read(stream.fileno(), _PIPE_CHUNK))
            except BlockingIOError:  # a named pipe opened not to wait: nothing to read after all
                continue
            return self._unread.readline(MAX_LINE_BYTES + 1)

    def _end_line(self) -> bytes:
        line, self._partial, self._too_long = self._partial, b"", False
        return line

    def close(self) -> None:
        """Let go of the input, the duplicate checks and the resume point; idempotent."""
        stream, self._stream = self._stream, None
        if stream is not None and stream is not sys.stdin.buffer:
            stream.close()
        for ids in (self._seen, self._client_ids):
            if ids is not None:
                ids.close()
        self._seen = self._client_ids = None
        if self._resume is not None:
            self._resume.close()
