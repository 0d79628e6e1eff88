"""Clocks: monotonic time for every interval and deadline, wall-clock time only for nonces and records."""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["Clock", "WallMicros", "monotonic", "wall_micros"]

#: A source of monotonic seconds; injected wherever a decision depends on time, so tests can fake it.
Clock = Callable[[], float]
#: A source of wall-clock microseconds since the epoch (nonces).
WallMicros = Callable[[], int]

monotonic: Clock = time.monotonic


def wall_micros() -> int:
    return time.time_ns() // 1000
