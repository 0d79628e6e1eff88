"""The console page's files hold what a browser needs offline and what an operator's screen reader needs: every file
it loads is in the package, nothing comes from another host, no value is parsed as HTML, every button says what it
does and every table has headers. What the page does is tested in a real browser
(tests/integration/test_console_browser.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from conftest import ROOT

STATIC = ROOT / "thread_client" / "control" / "static"
PAGE = STATIC / "index.html"


class _Page(HTMLParser):
    """The page's loaded files, its buttons' text and its tables' header cells."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.buttons: list[str] = []
        self.header_cells: dict[str, list[dict]] = {}
        self._button: list[str] | None = None
        self._table: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag in ("script", "img") and attributes.get("src"):
            self.loads.append(attributes["src"])
        if tag == "link" and attributes.get("href"):
            self.loads.append(attributes["href"])
        if tag == "button":
            self._button = []
        if tag == "table":
            self._table = attributes.get("id") or "?"
            self.header_cells[self._table] = []
        if tag == "th" and self._table:
            self.header_cells[self._table].append(attributes)

    def handle_endtag(self, tag: str) -> None:
        if tag == "button" and self._button is not None:
            self.buttons.append("".join(self._button).strip())
            self._button = None
        if tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._button.append(data)


def parsed() -> _Page:
    page = _Page()
    page.feed(PAGE.read_text())
    return page


def test_the_page_loads_only_its_own_files():
    loads = [load for load in parsed().loads if not load.startswith("data:")]
    assert loads == ["static/console.css", "static/console.js"]
    assert all((STATIC / load.removeprefix("static/")).is_file() for load in loads)
    for path in STATIC.iterdir():
        assert not re.search(r"(?:https?:)?//[\w.-]+\.\w+/", path.read_text()), f"{path.name} names another host"


def test_no_value_from_the_daemon_is_parsed_as_html():
    script = (STATIC / "console.js").read_text()
    assert not re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", script)


def test_every_button_says_what_it_does_and_every_table_has_column_headers():
    page = parsed()
    assert page.buttons and all(page.buttons)
    assert set(page.header_cells) == {"queues", "outcomes", "members", "keys", "errors", "dead"}
    for table, cells in page.header_cells.items():
        assert any(cell.get("scope") == "col" for cell in cells), table
