"""The order-status table: what the exchange's status endpoint says of an order named by its client id.

A send whose fate is in doubt (an ``ambiguous`` or ``duplicate`` answer, a timeout, a lost answer) of a
request that carries a client id is settled by asking the exchange, the way exchanges' own docs say to
handle "execution status unknown": found, the first copy exists; not found, it may be sent again under
the same client id; unknown, ask again later.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Mapping

from .. import defaults
from ..limits.timestamps import DRIFT
from ..parts import NO_HEADERS
from ..profile import Profile
from ..request import Params, Request
from .answers import AnswerTable, Outcome, Reading

__all__ = ["Finding", "StatusTable"]


class Finding(enum.Enum):
    FOUND = "found"  # the exchange has the order: the first copy was accepted
    NOT_FOUND = "not_found"  # the exchange has no order of this client id
    UNKNOWN = "unknown"  # no rule read the answer, a rule read it unknown, or none came


#: A finding's rule compiled as an answer rule, so the answer table's own predicates read status answers too.
_AS_OUTCOME = {"found": "accepted", "not_found": "rejected", "unknown": "retry"}
_BY_OUTCOME = {Outcome.ACCEPTED: Finding.FOUND, Outcome.REJECTED: Finding.NOT_FOUND}


class StatusTable:
    """A profile's ``[settle]`` compiled once: where a status ask goes (``method``, ``path``, ``params``) and
    how its answer reads (``read``). Built only for a profile whose requests carry a client id.

    ``doubt_lasts``: how long (s) after a send ended its copy may still be accepted, or placed, or first shown, so
    a status ask that finds none says nothing until then (docs/api/settle.md). A receive window ``W`` bounds when a
    copy is taken: the server takes a stamp at most ``W`` old, and (checking ``|server time - stamp| < W``) at most
    ``W`` ahead, so no copy is taken later than ``2 W`` after it was stamped, on the server's clock, which runs at
    ours within ``DRIFT``; with none, ``http_timeout`` (how long the client lets a send take). A copy taken may be
    placed by the exchange's engine, or shown by its status endpoint, up to ``[settle] lag_ms`` later still."""

    def __init__(self, profile: Profile, http_timeout: float = defaults.HTTP_TIMEOUT) -> None:
        settle = profile.settle
        if settle is None or not profile.request.client_id:
            raise ValueError("a status table needs a [settle] endpoint and a [request] client_id")
        self.method, self.path, self.endpoint = settle.method, settle.path, settle.endpoint
        self._param, self._copied = settle.client_id_param, settle.params
        window = profile.nonce.recv_window_ms / 1000
        self.doubt_lasts = max(2 * window * (1 + DRIFT) if window else http_timeout, settle.lag_ms / 1000)
        self._client_id = profile.request.client_id
        rules = tuple(dataclasses.replace(rule, outcome=_AS_OUTCOME[rule.outcome]) for rule in settle.rules)
        self._table = AnswerTable(dataclasses.replace(profile, answers=rules))

    def __repr__(self) -> str:
        return f"<StatusTable {self.endpoint} {self._param}=>"

    def client_id(self, request: Request) -> str:
        """The client id ``request`` was sent with: its line's own param of that name, else its id."""
        value = request.params.get(self._client_id)
        return value if isinstance(value, str) else request.req_id

    def params(self, request: Request) -> Params:
        """The params of a status ask about ``request``'s order: those of its own ``[settle] params`` names (a
        request without one asks without it), then its client id."""
        copied = {name: request.params[name] for name in self._copied if name in request.params}
        return {**copied, self._param: self.client_id(request)}

    def read(
        self, status: int, body: bytes, client_id: str, headers: Mapping[str, str] = NO_HEADERS,
    ) -> tuple[Finding, Reading]:
        """What one status answer says of the order ``client_id``, and its words (a rule's echo of the id is
        checked against ``client_id``)."""
        reading = self._table.classify(status, body, client_id, headers)
        return _BY_OUTCOME.get(reading.outcome, Finding.UNKNOWN), reading

