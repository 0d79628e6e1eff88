"""A place in a JSON answer as a profile names it: names joined by dots, each with its ``[index]``es (``data[0].ts``);
``*`` stands for any one member or item (``result.*.cl_ord_id``: an answer keyed by an id the client never sent)."""

from __future__ import annotations

import re

__all__ = ["JsonPath"]

_STEP = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")
_INDEX = re.compile(r"\d+")
#: A step that stands for any one member of an object or item of an array.
_ANY = "*"


class JsonPath:
    """``result.unixtime``, ``data[0].ts``, ``result.*.cl_ord_id``: compiled once into its steps (a name of an
    object, an index of an array, ``*`` any one of either); ``find`` walks a parsed answer along them."""

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
        """What ``value`` holds at this path; at a ``*``, what the first member or item (in the answer's order) that
        holds the rest of the path holds there. Raises LookupError if it holds nothing there."""
        return _walk(value, self._steps, self.text)


def _walk(value: object, steps: tuple[str | int, ...], text: str) -> object:
    """What ``value`` holds along ``steps`` (of the path ``text``, for the error)."""
    for index, step in enumerate(steps):
        if step == _ANY and isinstance(value, (dict, list)):
            for member in value.values() if isinstance(value, dict) else value:
                try:
                    return _walk(member, steps[index + 1:], text)
                except LookupError:
                    continue
            raise LookupError(f"nothing at {text!r}")
        if isinstance(step, int) and isinstance(value, list) and step < len(value):
            value = value[step]
        elif isinstance(step, str) and step != _ANY and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            raise LookupError(f"nothing at {text!r}")
    return value
