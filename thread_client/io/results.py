"""The results: exactly one final record per request, as JSON lines, written as each request ends."""

from __future__ import annotations

import json
import time

from ..flow.request import Request
from .jsonlines import JsonLinesFile, JsonLinesOutput

__all__ = ["FINAL_OUTCOMES", "Results", "final_outcome"]

#: Every request ends in exactly one of these.
FINAL_OUTCOMES = (
    "accepted", "rejected", "retries_exhausted", "expired", "invalid_input", "key_blocked", "shutdown", "unknown",
)
# The burial reasons the policy and the daemon give, by their first words, and the outcome each is.
_OUTCOME_OF_REASON = {
    "retries exhausted": "retries_exhausted", "rejected": "rejected", "unknown": "unknown",
    "invalid input": "invalid_input", "all keys retired": "key_blocked", "shutdown": "shutdown", "stopped": "shutdown",
}


def final_outcome(reason: str) -> str:
    """The outcome a burial reason stands for (``retries exhausted: timeout`` -> ``retries_exhausted``)."""
    return _OUTCOME_OF_REASON.get(reason.split(":")[0], "shutdown")


class Results(JsonLinesOutput):
    """One JSON line per finished request in ``path`` (``-``: standard output), through a
    ``JsonLinesFile`` (whole lines, nothing lost on a failed write). The exchange's answer is kept
    as JSON when it is JSON, else as text, cut at ``max_body_bytes``. ``durable``: each record is
    on the disk before ``record`` returns (exactly-once needs it before the key's next send)."""

    def __init__(self, path: str, *, max_body_bytes: int = 4096, durable: bool = False) -> None:
        self.path = path
        self._max_body = max_body_bytes
        self._file = JsonLinesFile(path, durable=durable)

    def __repr__(self) -> str:
        return f"<Results {self.path}>"

    def record(self, request: Request, outcome: str, reason: str = "") -> None:
        """Write the final record of ``request``."""
        finished = time.time()
        self._file.append({
            "id": request.req_id,
            "outcome": outcome,
            "reason": reason,
            "http_status": request.http_status,
            "body": self._body(request.body),
            "attempts": request.attempts,
            "ambiguous_attempts": request.ambiguous,
            "resumed_after_crash": request.resumed,
            "key": request.key,
            "nonce": request.nonce,
            "latency_ms": round(1000 * (finished - request.created_wall), 3),
            "created": round(request.created_wall, 6),
            "finished": round(finished, 6),
        })

    def _body(self, body: bytes) -> object:
        if not body:
            return None
        if len(body) <= self._max_body:
            try:
                return json.loads(body)
            except ValueError:
                pass
        return body[: self._max_body].decode("utf-8", "replace")

