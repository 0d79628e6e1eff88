"""Files that hold secrets (the keys file, the control API's token) are read only where their owner alone may."""

from __future__ import annotations

import stat

from .errors import ConfigError

__all__ = ["refuse_if_shared"]


def refuse_if_shared(mode: int, subject: str, path: str) -> None:
    """Raise ConfigError if a file of ``mode`` can be read or written by group or others: ``subject`` names it in
    the one line, which ends with the command that mends it."""
    if mode & 0o077:
        raise ConfigError(f"{subject} can be read by group or others (mode {stat.filemode(mode)}): chmod 600 {path}")
