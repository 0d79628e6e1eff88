"""TOML read with the lines its messages name: ``tomllib`` keeps no positions (a profile, the config file)."""

from __future__ import annotations

import re
import tomllib
from typing import Any

__all__ = ["LineFinder", "read_toml"]


def read_toml(text: str, source: str) -> dict[str, Any]:
    """``text`` (read from ``source``) as TOML; ValueError ``source:line: not TOML: what`` if it is none."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = match.group(1) if match else "1"
        raise ValueError(f"{source}:{line}: not TOML: {str(exc).split(' (at line')[0]}") from exc


class LineFinder:
    """Where each table and field stands in the text: ``tomllib`` keeps no positions, so the lines are
    scanned for table headers and ``name =`` (enough for messages; inline tables point at their field)."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
    _KEY = re.compile(r"^\s*(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)\s*[.=]")

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, int, str], int] = {}
        counts: dict[str, int] = {}
        table, index, in_string = "", 0, False
        for number, line in enumerate(text.splitlines(), 1):
            quotes = line.count('"""') + line.count("'''")
            if in_string:
                in_string = quotes % 2 == 0
                continue
            header = self._HEADER.match(line)
            if header:
                table = ".".join(part.strip().strip("\"'") for part in header.group(2).split("."))
                index = counts.get(table, 0) if header.group(1) == "[[" else 0
                if header.group(1) == "[[":
                    counts[table] = index + 1
                self._lines.setdefault((table, index, ""), number)
                continue
            key = self._KEY.match(line)
            if key:
                self._lines.setdefault((table, index, key.group(1).strip("\"'")), number)
            in_string = quotes % 2 == 1

    def line(self, table: str, field: str = "", index: int = 0) -> int:
        return self._lines.get((table, index, field)) or self._lines.get((table, index, "")) or 1
