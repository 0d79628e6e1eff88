"""Picking a file or pipe of requests up again after a crash: what is done, and what was in flight."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..flow.request import Request
from .jsonlines import JsonLinesFile, JsonLinesOutput
from .seen_ids import SeenIds

__all__ = ["ResumePoint", "SendJournal"]


class SendJournal(JsonLinesOutput):
    """``<results>.sent``: one line (id, key, nonce) written before each send, so a restart can
    tell the requests that may have reached the exchange from those that never left."""

    def __init__(self, results_path: str) -> None:
        self.path = f"{results_path}.sent"
        self._file = JsonLinesFile(self.path)

    def __repr__(self) -> str:
        return f"<SendJournal {self.path}>"

    def sending(self, request: Request, key: str, nonce: int) -> None:
        self._file.append({"id": request.req_id, "key": key, "nonce": nonce})



class ResumePoint:
    """What an earlier run of the same input left: ids with a final record (``done``: skipped now)
    and ids that were sent but have none (``resumed``: in flight at the crash, sent again and
    marked ``resumed_after_crash``). Both live on disk, so memory stays flat for any input."""

    def __init__(self, results_path: str, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.done = SeenIds(state_dir)
        self.resumed = SeenIds(state_dir)
        for record in _records(Path(results_path)):
            self.done.add(str(record.get("id", "")))
        for record in _records(Path(f"{results_path}.sent")):
            request_id = str(record.get("id", ""))
            if request_id not in self.done:
                self.resumed.add(request_id)

    def close(self) -> None:
        self.done.close()
        self.resumed.close()


def _records(path: Path):
    """The JSON lines of ``path`` (none if it does not exist); a line a crash cut short is skipped."""
    if not path.exists():
        return
    with path.open("rb") as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except ValueError:
                continue
