"""Why the daemon stops, and the exit code each reason gives (in ``--help`` and docs/reference/exit-codes.md)."""

from __future__ import annotations

__all__ = [
    "ALL_KEYS_RETIRED", "DRAINED", "ENDPOINT_NOT_FOUND", "EXIT_CODES", "EXIT_HELP", "OUTPUT_FAILED", "INPUT_DONE", "NEVER_REACHED", "STORE_NOT_REACHED",
    "THREAD_FAILED", "exit_code_for",
]

ALL_KEYS_RETIRED = "all keys retired"
ENDPOINT_NOT_FOUND = "endpoint not found"
NEVER_REACHED = "never reached the exchange"
#: A member's store does not answer at start: not a bad setting (a supervisor starts it again later).
STORE_NOT_REACHED = "the store did not answer at start"
THREAD_FAILED = "a thread kept dying"
OUTPUT_FAILED = "an output file is not writable"
INPUT_DONE = "input done: every request has its final outcome"
#: The control API's drain: the graceful stop of SIGTERM, a clean one.
DRAINED = "drained from the control API"

#: 0 is a clean stop; a broken accounting identity is 1 too, decided by the summary itself.
EXIT_CODES = {THREAD_FAILED: 1, OUTPUT_FAILED: 1, ENDPOINT_NOT_FOUND: 2, ALL_KEYS_RETIRED: 3, NEVER_REACHED: 4,
              STORE_NOT_REACHED: 4}

EXIT_HELP = (
    "Exit codes: 0 clean stop, 1 accounting, thread or output-file failure, 2 bad arguments or endpoint not found, "
    "3 every key retired (blocked, invalid or forbidden), 4 never reached the exchange, or the work stream's store "
    "did not answer at start."
)


def exit_code_for(stop_reason: str) -> int:
    return EXIT_CODES.get(stop_reason, 0)
