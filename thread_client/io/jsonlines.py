"""An append-only JSON-lines file that never tears a line and never loses one."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..errors import OutputInUse

__all__ = ["GroupCommit", "JsonLinesFile", "JsonLinesOutput", "json_objects", "objects_in"]

log = logging.getLogger(__name__)


class GroupCommit:
    """Makes written lines durable with as few ``fdatasync`` calls as the writers allow.

    A writer calls ``sync`` after its write. If a sync that started after that
    write is running or done, it waits for that one instead of starting its own:
    N threads writing at once pay for about two syncs, not N.
    """

    def __init__(self) -> None:
        # Guards the counters; never held during the fdatasync itself.
        self._lock = threading.Lock()
        self._synced_now = threading.Condition(self._lock)
        self._written = 0  # writes finished so far
        self._durable = 0  # of those, how many a finished sync covers
        self._syncing = False

    def sync(self, fd: int) -> None:
        """Return once every write to ``fd`` finished before this call is on the disk."""
        with self._synced_now:
            self._written += 1
            mine = self._written
            while self._durable < mine:
                if self._syncing:
                    self._synced_now.wait()
                    continue
                self._syncing = True
                covers = self._written
                self._lock.release()
                try:
                    os.fdatasync(fd)
                finally:
                    self._lock.acquire()
                    self._syncing = False
                    self._synced_now.notify_all()
                self._durable = max(self._durable, covers)


class JsonLinesFile:
    """Appends one JSON object per line to ``path`` (``-``: standard output), from any thread.

    Lines never tear into each other: each is written whole under a lock (a short
    write is completed; a pipe gets no interleaved records however long they
    are), a line a failure cut short is ended before the next one, and opening a
    file whose last line has no newline (a crash mid-write) ends that line first.
    A crash (even SIGKILL) leaves only whole lines and at most one torn one, which
    readers skip. A write that fails (disk full) loses nothing: the line is kept
    in memory (``unwritten()``), the error is logged once and ``on_write_error``
    is told, so the owner can stop instead of piling them up.

    ``relied_on``: a restart relies on these lines (the send journal's): a line
    that could not be written raises OSError to the caller (after it is kept and
    reported), who must not act as if it were written.

    ``exclusive``: the file is locked (``flock``) for as long as it is open, and OutputInUse
    is raised if another process holds it (the kernel lets go if the process dies).

    ``durable``: ``append`` returns only once the line is on the disk (it survives
    a power loss, not only a crash); concurrent appends share one ``fdatasync``;
    and the lines are relied on: one that could not be made durable raises OSError.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_write_error: Callable[[OSError], None] = lambda exc: None,
        *,
        durable: bool = False,
        relied_on: bool = False,
        exclusive: bool = False,
        write: Callable[[int, bytes], int] = os.write,
        encode: Callable[[dict], str] = json.dumps,
    ) -> None:
        self.path = str(path)
        self._encode = encode  # a record's line: json.dumps, or one that keeps the params' numbers as written
        self._fd = 1 if self.path == "-" else os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if exclusive and self._fd != 1:
            _lock_for_this_process(self._fd, self.path)
        self.on_write_error = on_write_error
        self._raises = durable or relied_on
        self._commit = GroupCommit() if durable and self.path != "-" else None
        self._write = write  # os.write; a test passes one that fails as a full disk does
        # Guards the unwritten lines and the writing itself (whole lines, one at a time); the fdatasync
        # happens outside it, in the group commit.
        self._lock = threading.Lock()
        self._unwritten: list[str] = []
        self._torn = self.path != "-" and _ends_without_newline(self._fd)  # the last line needs its end first

    def __repr__(self) -> str:
        return f"<JsonLinesFile {self.path}>"

    def append(self, record: dict) -> None:
        line = self._encode(record)
        with self._lock:
            fd = self._fd  # the file this line went to, synced below even if a close comes meanwhile
            try:
                self._write_all((b"\n" if self._torn else b"") + (line + "\n").encode())
                failure = None
            except OSError as exc:
                failure = exc
                self._unwritten.append(line)
                first = len(self._unwritten) == 1
        if failure is None and self._commit is not None:
            try:
                self._commit.sync(fd)
                return
            except OSError as exc:
                failure = exc
                with self._lock:
                    self._unwritten.append(line)
                    first = len(self._unwritten) == 1
        if failure is None:
            return
        if first:
            log.error("cannot write %s (%s): its records are kept in memory; stopping",
                      self.path, failure.strerror or failure)
        self.on_write_error(failure)
        if self._raises:
            raise failure

    def _write_all(self, data: bytes) -> None:
        """Write every byte of ``data``, or raise with the line marked torn. Called with the lock held."""
        view = memoryview(data)
        while view:
            try:
                view = view[self._write(self._fd, view):]
            except OSError:
                self._torn = self._torn or len(view) < len(data)
                raise
            self._torn = bool(view)
        self._torn = False

    def unwritten(self) -> list[str]:
        """The lines that could not be written."""
        with self._lock:
            return list(self._unwritten)

    def close(self) -> None:
        """Close the file (never standard output); idempotent. Appending after close keeps the lines in
        memory. Under the lock: a write racing the close must not reach a file that reused the number."""
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd > 2:
            os.close(fd)


def _lock_for_this_process(fd: int, path: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OutputInUse(path) from None


def _ends_without_newline(fd: int) -> bool:
    """Whether the file at ``fd`` holds bytes and its last one is not a newline (its last line is torn)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


class JsonLinesOutput:
    """What the daemon asks of each of its record files (graveyard, results, send journal): to be
    told of failed writes, the lines a failure kept in memory, and a close. ``_file`` may be None
    (no file kept), then all three do nothing."""

    _file: JsonLinesFile | None

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Call ``callback`` whenever a record cannot be written (it is kept in memory)."""
        if self._file is not None:
            self._file.on_write_error = callback

    def unwritten(self) -> list[str]:
        """The JSON lines that could not be written."""
        return self._file.unwritten() if self._file is not None else []

    def close(self) -> None:
        """Close the file; idempotent. Records after a close are kept in memory, not lost."""
        if self._file is not None:
            self._file.close()


def json_objects(path: Path, loads: Callable[[bytes], object] = json.loads) -> Iterator[dict]:
    """The JSON objects of the lines of ``path``, each read by ``loads`` (none if the file does not exist); a
    line a crash cut short is skipped."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        yield from objects_in(lines, loads)


def objects_in(lines: Iterable[bytes], loads: Callable[[bytes], object] = json.loads) -> Iterator[dict]:
    """The JSON objects of ``lines``, each read by ``loads``; a line that is none (cut short by a crash) is
    skipped."""
    for line in lines:
        try:
            record = loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
