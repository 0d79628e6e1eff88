"""The keys file (``--keys-file``): each API key with its secret, its account and its named extra secrets."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError
from .profile import Secret
from .secret_files import refuse_if_shared
from .toml_text import LineFinder, read_toml

__all__ = ["KeyList", "read_keys_file"]

#: A named extra secret's name, as a header template names it (``{extra.token}``).
EXTRA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOML_FIELDS = ("key", "secret", "account", "passphrase", "extra")


@dataclass(frozen=True)
class KeyList:
    """The API keys and where they came from, with each one's signing secret (None where the file gave
    none), account (empty where it gave none: the key is its own account) and named extra secrets
    (``passphrase``, and those of a TOML file's ``[key.extra]``; empty where it gave none)."""

    keys: tuple[str, ...]
    source: str
    secrets: tuple[Secret | None, ...] = ()
    accounts: tuple[str, ...] = ()
    extras: tuple[Mapping[str, Secret], ...] = ()


def read_keys_file(path: str) -> KeyList:
    """The keys file at ``path``: TOML if its name ends in ``.toml`` (``[[key]]`` tables), else one key per line,
    ``KEY [SECRET [ACCOUNT]]`` separated by white space (blank lines and ``#`` comments skipped).

    Raises ConfigError in one line naming the file and, where it can, the line (never a key or a secret): a file
    that is missing, unreadable, empty, not of its form, lists a key twice, or holds secrets and can be read
    or written by group or others."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # an editor's byte-order mark is no part of a key
        mode = os.stat(path).st_mode
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError(f"cannot read keys file {path}: {reason}") from exc
    source = f"keys file {path}"
    keys = _from_toml(text, source) if path.endswith(".toml") else _from_columns(text, source)
    if any(keys.secrets) or any(keys.extras):
        refuse_if_shared(mode, f"{source} holds secrets and", path)
    if not keys.keys:
        raise ConfigError(f"{source} holds no keys")
    if len(set(keys.keys)) != len(keys.keys):
        raise ConfigError(f"{source} lists a key twice")
    return KeyList(keys.keys, source, keys.secrets if any(keys.secrets) else (),
                   keys.accounts if any(keys.accounts) else (), keys.extras if any(keys.extras) else ())


def _from_columns(text: str, source: str) -> KeyList:
    """One key per line: ``KEY [SECRET [ACCOUNT]]``."""
    numbered = [(number, line.split()) for number, line in enumerate(text.splitlines(), 1)]
    numbered = [(number, row) for number, row in numbered if row and not row[0].startswith("#")]
    for number, row in numbered:
        if len(row) > 3:
            raise ConfigError(f"{source}:{number}: more than three columns (KEY SECRET ACCOUNT; a passphrase or "
                              "another named secret goes in a TOML keys file)")
        if any(column.startswith("#") for column in row[1:]):
            raise ConfigError(f"{source}:{number}: a secret or account may not start with '#' (a comment goes "
                              "on a line of its own)")
    rows = [row for _, row in numbered]
    return KeyList(tuple(row[0] for row in rows), source, tuple(Secret(row[1]) if len(row) > 1 else None for row in rows),
                   tuple(row[2] if len(row) > 2 else "" for row in rows), tuple({} for _ in rows))


def _from_toml(text: str, source: str) -> KeyList:
    """``[[key]]`` tables: ``key``, and optionally ``secret``, ``account``, ``passphrase`` and ``[key.extra]``."""
    try:
        data = read_toml(text, source)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    lines = LineFinder(text)
    unknown = sorted(set(data) - {"key"})
    if unknown:
        raise ConfigError(f"{source}:{lines.line('', unknown[0])}: unknown table or field {unknown[0]!r} "
                          "(a keys file holds [[key]] tables)")
    entries = data.get("key", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConfigError(f"{source}:{lines.line('key')}: each key is a [[key]] table")
    keys, secrets, accounts, extras = [], [], [], []
    for index, entry in enumerate(entries):
        unknown = sorted(set(entry) - set(_TOML_FIELDS))
        if unknown:
            raise ConfigError(f"{source}:{lines.line('key', unknown[0], index)}: unknown field {unknown[0]!r} in "
                              f"[[key]] (fields: {', '.join(_TOML_FIELDS)})")
        keys.append(_text(entry, "key", source, lines, index, required=True))
        secret = _text(entry, "secret", source, lines, index)
        secrets.append(Secret(secret) if secret else None)
        accounts.append(_text(entry, "account", source, lines, index))
        extras.append(_extras(entry, source, lines, index))
    return KeyList(tuple(keys), source, tuple(secrets), tuple(accounts), tuple(extras))


def _text(entry: dict[str, Any], name: str, source: str, lines: LineFinder, index: int, required: bool = False) -> str:
    """The field ``name`` of the ``index``-th ``[[key]]``, a string ("" where it is not given); a key or an account
    is one word, as in the columns form (the value is never shown: it may be a secret)."""
    value = entry.get(name, "")
    one_word = name in ("key", "account")
    if not isinstance(value, str) or required and not value or one_word and value and value.split() != [value]:
        wanted = "a string with no space" if one_word else "a string"
        raise ConfigError(f"{source}:{lines.line('key', name, index)}: [[key]] number {index + 1}: {name} must be "
                          f"{wanted}")
    return value


def _extras(entry: dict[str, Any], source: str, lines: LineFinder, index: int) -> dict[str, Secret]:
    """The named extra secrets of the ``index``-th ``[[key]]``: its ``passphrase`` and its ``[key.extra]`` table."""
    named = entry.get("extra", {})
    if not isinstance(named, dict):
        raise ConfigError(f"{source}:{lines.line('key', 'extra', index)}: extra must be a table of named secrets")
    if "passphrase" in entry:
        named = {"passphrase": _text(entry, "passphrase", source, lines, index), **named}
    for name, value in named.items():
        if not EXTRA_NAME.fullmatch(name) or not isinstance(value, str):
            place = lines.at("key", index, "extra", name) if name != "passphrase" else lines.line("key", name, index)
            raise ConfigError(f"{source}:{place}: [[key]] number {index + 1}: extra secret {name!r} must be a string "
                              "named as a Python identifier")
    return {name: Secret(value) for name, value in named.items()}
