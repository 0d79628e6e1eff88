"""TOML read with the lines its messages name: ``tomllib`` keeps no positions (a profile, the config file)."""

from __future__ import annotations

import re
import tomllib
from typing import Any, Callable

__all__ = ["LineFinder", "Path", "read_toml"]

#: Where a value stands in the parsed TOML: its keys and, in arrays, its index (``("limit", 1, "cost")``).
Path = tuple[str | int, ...]


def read_toml(text: str, source: str) -> dict[str, Any]:
    """``text`` (read from ``source``) as TOML; ValueError ``source:line: not TOML: what`` if it is none."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = match.group(1) if match else "1"
        raise ValueError(f"{source}:{line}: not TOML: {str(exc).split(' (at line')[0]}") from exc


class LineFinder:
    """The line of every key, table and array element of a TOML text, by its path in the parsed data.

    ``tomllib`` keeps no positions, so the text is walked token by token as TOML 1.0 writes it: table
    headers (``[a.b]``; ``[[limit]]``, the Nth one at index N-1, and a sub-table under it), keys bare,
    quoted and dotted (``answers.rule``), inline tables and arrays over any number of lines, strings of
    the four kinds (so a ``[`` or ``=`` inside one is no token). Its limits: the text must be TOML that
    ``tomllib`` read (on any other the lines are a best guess, never an error); a key's line is where
    its first part stands, a table made implicitly (by a dotted key or a sub-table's header) is where
    it is first named, an array element is where its value starts, and a place inside a multi-line
    string is its key's line."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Path, int] = {}
        # Each array's elements seen so far, by its path: a header's ``[[name]]`` adds one, as an inline array's items.
        self._sizes: dict[Path, int] = {}
        _Walk(text, self._lines, self._sizes).document()

    def at(self, *path: str | int) -> int:
        """The line of ``path``, else of its longest prefix the text names; 1 if none."""
        for end in range(len(path), 0, -1):
            if path[:end] in self._lines:
                return self._lines[path[:end]]
        return 1

    def line(self, table: str, field: str = "", index: int = 0) -> int:
        """The line of ``field`` in ``table`` (dotted: ``answers.rule``), in its entry ``index`` if that table
        is an array (``[[answers.rule]]``, or an inline array of tables); else of the table itself."""
        path: Path = tuple(table.split(".")) if table else ()
        if path in self._sizes:
            path += (index,)
        return self.at(*path, field) if field else self.at(*path)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SPACE = " \t"
_SCALAR_ENDS = ",]}#\r\n"


class _Walk:
    """One pass over a TOML text, writing each path's first line into ``lines`` and each array's size into
    ``sizes``. Every step moves on or stops at the end: text that is not TOML ends the walk early."""

    def __init__(self, text: str, lines: dict[Path, int], sizes: dict[Path, int]) -> None:
        self._text, self._at, self._line = text, 0, 1
        self._lines, self._sizes = lines, sizes

    def document(self) -> None:
        table: Path = ()
        while True:
            self._skip(newlines=True)
            if self._at >= len(self._text):
                return
            start, line = self._at, self._line
            if self._text.startswith("[[", self._at):
                self._move(2)
                parts = self._key()
                array = self._resolve(parts[:-1]) + (parts[-1],)
                index = self._sizes.get(array, 0)
                self._sizes[array] = index + 1
                table = array + (index,)
                self._note(table, line)
                self._move(2)  # ]]
            elif self._peek() == "[":
                self._move(1)
                table = self._resolve(self._key())
                self._note(table, line)
                self._move(1)  # ]
            else:
                self._pair(table)
            if self._at == start:
                return  # no token here: not TOML

    def _pair(self, table: Path) -> None:
        """``key = value`` under ``table``."""
        line = self._line
        path = table + tuple(self._key())
        self._note(path, line)
        self._skip()
        if self._peek() == "=":
            self._move(1)
            self._skip()
            self._value(path)

    def _items(self, close: str, read_one: Callable[[], None]) -> None:
        """An inline array's or table's items (the opening bracket is next), each read by ``read_one``, up to
        ``close``; a text that stops making progress ends the walk (tomllib has refused it already)."""
        self._move(1)
        while True:
            self._skip(newlines=True)
            if self._peek() in (close, ""):
                break
            before = self._at
            read_one()
            self._skip(newlines=True)
            if self._peek() == ",":
                self._move(1)
            elif self._at == before:
                return
        self._move(1)

    def _item(self, path: Path) -> None:
        """The next item of the array at ``path``: its own line, its own index."""
        item = path + (self._sizes[path],)
        self._note(item, self._line)
        self._value(item)
        self._sizes[path] += 1

    def _value(self, path: Path) -> None:
        char = self._peek()
        if char == "[":
            self._sizes.setdefault(path, 0)
            self._items("]", lambda: self._item(path))
        elif char == "{":
            self._items("}", lambda: self._pair(path))
        elif char in ("'", '"'):
            self._string()
        else:
            end = self._at
            while end < len(self._text) and self._text[end] not in _SCALAR_ENDS:
                end += 1
            self._move(end - self._at)

    def _key(self) -> list[str]:
        """A key, bare, quoted or dotted, as its parts."""
        parts: list[str] = []
        while True:
            self._skip()
            char = self._peek()
            if char in ("'", '"'):
                start = self._at
                self._string()
                raw = self._text[start:self._at]
                parts.append(raw[1:-1] if char == "'" else tomllib.loads(f"k = {raw}")["k"])
            else:
                match = _BARE_KEY.match(self._text, self._at)
                if match is None:
                    return parts
                parts.append(match.group())
                self._move(match.end() - self._at)
            self._skip()
            if self._peek() != ".":
                return parts
            self._move(1)

    def _string(self) -> None:
        """A string of any of the four kinds, from its opening quote to past its closing one."""
        quote = self._peek()
        triple = self._text.startswith(quote * 3, self._at)
        self._move(3 if triple else 1)
        while self._at < len(self._text):
            char = self._peek()
            if char == "\\" and quote == '"':
                self._move(2)
            elif triple and self._text.startswith(quote * 3, self._at):
                end = self._at + 3
                while end < len(self._text) and self._text[end] == quote and end < self._at + 5:
                    end += 1  # a closing run of up to five: the first one or two are the string's own
                self._move(end - self._at)
                return
            elif char == quote and not triple:
                self._move(1)
                return
            elif char == "\n" and not triple:
                return
            else:
                self._move(1)

    def _resolve(self, parts: list[str]) -> Path:
        """A header's key as a path: a name that is an array of tables stands for its last entry."""
        path: Path = ()
        for part in parts:
            path += (part,)
            if path in self._sizes:
                path += (self._sizes[path] - 1,)
        return path

    def _note(self, path: Path, line: int) -> None:
        """``path`` and each table above it stand first at ``line``, unless named before."""
        for end in range(1, len(path) + 1):
            self._lines.setdefault(path[:end], line)

    def _skip(self, newlines: bool = False) -> None:
        """Past spaces and tabs; with ``newlines``, past line ends and comments too."""
        while self._at < len(self._text):
            char = self._text[self._at]
            if char in _SPACE or newlines and char in "\r\n":
                self._move(1)
            elif char == "#" and newlines:
                end = self._text.find("\n", self._at)
                self._move((len(self._text) if end < 0 else end) - self._at)
            else:
                return

    def _peek(self) -> str:
        return self._text[self._at:self._at + 1]

    def _move(self, count: int) -> None:
        self._line += self._text.count("\n", self._at, self._at + count)
        self._at += count
