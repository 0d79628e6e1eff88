"""Command-line argument types shared by the daemon's command and its sub-commands."""

from __future__ import annotations

import argparse
import math
from typing import Callable

__all__ = ["OneLineParser", "bounded"]


class OneLineParser(argparse.ArgumentParser):
    """Errors as one line on stderr and exit code 2, for the daemon and every sub-command."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def bounded(kind: type[int] | type[float], low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """An argparse ``type`` that reads a finite number within [low, high]; the message names the unit."""
    shown = f" {unit}" if unit else ""

    def read(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a{'n integer' if kind is int else ' number'}: {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}{shown}, got {text}")
        return value

    read.__name__ = kind.__name__  # argparse names the type in its own messages
    return read
