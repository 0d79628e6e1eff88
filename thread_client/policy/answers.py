"""The answer table: what one HTTP attempt came to, read from the exchange's answer (see the exchange contract).

Real servers and proxies answer things the reference server never does (an
HTML 429 from a load balancer, a 404 for a wrong path, a 403 from a firewall);
each gets a row here, and the retry policy decides what to do about it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

__all__ = ["BLOCKED_MESSAGE", "INVALID_NONCE_MESSAGE", "Outcome", "Reading", "classify"]

#: The contract's exact 429 message for a key that is dead for good.
BLOCKED_MESSAGE = "too many rate limit errors: blocked"
INVALID_NONCE_MESSAGE = "invalid nonce"


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    BAD_ANSWER = "bad_answer"  # a 200 that is not the contract's OK: it may have been accepted (ambiguous)
    INVALID_NONCE = "invalid_nonce"  # 400 invalid nonce: retry with a fresh nonce
    REJECTED = "rejected"  # any other 400: the request itself is refused, final
    INVALID_KEY = "invalid_key"  # 401
    FORBIDDEN = "forbidden"  # 403
    ENDPOINT_NOT_FOUND = "endpoint_not_found"  # 404 or 405: --url points at the wrong place
    KEY_BLOCKED = "key_blocked"  # 429 with exactly the contract's block message
    RATE_LIMITED = "rate_limited"  # any other 429: a strike
    UNAVAILABLE = "unavailable"  # 503: with a Retry-After, the key pauses that long
    SERVER_ERROR = "server_error"  # any other 5xx, or a status the contract does not describe
    TIMEOUT = "timeout"  # no answer within the HTTP timeout after the request was written (ambiguous)
    CONNECTION_RESET = "connection_reset"  # dropped after the request was written (ambiguous)
    UNREACHABLE = "unreachable"  # refused, name not resolved, TLS handshake failed: nothing was sent
    EXPIRED = "expired"  # the time-to-live passed before a slot was free
    INTERNAL_ERROR = "internal_error"  # the client itself failed while handling the attempt
    UNKNOWN = "unknown"  # exactly-once: the fate of an ambiguous attempt could not be settled (stopped first)

    @property
    def retires_key(self) -> bool:
        return self in (Outcome.KEY_BLOCKED, Outcome.INVALID_KEY, Outcome.FORBIDDEN)

    @property
    def ambiguous(self) -> bool:
        """The exchange may have accepted the request although no definite answer said so."""
        return self in (Outcome.BAD_ANSWER, Outcome.TIMEOUT, Outcome.CONNECTION_RESET)


@dataclass(frozen=True, slots=True)
class Reading:
    """An answer read against the table: its outcome, and the server's own words (for reasons and logs)."""

    outcome: Outcome
    detail: str = ""


def classify(status: int, body: bytes, req_id: str) -> Reading:
    """Read one answer. ``req_id`` is the id that was sent; an OK echoing it as a JSON number counts."""
    payload = _json_object(body)
    message = str(payload.get("error_msg", "")) if payload is not None else ""
    if status == 200:
        if payload is not None and payload.get("status") == "OK" and _same_id(payload.get("req_id"), req_id):
            return Reading(Outcome.ACCEPTED)
        return Reading(Outcome.BAD_ANSWER, "200 without the contract's OK for this req_id")
    if status == 400:
        if message == INVALID_NONCE_MESSAGE:
            return Reading(Outcome.INVALID_NONCE, message)
        return Reading(Outcome.REJECTED, message or _text(body) or "400 Bad Request")
    if status == 401:
        return Reading(Outcome.INVALID_KEY, message or "401 Unauthorized")
    if status == 403:
        return Reading(Outcome.FORBIDDEN, message or "403 Forbidden")
    if status in (404, 405):
        return Reading(Outcome.ENDPOINT_NOT_FOUND, f"{status} {message or _text(body)}".strip())
    if status == 429:
        if message == BLOCKED_MESSAGE:
            return Reading(Outcome.KEY_BLOCKED, message)
        return Reading(Outcome.RATE_LIMITED, message or _text(body) or "429")
    words = f"{status} {message or _text(body)}".strip()
    return Reading(Outcome.UNAVAILABLE if status == 503 else Outcome.SERVER_ERROR, words)


def _json_object(body: bytes) -> dict | None:
    """The body as a JSON object, or None for anything else: not JSON, not UTF-8, or nested so deep
    that the parser gives up (a body is the server's, and must never crash the reading of it)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _same_id(echoed: object, sent: str) -> bool:
    if isinstance(echoed, str):
        return echoed == sent
    return isinstance(echoed, int) and not isinstance(echoed, bool) and str(echoed) == sent


def _text(body: bytes, limit: int = 80) -> str:
    """The start of a non-JSON body, on one line, for a log or a reason."""
    return " ".join(body[:limit].decode("utf-8", "replace").split())
