"""The config file (``--config PATH``): every long flag of the daemon as a TOML key, under the command line."""

from __future__ import annotations

import argparse
import enum
import json
import os
from pathlib import Path
from typing import Collection

from .cluster.address import is_store_url, masked
from .errors import ConfigError
from .toml_text import LineFinder, read_toml

__all__ = ["file_arguments", "shown"]

#: Values of a path flag that name no file: they are never taken from the config file's folder.
_NOT_FILES = frozenset({"generate", "-"})


def file_arguments(path: str, parser: argparse.ArgumentParser, paths: Collection[str]) -> list[str]:
    """The config file at ``path`` as the command-line arguments its keys stand for (``threads-per-key = 4``:
    ``--threads-per-key=4``), to be read before the command line's own, which argparse lets win. A relative
    path given to a flag in ``paths`` (its ``dest``) is taken from the config file's folder.

    Raises ConfigError in one line, naming the file and the line: a file that cannot be read or is no TOML,
    a key that is no long flag of ``parser``, a value its flag refuses."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError(f"--config {path}: cannot read it: {reason}") from exc
    try:
        data = read_toml(text, path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    lines = LineFinder(text)
    flags = _long_flags(parser)
    folder = Path(path).resolve().parent
    arguments: list[str] = []
    for key, value in data.items():
        where = f"{path}:{lines.line('', key)}"
        action = flags.get(key)
        if action is None:
            spelled = key.replace("_", "-")
            hint = f" (keys are spelled as the flags: {spelled})" if spelled in flags else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")
        if action.nargs == 0:  # a switch (--follow): true gives it, false leaves it off
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
            arguments += [action.option_strings[-1]] if value else []
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: {key} must be a string or a number, got {value!r}")
        text_value = str(value)
        if action.dest in paths and _names_file(action.dest, text_value):
            text_value = str(folder / text_value)  # an absolute one stays as it is
        _check(action, text_value, f"{where}: {key}")
        arguments.append(f"{action.option_strings[-1]}={text_value}")
    return arguments


def shown(parser: argparse.ArgumentParser, args: argparse.Namespace, decided: dict[str, object],
          keys_summary: str, paths: Collection[str]) -> str:
    """The effective configuration as a config file (``thread-client config show``): each long flag's value as
    the command line, the config file and the defaults left it in ``args``, else as the daemon ``decided`` it
    from the profile and the other settings; a flag still unset as a comment. A relative path of a flag in
    ``paths`` is shown whole (the file's folder is no matter then). A password in a URL is ``***``; the
    keys file is named, never read out (``keys_summary`` says how many keys it gave)."""
    out = ["# The effective configuration: the command line over the --config file over the defaults.",
           f"# keys: {keys_summary}"]
    for key, action in _long_flags(parser).items():
        value = getattr(args, action.dest)
        if value is None:
            value = decided.get(action.dest)
        if value is None:
            out.append(f"# {key} = (not set)")
        else:
            if action.dest in paths and _names_file(action.dest, str(value)):
                value = os.path.abspath(str(value))
            out.append(f"{key} = {_toml_value(value)}")
    return "\n".join(out)


def _long_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each option of ``parser`` by its long flag without the dashes (``threads-per-key``); not ``help``, nor
    ``config`` (a config file names no other)."""
    return {action.option_strings[-1][2:]: action for action in parser._actions
            if action.option_strings and action.option_strings[-1].startswith("--")
            and action.dest not in ("help", "config")}


def _names_file(dest: str, value: str) -> bool:
    """Whether ``value``, given to the path flag ``dest``, names a file or folder: not ``generate``, ``-``, a store
    URL, nor a built-in profile's name (``load_profile``'s rule: no ``/``, no ``.toml``)."""
    builtin = dest == "profile" and "/" not in value and not value.endswith(".toml")
    return bool(value) and value not in _NOT_FILES and not is_store_url(value) and not builtin


def _check(action: argparse.Action, value: str, where: str) -> None:
    """The flag's own check of ``value`` (its type and choices), named by where the config file gave it."""
    try:
        converted = action.type(value) if callable(action.type) else value
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")


def _toml_value(value: object) -> str:
    """``value`` written as TOML; a URL with a password shows it as ``***``."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return repr(int(value))  # 55, as a default and as the same value read back from a file
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    return json.dumps(masked(text) if "://" in text else text)  # a JSON string is a TOML basic string
