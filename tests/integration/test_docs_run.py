"""The shell blocks of docs/ marked ``<!-- run -->`` run as written, against the reference server, and what
they print is what the pages show; the site builds strictly and loads nothing from the network when read.

A page's ``run`` blocks run in order, in bash (``-euo pipefail``), in one folder of its own that links the
repository's examples/, original_server.py and tests/ (its verifiers of public APIs: tests/api_verifiers.py),
with one reference server started for the page put where a block says ``http://127.0.0.1:9999`` (the default
address, which another process may hold) and ``.venv/bin/`` made the running interpreter's. A ```text block
marked ``<!-- output -->`` is compared line by line with what the page's last ``run`` block before it printed,
numbers and times aside. The autouse ``private_state_dir`` fixture gives the daemon a state dir of its own. The
markers and the collector: ``tests/unit/test_docs.py``, ``tests/docs_blocks.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from docs_blocks import blocks

RUN = [block for block in blocks("bash") if block.marker == "run"]
RUN_PAGES = sorted({block.page for block in RUN})
DEFAULT_URL = "http://127.0.0.1:9999"
BOUND = 60.0


def test_the_blocks_a_newcomer_runs_first_are_marked_to_run():
    assert {"docs/getting-started.md", "docs/api/index.md", "docs/api/examples/signed-post-json.md"} <= set(RUN_PAGES)
    assert any(block.marker == "output" for block in blocks("text"))


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """The block in bash; whatever it left in the background (a server it started) is stopped after it."""
    process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=os.environ.copy(), start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=BOUND)
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)  # the group of this bash only: its own children
        except ProcessLookupError:
            pass
        process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _shape(line: str, url: str) -> str:
    """A line of output with the server's address made the default, a folder ``mktemp -d`` made (its name is
    random) made ``TMP``, and every number (a time too, and a signed offset such as a clock's +3 or -1) made N."""
    line = re.sub(r"\S*/tmp\.\w{10}\b", "TMP", line.replace(url, DEFAULT_URL))
    return re.sub(r"(?:(?<=\s)[+-])?\d+(?:\.\d+)?", "N", line)


@pytest.mark.parametrize("page", RUN_PAGES)
def test_a_page_s_marked_shell_blocks_run_as_written_and_print_what_it_shows(page: str, start_server, tmp_path: Path):
    server = start_server()
    for name in ("examples", "original_server.py", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    printed = None
    for block in [block for block in blocks() if block.page == page]:
        if block.marker == "output":
            assert printed is not None, f"{block}: no run block before it"
            shown = [_shape(line, DEFAULT_URL) for line in block.text.splitlines()]
            assert [_shape(line, server.url) for line in printed.splitlines()] == shown, (str(block), printed)
        if block.marker != "run":
            continue
        script = block.text.replace(DEFAULT_URL, server.url).replace(".venv/bin/", f"{Path(sys.executable).parent}/")
        done = _run(script, tmp_path)
        assert done.returncode == 0, f"{block}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        printed = done.stdout
        if "--results out.jsonl" in block.text:
            _check_the_first_run_s_records(tmp_path / "out.jsonl")


def _check_the_first_run_s_records(results: Path) -> None:
    """One accepted record per example line, each with the fields of the sample records (``<!-- record -->``)."""
    lines = (ROOT / "examples" / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(records) == len(lines) and all(record["outcome"] == "accepted" for record in records)
    samples = [json.loads(block.text) for block in blocks("json") if block.marker == "record"]
    assert samples and all(set(sample) == set(records[0]) for sample in samples)


@pytest.mark.slow
def test_the_site_builds_strictly_and_its_pages_load_nothing_from_the_network(tmp_path: Path):
    """No CDN, no web fonts: every script, style sheet and font a page or style sheet names is in the site.
    (Material's bundle names two URLs it loads only on demand: a ResizeObserver polyfill for browsers
    without one, and mermaid for diagrams, which these pages have none of: mkdocs.yml is checked for
    that in tests/unit/test_docs.py.)"""
    site = tmp_path / "site"
    built = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(site)],
                           cwd=ROOT, capture_output=True, text=True, timeout=BOUND,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0 and "WARNING" not in built.stderr, built.stderr
    pages = [*site.rglob("*.html"), *site.rglob("*.css")]
    assert len(pages) > 30
    assert not [(str(path), found) for path in pages for found in fetched(path.read_text())]


_FETCHED = re.compile(r"""<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*["']?(?:https?:)?//"""
                      r"""|url\(\s*["']?(?:https?:)?//|@import""", re.IGNORECASE)


def fetched(text: str) -> list[str]:
    """What a page or style sheet would fetch from another host when read: attributes quoted either way."""
    return [match.group(0) for match in _FETCHED.finditer(text)]


@pytest.mark.parametrize("text", [
    '<script src="https://cdn.example/x.js">', "<link rel=stylesheet href='//fonts.example/css'>",
    "<img src=https://example.org/a.png>", "a { background: url( 'https://example.org/a.png') }",
    '@import "x.css";'])
def test_the_offline_check_sees_a_fetch_however_it_is_quoted(text: str):
    assert fetched(text)
