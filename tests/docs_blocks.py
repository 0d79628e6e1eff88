"""The fenced blocks of the documentation (docs/*.md and README.md), with the marker written on the line before each.

A marker is an HTML comment, invisible on the site, on a line of its own: ``<!-- NAME -->`` or
``<!-- NAME: ARGUMENT -->``. ``MARKERS`` names every marker a page may hold and what each stands before;
any other comment is a mistake (a typo such as ``<!-- runs -->`` would otherwise silently stop a block
running), and ``markers()`` reports it. A block holding only a snippet line
(``--8<-- "examples/profiles/x.toml"``) stands for that file, as the site shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

__all__ = ["DOCS", "MARKERS", "Block", "Marker", "blocks", "markers", "pages"]

DOCS = ROOT / "docs"

#: Every marker, and what it stands before: a fenced block of one language, a table or line, or
#: (for the build hooks, docs/hooks.py) nothing: it is replaced by text made from the code.
MARKERS = {
    "fragment": "toml",  # a piece of a profile shown for its shape, not checked as a whole profile
    "invalid-input": "jsonl",  # each line must be refused as invalid_input
    "run": "bash",  # run against the reference server (tests/integration/test_docs_run.py)
    "no-run": "bash",  # not run: the argument says why (a reason is required)
    "output": "text",  # what the page's last `run` block before it prints, compared line by line in shape
    "copy-of": "text",  # the same text as a block of the page named in the argument
    "record": "json",  # a results record: the fields of a real run's record
    "outcomes": "table",
    "exit-code-table": "table",
    "identity": "line",
    "cli-help": "generated",
    "server-help": "generated",
    "exit-codes": "generated",
    "metrics": "generated",
}
_FENCE = re.compile(r"^```(\w*)")
_COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)
_MARKER = re.compile(r"^<!-- ([a-z-]+)(?:: (\S.*?))? -->$")
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')


@dataclass(frozen=True)
class Marker:
    page: str  # relative to the repository
    line: int  # 1-based
    name: str  # "" when the comment is no marker at all
    argument: str  # after the colon; "" when none

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: docs/getting-started.md, README.md
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str  # "" when none
    argument: str = ""  # the marker's, after the colon: a no-run's reason, a copy-of's page
    included: Path | None = None  # the file a snippet line stands for

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """Every page of the site, and the README (the same promises, read first on a repository's front page)."""
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]


def markers() -> list[Marker]:
    """Every HTML comment of every page; one that is no known marker on a line of its own has the name ""."""
    found = []
    for path in pages():
        text = path.read_text()
        lines = text.splitlines()
        for comment in _COMMENT.finditer(text):
            number = text.count("\n", 0, comment.start()) + 1
            line = lines[number - 1]
            marker = _MARKER.match(line)
            known = marker and line == comment.group(0) and marker.group(1) in MARKERS
            found.append(Marker(str(path.relative_to(ROOT)), number, marker.group(1) if known else "",
                                (marker.group(2) or "") if known else ""))
    return found


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
            found.append(Block(str(path.relative_to(ROOT)), index + 1, opening.group(1),
                               included.read_text() if included else text, marker.group(1) if marker else "",
                               (marker.group(2) or "") if marker else "", included))
            index = end + 1
    return [block for block in found if lang is None or block.lang == lang]
