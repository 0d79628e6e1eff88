"""What a request may ask of its profile: an endpoint (the profile's own or one of its ``[request] endpoints``),
a weight every limit can hold, and params the profile can carry (nested ones only in a JSON body; none named as
one the profile sends itself)."""

from __future__ import annotations

from dataclasses import replace
from typing import Collection, Sequence

from ..limits.rules import LimitRule
from ..request import InvalidInput, Params, Work
from .model import RequestShape

__all__ = ["Endpoints"]


class Endpoints:
    """The endpoints a profile's ``request`` allows, the ``limits`` each send must fit, and where its params go:
    checked once per request, as its line is read (``parse_line``'s ``admit``), so a request that could never be
    sent is ``invalid_input`` with nothing sent. ``own_params``: the names the profile sends itself
    (``Profile.own_params``), which no param may take. ``client_id_param``: the param that names an order to the
    exchange where the id param does not carry it already ("": none), each request's a string; a source refuses
    a value repeated in one run (two orders under one client id: the exchange takes the first only)."""

    def __init__(self, request: RequestShape, limits: Sequence[LimitRule], own_params: Collection[str],
                 can_ask: bool = False) -> None:
        self._method, self._path, self._own = request.method, request.path, request.endpoint
        self._can_ask = can_ask  # the profile has a [settle]: a line requeued in doubt is asked about first
        self._allowed = frozenset((request.endpoint, *request.endpoints))
        self._limits = tuple(limits)
        self._own_params = frozenset(own_params)
        # Where the params go as text (a query string, a form body), each must be a string; None: a JSON body.
        self._text_in = {"query": "in the query string", "form": "in a form body"}.get(request.params_in)
        self.client_id_param = request.client_id if request.client_id != request.id_param else ""

    def __repr__(self) -> str:
        return f"<Endpoints {', '.join(sorted(self._allowed))}>"

    def admit(self, work: Work) -> Work | InvalidInput:
        """``work`` with its endpoint completed from the profile's (the profile's own left as "": the usual
        send) and, where its params go as text, each boolean written ``true``/``false``; or the
        ``invalid_input`` it is: a line requeued in doubt (``sent_on``) the profile cannot ask about, a param
        named as one the profile sends itself, an endpoint the profile does not
        allow, a weight that can never fit a limit, or an object, array or null where the params go as text. A
        profile's client id param the line does not give is added, with the request's id as its value: the
        exchange knows the order by it; one the line gives must be a string (a number keeps its text)."""
        if work.sent_on and not self._can_ask:
            return InvalidInput(work.where, work.id, f'"sent_on": its order may be placed already (sent on key '
                                                     f'{work.sent_on}), and this profile has no [settle] to ask the '
                                                     'exchange first; requeue it with --may-double to send it anyway',
                                work.receipt)
        taken = self._own_params.intersection(work.params)
        if taken:
            return InvalidInput(work.where, work.id, f"parameter(s) {', '.join(sorted(taken))} are names the profile "
                                                     "sends itself", work.receipt)
        client_id = self.client_id_param
        if client_id and client_id not in work.params:
            work = replace(work, params={**work.params, client_id: work.id})
        elif client_id and not isinstance(work.params[client_id], str):
            return InvalidInput(work.where, work.id, f"client id {client_id!r} must be a string or a number (the "
                                                     "exchange knows the order by it)", work.receipt)
        if self._text_in is not None and work.params:
            params = _as_text(work.params, self._text_in)
            if isinstance(params, str):
                return InvalidInput(work.where, work.id, params, work.receipt)
            if params is not work.params:
                work = replace(work, params=params)
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


def _as_text(params: Params, place: str) -> Params | str:
    """``params`` as ``place`` (a query string, a form body) carries them, the same dict if each is a string
    already; or why one cannot go there: an object, an array or null, which only a JSON body carries."""
    if all(isinstance(value, str) for value in params.values()):
        return params
    text: Params = {}
    for name, value in params.items():
        if isinstance(value, bool):
            text[name] = "true" if value else "false"
        elif isinstance(value, str):
            text[name] = value
        else:
            kind = "null" if value is None else "an object" if isinstance(value, dict) else "an array"
            return f"parameter {name!r} is {kind}, which only a JSON body carries (this profile sends params {place})"
    return text
