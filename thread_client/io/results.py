"""The results: exactly one final record per request, as JSON lines, written as each request ends."""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Callable

from .. import defaults
from ..delivery import AT_LEAST_ONCE, Delivery
from ..request import FinalOutcome, Request, json_text, read_json
from .jsonlines import JsonLinesFile, JsonLinesOutput

__all__ = ["Results", "final_record"]


class Results(JsonLinesOutput):
    """A ``ResultSink``: one JSON line per finished request in ``path`` (``-``: standard output), through a
    ``JsonLinesFile`` (whole lines, nothing lost on a failed write). The exchange's answer is kept
    as JSON when it is JSON, its numbers as the exchange wrote them, else as text, cut at ``max_body_bytes``.
    Exactly-once (``delivery``) puts
    each record on the disk before ``record`` returns: before the key's next send."""

    def __init__(
        self, path: str, *, max_body_bytes: int = defaults.MAX_BODY_BYTES, delivery: Delivery = AT_LEAST_ONCE,
        write: Callable[[int, bytes], int] = os.write,
    ) -> None:
        self.path = path
        self._max_body = max_body_bytes
        # write: os.write, or a test's full disk
        self._file = JsonLinesFile(path, durable=delivery.durable_outputs, exclusive=True, write=write,
                                   encode=partial(json_text, separators=(", ", ": ")))

    def __repr__(self) -> str:
        return f"<Results {self.path}>"

    def record(self, request: Request, outcome: FinalOutcome, detail: str = "") -> None:
        """Write the final record of ``request``."""
        self._file.append(final_record(request, outcome, detail, self._max_body))


def final_record(request: Request, outcome: FinalOutcome, detail: str, max_body_bytes: int) -> dict:
    """The one record a request ends with, as every results sink writes it (a file, a stream)."""
    finished = time.time()
    return {
        "id": request.req_id,
        "where": request.where,
        "outcome": outcome.value,
        "reason": outcome.reason(detail) if outcome is not FinalOutcome.ACCEPTED else "",
        "http_status": request.http_status,
        "body": _readable_body(request.body, max_body_bytes),
        "attempts": request.attempts,
        "ambiguous_attempts": request.ambiguous,
        "resumed_after_crash": request.resumed,
        "key": request.key,
        "nonce": request.nonce,
        "latency_ms": round(1000 * (finished - request.created_wall), 3),
        "created": round(request.created_wall, 6),
        "finished": round(finished, 6),
        **({"line_digest": request.digest} if request.digest else {}),  # an invalid line's, for a rerun
        # Sent again after a dead record of the same id: this record supersedes it.
        **({"requeued": True, "requeue": request.requeue} if request.requeue else {}),
    }


#: An answer nested deeper than this is kept as text: json.dumps recurses once per level, and a record may be
#: serialized on another thread than the one that parsed its answer, far deeper in its stack.
_MAX_NESTING = 100


def _readable_body(body: bytes, max_bytes: int) -> object:
    """The exchange's answer as JSON when it is JSON (nested at most ``_MAX_NESTING`` deep), its numbers kept as
    written (``read_json``: never NaN or 1e400 read into what no JSON reader takes back), else as text, cut at
    ``max_bytes``: a record must serialize wherever it is written, and read back on a restart."""
    if not body:
        return None
    if len(body) <= max_bytes:
        try:
            value = read_json(body)
        except (ValueError, RecursionError):  # not JSON (NaN too), or nested deeper than the parser goes
            pass
        else:
            if not _nested_deeper(value, _MAX_NESTING):
                return value
    return body[:max_bytes].decode("utf-8", "replace")


def _nested_deeper(value: object, limit: int) -> bool:
    """Whether ``value``'s lists and objects nest more than ``limit`` deep; walked without recursion."""
    pending = [(value, 0)]  # each item with how many lists and objects hold it
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            if depth == limit:
                return True
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False
