"""The shell blocks of docs/ marked ``<!-- run -->`` run as written, against the reference server; the site
builds strictly and loads nothing from the network when read.

Each runs in bash (``-euo pipefail``) in a folder of its own that links the repository's examples/, with the
server's address put where the block says ``http://127.0.0.1:9999`` (the default address, which another
process may hold) and ``.venv/bin/`` made the running interpreter's. The autouse ``private_state_dir``
fixture gives the daemon a state dir of its own. The marker and the collector: ``tests/unit/test_docs.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from docs_blocks import Block, blocks

RUN = [block for block in blocks("bash") if block.marker == "run"]
DEFAULT_URL = "http://127.0.0.1:9999"
BOUND = 60.0


def test_a_few_blocks_are_marked_to_run():
    assert 1 <= len(RUN) <= 5 and {block.page for block in RUN} >= {"getting-started.md"}


@pytest.mark.parametrize("block", RUN, ids=str)
def test_a_marked_shell_block_runs_as_written(block: Block, start_server, tmp_path: Path):
    server = start_server()
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    script = block.text.replace(DEFAULT_URL, server.url).replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=BOUND, env=os.environ.copy())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if "--results out.jsonl" in script:  # the first run: one record per example line, every one accepted
        lines = (ROOT / "examples" / "requests.jsonl").read_text().splitlines()
        records = (tmp_path / "out.jsonl").read_text().splitlines()
        assert len(records) == len(lines) and all('"outcome": "accepted"' in record for record in records)


def test_the_site_builds_strictly_and_its_pages_load_nothing_from_the_network(tmp_path: Path):
    """No CDN, no web fonts: every script, style sheet and font a page or style sheet names is in the site.
    (Material's bundle names two URLs it loads only on demand: a ResizeObserver polyfill for browsers
    without one, and mermaid for diagrams, which these pages have none of.)"""
    site = tmp_path / "site"
    built = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(site)],
                           cwd=ROOT, capture_output=True, text=True, timeout=BOUND,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0 and "WARNING" not in built.stderr, built.stderr
    fetched = re.compile(r"<(?:script|link|img)[^>]*(?:src|href)=\"(https?:)?//|url\((['\"]?)(https?:)?//|@import")
    pages = [*site.rglob("*.html"), *site.rglob("*.css")]
    assert len(pages) > 30
    assert not [(str(path), match.group(0)) for path in pages for match in fetched.finditer(path.read_text())]
