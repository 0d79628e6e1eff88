"""The request ids a run has taken in, on disk: exact duplicate checks with flat memory, however long the input."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from ..errors import StateNotWritten

__all__ = ["SeenIds"]


class SeenIds:
    """A set of ids kept in a SQLite table in a temporary file (deleted on close), each with a word of its own
    where the set says more than that an id is in it (``note``, ``word_of``).

    A Python set of ten million ids holds hundreds of MiB and grows with every
    line; a table on disk keeps memory flat (SQLite's page cache) and the check
    exact, for one indexed insert per id. Used by one thread (the producer).
    The file's name carries the process id: the files of a process that died
    without closing them (a crash) are removed by the next one in the folder.

    A table the folder cannot hold (full, failing) raises StateNotWritten, from
    the constructor or any call: SQLite may have rolled back every id taken in
    so far, so nothing may rely on the table any more.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        _remove_orphans(Path(folder or tempfile.gettempdir()))
        try:
            handle, self._path = tempfile.mkstemp(prefix=f"seen-ids-{os.getpid()}-", suffix=".sqlite", dir=folder)
        except OSError as exc:
            raise StateNotWritten("the ids taken in", exc) from exc
        os.close(handle)
        self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            self._create()
        except sqlite3.Error as exc:
            self.close()
            raise StateNotWritten("the ids taken in", exc) from exc

    def _create(self) -> None:
        # Nothing here must survive a crash: no journal, no fsync. A small fixed page cache (256 KiB, not
        # the default 2 MiB that fills as the table grows) keeps the process flat; the OS caches the file.
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("PRAGMA cache_size = -256")
        self._db.execute("CREATE TABLE ids (id TEXT PRIMARY KEY, word TEXT) WITHOUT ROWID")
        # One transaction for the table's whole life, never committed: a commit per insert wrote the
        # dirty pages out and dropped the page cache each time (15 us an insert and 7.5 us a lookup,
        # against 1.7 us each inside one transaction, which spills pages to the file as it fills).
        self._db.execute("BEGIN")

    def __repr__(self) -> str:
        return f"<SeenIds {self._path}>"

    def __contains__(self, request_id: object) -> bool:
        try:
            return self._db.execute("SELECT 1 FROM ids WHERE id = ?", (request_id,)).fetchone() is not None
        except sqlite3.Error as exc:  # a page spilled to the file cannot be read back
            raise StateNotWritten("the ids taken in", exc) from exc

    def add(self, request_id: str) -> bool:
        """Record ``request_id``; False if it was there already (a duplicate)."""
        try:
            self._db.execute("INSERT INTO ids VALUES (?, NULL)", (request_id,))
        except sqlite3.IntegrityError:
            return False
        except sqlite3.Error as exc:  # SQLITE_FULL, SQLITE_IOERR: the folder cannot hold the table
            raise StateNotWritten("the ids taken in", exc) from exc
        return True

    def note(self, request_id: str, word: str) -> None:
        """Record ``request_id`` with ``word``, in place of what it had."""
        try:
            self._db.execute("INSERT OR REPLACE INTO ids VALUES (?, ?)", (request_id, word))
        except sqlite3.Error as exc:
            raise StateNotWritten("the ids taken in", exc) from exc

    def word_of(self, request_id: str) -> str | None:
        """The word ``note`` gave ``request_id`` ("" if it was ``add``-ed); None if it is not in the set."""
        try:
            row = self._db.execute("SELECT coalesce(word, '') FROM ids WHERE id = ?", (request_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StateNotWritten("the ids taken in", exc) from exc
        return None if row is None else row[0]

    def close(self) -> None:
        """Drop the table and its file; idempotent."""
        if self._db is not None:
            self._db.close()
            self._db = None  # type: ignore[assignment]
            os.unlink(self._path)


def _remove_orphans(folder: Path) -> None:
    """Delete the id tables left in ``folder`` by processes that are gone (``seen-ids-<pid>-*.sqlite``)."""
    for path in folder.glob("seen-ids-*-*.sqlite"):
        try:
            pid = int(path.name.split("-")[2])
        except ValueError:
            continue
        if not _alive(pid):
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
