"""A retry time as an exchange writes it (a delay in s or ms, an epoch in s or ms, a date), read as seconds from now."""

from __future__ import annotations

import datetime
import email.utils
import math

__all__ = ["PAST_TIME_PAUSE", "retry_seconds"]

#: The pause (s) a time the server named reads as when our wall clock has passed it already: the server's clock
#: is behind ours, and read as 0 it would be asked again at once, for as long as the two disagree.
PAST_TIME_PAUSE = 1.0


def retry_seconds(text: str, unit: str, now: float) -> float | None:
    """Seconds from ``now`` (the wall clock, epoch seconds) until ``text``, written in ``unit`` (a profile's
    ``RETRY_UNITS``; a date is an HTTP date, as ``Retry-After``'s, or an ISO-8601 one), says to try again:
    a delay never below 0, a time (an epoch, a date) never below ``PAST_TIME_PAUSE``, uncapped (the retry policy
    holds the one cap). None if it says nothing readable."""
    text = text.strip()
    if unit == "date":
        when = _date(text)
        seconds = None if when is None else when - now
    else:
        try:
            number = float(text)
        except ValueError:
            return None
        seconds = {"s": number, "ms": number / 1000, "epoch-s": number - now, "epoch-ms": number / 1000 - now}[unit]
    if seconds is None or not math.isfinite(seconds):
        return None
    return max(seconds, 0.0) if unit in ("s", "ms") else max(seconds, PAST_TIME_PAUSE)


def _date(text: str) -> float | None:
    """``text`` as an HTTP date or an ISO-8601 one with its zone, in epoch seconds; None if it is neither."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        try:
            when = datetime.datetime.fromisoformat(text)
        except ValueError:
            return None
    if when is None or when.tzinfo is None:
        return None
    try:
        return when.timestamp()
    except (OverflowError, ValueError):  # a date no clock can hold
        return None
