"""The control API's token: read from its file, or made and written there (mode 0600) when the file is missing."""

from __future__ import annotations

import os
import secrets

from ..errors import ConfigError
from ..secret_files import refuse_if_shared

__all__ = ["control_token"]


def control_token(path: str) -> tuple[str, bool]:
    """The token in ``path`` (its first line) and whether it was made now: a missing file is created with a fresh
    token, readable by its owner alone. Raises ConfigError if the file is empty, can be read or written by group or
    others (as the keys file), or cannot be read or made."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            with open(path, encoding="utf-8") as file:
                mode = os.fstat(file.fileno()).st_mode
                token = file.readline().strip()
        except OSError as exc:
            raise ConfigError(f"--control-token-file {path}: {exc.strerror or exc}") from exc
        refuse_if_shared(mode, f"--control-token-file {path}", path)
        if not token:
            raise ConfigError(f"--control-token-file {path}: the file is empty (delete it to have a token made)")
        return token, False
    except OSError as exc:
        raise ConfigError(f"--control-token-file {path}: {exc.strerror or exc}") from exc
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(f"{token}\n")
    return token, True
