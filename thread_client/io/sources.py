"""Where requests come from: the synthetic loads the daemon can generate by itself."""

from __future__ import annotations

import itertools
import random
import threading
from typing import Iterator

__all__ = ["LOADS", "SyntheticSource"]

#: "exercise": the original load, a request then a sleep of randint(0, 21) ms (~91-95/s offered).
#: "saturate": no sleep; the main queue stays full, to measure capacity.
LOADS = ("exercise", "saturate")
_EXERCISE_MAX_GAP_MS = 21


class SyntheticSource:
    """Request ids 1, 2, 3 ... paced like the original exercise, or as fast as they are taken."""

    def __init__(self, load: str = "exercise", rng: random.Random | None = None) -> None:
        if load not in LOADS:
            raise ValueError(f"load must be one of {LOADS}, got {load!r}")
        self.load = load
        self._rng = rng or random.Random()
        self._ids = itertools.count(1)  # kept across read() calls: a restarted producer never repeats an id

    def __repr__(self) -> str:
        return f"<SyntheticSource {self.load}>"

    def read(self, stop: threading.Event) -> Iterator[int]:
        """Yield ids until ``stop`` is set; the exercise pause waits on ``stop``, so it ends at once."""
        for req_id in self._ids:
            if stop.is_set():
                return
            yield req_id
            if self.load == "exercise" and stop.wait(self._rng.randint(0, _EXERCISE_MAX_GAP_MS) / 1000):
                return
