"""The client daemon as a child process (the make targets' programs, the tests): its command
line, and where its outputs land in a working directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["GRAVEYARD_FILE", "STATE_DIR", "SUMMARY_FILE", "client_command", "read_summary"]

STATE_DIR = "state"
SUMMARY_FILE = "summary.json"
GRAVEYARD_FILE = "graveyard.jsonl"


def client_command(url: str, workdir: Path, *args: str) -> list[str]:
    """``python -m thread_client`` against ``url``, its summary, graveyard and per-key state (host locks,
    nonce marks) kept in ``workdir``, so runs never share the user's state dir. A later ``--state-dir``
    in ``args`` wins. Run it with the repository root as the working directory.
    """
    return [
        sys.executable, "-m", "thread_client", "--url", url, "--state-dir", str(workdir / STATE_DIR),
        "--summary-json", str(workdir / SUMMARY_FILE), "--graveyard", str(workdir / GRAVEYARD_FILE), *args,
    ]


def read_summary(workdir: Path) -> dict:
    """The summary a client run wrote into ``workdir``."""
    return json.loads((workdir / SUMMARY_FILE).read_text())
