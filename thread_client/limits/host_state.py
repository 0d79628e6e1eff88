"""A key's state on this host, kept in the state dir: who drives it now, how far its nonces have gone, the
rate-limit strikes it has had (the server never forgets them), and until when the last run's unanswered sends
may still weigh in the server's limits.

Two daemons on one key reuse each other's nonces and strike each other's rate
limit until the server blocks the key (what users of ccxt and krakenex met with
two scripts on one key). So each key has a lock file, held with ``flock`` for the
life of the process and released by the kernel if the process dies, and a mark
file with the highest nonce the key may have used.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
from pathlib import Path

from ..errors import ConfigError, KeyInUse
from .nonces import BLOCK, INT64_MAX

__all__ = ["KeyState"]


class KeyState:
    """The files of one key in ``state_dir``, named by a hash of the key (never the key itself)."""

    def __init__(self, state_dir: str | os.PathLike[str], secret: str, name: str) -> None:
        self.name = name
        folder = Path(state_dir)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        stem = "key-" + hashlib.sha256(secret.encode()).hexdigest()[:24]  # (24 hex digits: kept from earlier runs)
        self._lock_path = folder / f"{stem}.lock"
        self._mark_path = folder / f"{stem}.nonce"
        self.strikes_path = folder / f"{stem}.strikes"
        self._stamped_path = folder / f"{stem}.stamped"
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"<KeyState {self.name} {'locked' if self._fd is not None else 'unlocked'}>"

    def lock(self, *, shared: bool = False) -> None:
        """Take the key for this process; raises KeyInUse (naming the holder's pid) if another has it.
        ``shared``: for a member of a work stream, which shares the key with the other members on this host
        (its lease in the store says who drives it) but never with a daemon that takes it for itself alone."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise KeyInUse(self.name, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def unlock(self) -> None:
        """Let the key go (the kernel does the same if the process dies); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def read_mark(self) -> int:
        """The highest nonce this key may have used on this host (0 if none is recorded)."""
        return _read_number(self._mark_path)

    def read_strikes(self) -> int:
        """The rate-limit strikes this key has had from this host, in every run so far (0 if none)."""
        return _read_number(self.strikes_path)

    def write_strikes(self, strikes: int) -> int:
        """Record the key's strikes so far durably, and return them (this process alone drives the key):
        a restarted daemon must not get a fresh budget while the server's count never resets."""
        _write_durably(self.strikes_path, strikes)
        return strikes

    def read_stamped_until(self) -> tuple[float, int | None]:
        """Until when (wall-clock seconds) sends of the last run on this key, unanswered at its stop, may still
        weigh in the server's limits (0 if none is recorded), and how many they were (None: a record from before
        runs counted them). Raises ValueError, naming the file and what it holds, if the record is not a whole
        number of milliseconds and a count: unlike a nonce mark or a count of strikes, the caller can take it on
        the safe side and rewrite it."""
        text = _read_text(self._stamped_path)
        try:
            until, *units = (text or "0").split()
            if len(units) > 1 or (units and int(units[0]) < 0):
                raise ValueError
            return int(until) / 1000, int(units[0]) if units else None
        except ValueError:
            raise ValueError(f"{self._stamped_path} holds {text[:40]!r}, not a whole number of milliseconds and a "
                             "count") from None

    def write_stamped_until(self, until: float, units: int | None) -> None:
        """Record durably that ``units`` sends unanswered as this run stops (None: how many is not known) may
        weigh in the server's limits until ``until`` (wall-clock seconds, kept in whole milliseconds rounded up:
        never cut short)."""
        _write_durably(self._stamped_path, f"{math.ceil(until * 1000)}{'' if units is None else f' {units}'}")

    def reserve(self, wanted: int) -> tuple[int, int]:
        """A block of nonces from ``wanted``, covered by a durable mark before it is used (``Reserve``)."""
        mark = min(wanted + BLOCK, INT64_MAX)
        self.write_mark(mark)
        return wanted, mark

    def write_mark(self, mark: int) -> None:
        """Record ``mark`` durably before any nonce up to it is used."""
        _write_durably(self._mark_path, mark)


def _read_text(path: Path) -> str:
    """What a state file holds, white space stripped ("" if it is missing)."""
    try:
        return path.read_text(errors="replace").strip()
    except FileNotFoundError:
        return ""


def _read_number(path: Path) -> int:
    """The whole number a state file holds (0 if it is missing or empty); ConfigError, in one line, if it holds
    anything else: the daemon cannot guess a nonce mark or a count of strikes on the safe side."""
    text = _read_text(path)
    try:
        return int(text or 0)
    except ValueError:
        raise ConfigError(f"state file {path} holds {text[:40]!r}, not a whole number: restore it from a backup, or "
                          "remove it if nothing else sends on the key (its strikes are then forgotten, its nonces "
                          "catch up through a few invalid-nonce refusals)") from None


def _write_durably(path: Path, number: int | str) -> None:
    """Replace ``path``'s number (or numbers) so that a crash or a power loss leaves the old one or the new one, never
    a torn one, nor an old one after the call returned: a temporary file, fsync, an atomic rename, and
    an fsync of the folder (which makes the rename itself durable)."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{number}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
