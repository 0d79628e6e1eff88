"""Which endpoint a request may name, and at what weight: the profile's own or one of its ``[request] endpoints``,
at a weight every limit can hold."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..limits.rules import LimitRule
from ..request import InvalidInput, Work
from .model import RequestShape

__all__ = ["Endpoints"]


class Endpoints:
    """The endpoints a profile's ``request`` allows, and the ``limits`` each send must fit: checked once per
    request, as its line is read (``parse_line``'s ``admit``), so a request that could never be sent is
    ``invalid_input`` with nothing sent."""

    def __init__(self, request: RequestShape, limits: Sequence[LimitRule]) -> None:
        self._method, self._path, self._own = request.method, request.path, request.endpoint
        self._allowed = frozenset((request.endpoint, *request.endpoints))
        self._limits = tuple(limits)

    def __repr__(self) -> str:
        return f"<Endpoints {', '.join(sorted(self._allowed))}>"

    def admit(self, work: Work) -> Work | InvalidInput:
        """``work`` with its endpoint completed from the profile's (the profile's own left as "": the usual
        send), or the ``invalid_input`` it is: an endpoint the profile does not allow, or a weight that can
        never fit a limit."""
        if not (work.method or work.path) and work.weight == 1:
            return work  # the usual request: nothing to check
        method, path = work.method or self._method, work.path or self._path
        endpoint = f"{method} {path}"
        if endpoint not in self._allowed:
            return InvalidInput(work.where, work.id, f"{endpoint!r} is not an endpoint the profile allows (allowed: "
                                                     f"{', '.join(sorted(self._allowed))})", work.receipt)
        try:
            for limit in self._limits:
                limit.cost_of(endpoint, work.weight)
        except ValueError as exc:
            return InvalidInput(work.where, work.id, f"weight {work.weight}: {exc}", work.receipt)
        if endpoint == self._own:
            return replace(work, method="", path="")
        return replace(work, method=method, path=path)
