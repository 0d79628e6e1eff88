"""MkDocs hooks: the reference pages made from the code at build time, and img/ served without a copy.

A page holds a marker where generated text goes, so nothing the code already says is written twice:

- ``<!-- cli-help: ARGS -->``: the help ``thread-client ARGS`` prints (``--help``, ``submit --help``, ...),
  from the same parsers the command uses, at a fixed width of 100 columns;
- ``<!-- exit-codes -->``: the stop reasons of ``thread_client.exits`` with their exit codes, and the
  help line the command prints about them;
- ``<!-- server-help -->``: what ``python original_server.py --help`` prints (the reference server's options);
- ``<!-- metrics -->``: every metric family ``/metrics`` serves, with its type and help text, from the
  Prometheus collector itself (fed an idle daemon's status).

``tests/unit/test_docs.py`` checks the generated pages against ``--help`` and the code.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
HELP_WIDTH = "100"
_MARKER = re.compile(r"<!-- (cli-help|server-help|exit-codes|metrics)(?::\s*(.*?))?\s*-->")


def cli_help(args: str) -> str:
    """What ``thread-client ARGS`` prints for a help request (ARGS ends in ``--help``)."""
    from thread_client import cli

    out = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps at the terminal's width: fixed, so builds are equal
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli.main(args.split())
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return out.getvalue()


def server_help() -> str:
    """What the reference server prints for ``--help`` (a script of its own, so run as one)."""
    return subprocess.run([sys.executable, str(ROOT / "original_server.py"), "--help"], capture_output=True,
                          text=True, check=True, timeout=30, env={**os.environ, "COLUMNS": HELP_WIDTH}).stdout


def exit_codes_table() -> str:
    """The stop reasons that end a run with a non-zero code, as ``thread_client.exits`` maps them."""
    from thread_client import exits

    failing = sorted((reason for reason in exits.StopReason if reason.exit_code), key=lambda reason: reason.exit_code)
    rows = [f"| {reason.exit_code} | {reason.value} |" for reason in failing]
    return "\n".join(["| exit code | stop reason (as the summary's first line says it) |", "|---:|---|", *rows,
                      "", f"`thread-client --help` says: *{exits.EXIT_HELP}*"])


def metrics_table() -> str:
    """Every family the Prometheus collector yields, read from an idle daemon's status (no daemon runs)."""
    from thread_client.flow.outage import OutageGate
    from thread_client.flow.queues import QueueManager
    from thread_client.io.graveyard import Graveyard
    from thread_client.observe.metrics import Metrics
    from thread_client.observe.prometheus import DaemonCollector
    from thread_client.observe.status import DaemonStatus

    metrics = Metrics()

    def idle(bounds: Sequence[float]) -> DaemonStatus:
        counts = QueueManager(Graveyard(None), queue_size=1, ttl=1.0).counts()
        return DaemonStatus(counts, metrics.snapshot(), (), metrics.histograms(list(bounds)), OutageGate().state())

    rows = []
    for family in DaemonCollector(idle).collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        rows.append(f"| `{name}` | {family.type} | {family.documentation} |")
    return "\n".join(["| metric | type | what it counts |", "|---|---|---|", *rows])


def _replace(match: re.Match[str]) -> str:
    if match.group(1) == "exit-codes":
        return exit_codes_table()
    if match.group(1) == "metrics":
        return metrics_table()
    if match.group(1) == "server-help":
        return f"```text\n{server_help()}```"
    return f"```text\n{cli_help(match.group(2))}```"


def on_page_markdown(markdown: str, **_: object) -> str:
    """Each marker replaced by the text it stands for; a page without one is left as it is."""
    return _MARKER.sub(_replace, markdown)


def on_files(files: Files, config: object, **_: object) -> Files:
    """The pictures in img/ (beside their PlantUML sources, where `make diagrams` writes them) served as img/."""
    for picture in sorted((ROOT / "img").glob("*.png")):
        files.append(File(f"img/{picture.name}", src_dir=str(ROOT), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
