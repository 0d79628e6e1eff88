"""What one HTTP attempt came to, read from the exchange's answer (see the exchange contract)."""

from __future__ import annotations

import enum
import json

__all__ = ["Outcome", "classify"]


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    RATE_LIMITED = "rate_limited"  # 429 "exceeded rate limit": retry, and the limiter was wrong
    KEY_BLOCKED = "key_blocked"  # 429 "...blocked": the key is dead for good
    INVALID_NONCE = "invalid_nonce"  # 400: retry with a fresh nonce
    INVALID_KEY = "invalid_key"  # 401: the key is not valid
    SERVER_ERROR = "server_error"  # 5xx or any other unexpected status
    BAD_ANSWER = "bad_answer"  # a body that is not the contract's JSON
    TIMEOUT = "timeout"  # no answer within the HTTP timeout
    CONNECTION_ERROR = "connection_error"  # refused, reset or dropped
    EXPIRED = "expired"  # the time-to-live passed before a slot was free
    INTERNAL_ERROR = "internal_error"  # the client itself failed while handling the attempt

    @property
    def retires_key(self) -> bool:
        return self in (Outcome.KEY_BLOCKED, Outcome.INVALID_KEY)


def classify(status: int, body: bytes, req_id: str) -> Outcome:
    """The outcome of an answer; anything the contract does not describe is a bad answer or a server error."""
    try:
        payload = json.loads(body)
    except ValueError:
        return Outcome.SERVER_ERROR if status >= 500 else Outcome.BAD_ANSWER
    if not isinstance(payload, dict):
        return Outcome.BAD_ANSWER
    if status == 200:
        ok = payload.get("status") == "OK" and payload.get("req_id") == req_id
        return Outcome.ACCEPTED if ok else Outcome.BAD_ANSWER
    message = str(payload.get("error_msg", ""))
    if status == 429:
        return Outcome.KEY_BLOCKED if "blocked" in message else Outcome.RATE_LIMITED
    if status == 400 and "nonce" in message:
        return Outcome.INVALID_NONCE
    if status == 401:
        return Outcome.INVALID_KEY
    return Outcome.SERVER_ERROR
