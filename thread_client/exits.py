"""Why the daemon stops, and the exit code each reason gives (in ``--help`` and docs/reference/exit-codes.md)."""

from __future__ import annotations

import enum
import signal

__all__ = ["EXIT_HELP", "StopReason"]


class StopReason(enum.Enum):
    """Why a run stops: its value is the words the summary says it in (``stop_reason``, the format on disk), and
    each member knows its exit code (0: a clean stop; a broken accounting identity is 1 too, decided by the
    summary itself)."""

    exit_code: int

    def __new__(cls, words: str, exit_code: int = 0) -> "StopReason":
        member = object.__new__(cls)
        member._value_ = words
        member.exit_code = exit_code
        return member

    INPUT_DONE = "input done: every request has its final outcome"
    DURATION_REACHED = "duration reached"
    #: The control API's drain: the graceful stop of SIGTERM, a clean one.
    DRAINED = "drained from the control API"
    SIGINT = "SIGINT"
    SIGTERM = "SIGTERM"
    #: Asked by the code that drives the daemon (a shutdown with no other reason, a test).
    STOPPED = "stopped"
    THREAD_FAILED = "a thread kept dying", 1
    OUTPUT_FAILED = "an output file is not writable", 1
    ENDPOINT_NOT_FOUND = "endpoint not found", 2
    ALL_KEYS_RETIRED = "all keys retired", 3
    #: Every key retired, the last by the operator (``{"last": true}``): what was not sent is the operator's stop.
    LAST_KEY_RETIRED = "the operator retired the last key", 3
    NEVER_REACHED = "never reached the exchange", 4
    #: A member's store does not answer at start: not a bad setting (a supervisor starts it again later).
    STORE_NOT_REACHED = "the store did not answer at start", 4

    @classmethod
    def caught(cls, signum: signal.Signals) -> "StopReason":
        """The stop a caught signal asks for; ValueError for a signal that stops nothing."""
        try:
            return cls[signal.Signals(signum).name]
        except KeyError:
            raise ValueError(f"{signal.Signals(signum).name} is no stop reason") from None


EXIT_HELP = (
    "Exit codes: 0 clean stop, 1 accounting, thread or output-file failure, 2 bad arguments or endpoint not found, "
    "3 every key retired (blocked, invalid or forbidden), 4 never reached the exchange, or the work stream's store "
    "did not answer at start."
)
