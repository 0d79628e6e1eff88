"""A place in a JSON answer as a profile names it: names joined by dots, each with its ``[index]``es (``data[0].ts``)."""

from __future__ import annotations

import re

__all__ = ["JsonPath"]

_STEP = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")
_INDEX = re.compile(r"\d+")


class JsonPath:
    """``result.unixtime``, ``data[0].ts``: compiled once into its steps (a name of an object, an index of an
    array); ``find`` walks a parsed answer along them."""

    __slots__ = ("text", "_steps")

    def __init__(self, text: str) -> None:
        """Raises ValueError if ``text`` is no such path."""
        steps: list[str | int] = []
        for part in text.split("."):
            match = _STEP.fullmatch(part)
            if match is None:
                raise ValueError(f"{text!r} is no JSON path (names joined by dots, each with its [index]es: "
                                 "result.unixtime, data[0].ts)")
            steps.append(match.group(1))
            steps.extend(int(index) for index in _INDEX.findall(match.group(2)))
        self.text = text
        self._steps = tuple(steps)

    def __repr__(self) -> str:
        return f"JsonPath({self.text!r})"

    def find(self, value: object) -> object:
        """What ``value`` holds at this path. Raises LookupError if it holds nothing there."""
        for step in self._steps:
            if isinstance(step, int) and isinstance(value, list) and step < len(value):
                value = value[step]
            elif isinstance(step, str) and isinstance(value, dict) and step in value:
                value = value[step]
            else:
                raise LookupError(f"nothing at {self.text!r}")
        return value
