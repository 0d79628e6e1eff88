"""Command-line argument types shared by the daemon's command and its sub-commands."""

from __future__ import annotations

import argparse
import math
from typing import Callable

__all__ = ["OneLineParser", "bounded", "control_flags", "path"]


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


def path(text: str) -> str:
    """An argparse ``type`` for a file or folder: an empty one would name the current folder, or nothing."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def control_flags(parser: argparse.ArgumentParser, *, port: int | None, token_file: str) -> None:
    """The control API's flags, as the daemon and ``console`` both take them: ``port`` the default (None: off),
    ``token_file`` where the token is by default, in words."""
    parser.add_argument("--control-port", type=bounded(int, 0, 65_535), default=port, metavar="PORT",
                        help="serve the control API and the operator's console on --control-host:PORT ("
                        + ("default off" if port is None else "default %(default)s; 0 picks a free port") + ")")
    parser.add_argument("--control-host", default="127.0.0.1", metavar="ADDRESS",
                        help="the control port's address (default %(default)s); any other than loopback needs "
                        "--control-token-file")
    parser.add_argument("--control-token-file", type=path, metavar="PATH",
                        help="the token every command of the control API needs; made (mode 0600) when missing "
                        f"(default: {token_file})")
