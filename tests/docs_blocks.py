"""The fenced blocks of the documentation (docs/*.md), with the marker written on the line before each.

A marker is an HTML comment, invisible on the site, on the line right before a fence (see
``tests/unit/test_docs.py`` for what each means). A block holding only a snippet line
(``--8<-- "examples/profiles/x.toml"``) stands for that file, as the site shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

__all__ = ["DOCS", "Block", "blocks", "pages"]

DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\w*)")
_MARKER = re.compile(r"^<!-- ([a-z-]+)(?::.*)? -->$")
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')


@dataclass(frozen=True)
class Block:
    page: str  # relative to docs/
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str  # "" when none
    included: Path | None = None  # the file a snippet line stands for

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def blocks(lang: str | None = None) -> list[Block]:
    """Every fenced block of every page, in order; only those of ``lang`` when given."""
    found = []
    for path in pages():
        lines = path.read_text().splitlines()
        index = 0
        while index < len(lines):
            opening = _FENCE.match(lines[index])
            if not opening:
                index += 1
                continue
            end = lines.index("```", index + 1)
            marker = _MARKER.match(lines[index - 1]) if index else None
            text = "\n".join(lines[index + 1:end]) + "\n"
            snippet = _SNIPPET.match(text.strip())
            included = ROOT / snippet.group(1) if snippet else None
            found.append(Block(str(path.relative_to(DOCS)), index + 1, opening.group(1),
                               included.read_text() if included else text, marker.group(1) if marker else "",
                               included))
            index = end + 1
    return [block for block in found if lang is None or block.lang == lang]
