"""One request's method, target, body and headers, as a profile says to build them: compiled once per
key and worker, so each send only fills in its nonce, its id and its parameters."""

from __future__ import annotations

import time
from string import Formatter
from typing import Mapping
from urllib.parse import quote, urlencode

from ..profile import NonceShape, RequestShape, Secret, SignedParts, Signer, Signing
from ..profile.model import USER_AGENT, header_fault, template_fields
from ..request import Params, json_text

__all__ = ["RequestWriter", "iso_ms"]

_FORM = "application/x-www-form-urlencoded"
_JSON = "application/json"


class RequestWriter:
    """Builds every attempt of one key. The API key, its parameter and the headers that name no more than
    the key and its ``secret`` are formatted here once; ``write`` joins them with the nonce, the id, the
    user's parameters and the headers filled per request (``{timestamp}``, ``{signature}``).

    Where each field goes: the user's parameters where ``params_in`` says (the query string, a form
    body or a JSON body), each number as the input line wrote it; the key, nonce, receive window and id
    params (those the profile does not put in headers) in the query string, or with the parameters in the
    body (``fields_in = "body"``); a signature param last in the query string, over everything before it.
    A ``User-Agent`` goes with every request unless the profile's headers name one.
    """

    def __init__(
        self, base_path: str, api_key: str, request: RequestShape = RequestShape(), nonce: NonceShape = NonceShape(),
        signing: Signing | None = None, signer: Signer | None = None, secret: Secret | None = None,
        extras: Mapping[str, Secret] | None = None,
    ) -> None:
        """``extras``: the key's named extra secrets (``passphrase``, ``token``), for the header templates that name
        them (``{passphrase}``, ``{extra.token}``). Raises ValueError if the profile asks for what the key lacks
        (its signer, its secret, an extra), or if the key or a secret of it cannot go in a header (the value is
        never shown: it may be the secret)."""
        extras = extras or {}
        if (signing is None) != (signer is None):
            raise ValueError("a signing profile needs the key's signer, and only it")
        if request.names_secret and secret is None:
            raise ValueError("the profile's headers name {secret}: the key needs one")
        if request.extras_named - extras.keys():
            raise ValueError(f"the profile's headers name the key's {', '.join(sorted(request.extras_named))}: "
                             "the key needs each")
        self.method = request.method
        self._base_path = base_path.rstrip("/")
        self.path = self._base_path + request.path
        self._key = api_key
        self._json = request.params_in == "json"
        self._form = request.params_in == "form"
        self._fields_in_body = request.fields_in == "body"
        self._key_param = request.key_param
        self._nonce_param = nonce.param if nonce.style != "none" else ""
        self._window = str(nonce.recv_window_ms) if nonce.recv_window_ms else ""
        self._window_param = nonce.recv_window_param if self._window else ""
        self._id_param = request.id_param
        # The protocol fields in a query string, formatted once where they do not change: what comes
        # before the nonce, between the nonce and the id, and the id's name.
        fixed = [f"{quote(request.key_param)}={quote(api_key)}"] if request.key_param else []
        self._before_nonce = "&".join(fixed) + ("&" if fixed else "") + (
            f"{quote(self._nonce_param)}=" if self._nonce_param else "")
        window = [f"{quote(self._window_param)}={self._window}"] if self._window_param else []
        self._after_nonce = "&".join(window)
        self._id_prefix = f"{quote(self._id_param)}=" if self._id_param else ""
        # The key's own values, by the template field that names each: {key}, {secret}, {passphrase}, {extra.NAME}.
        self._own = {"key": api_key} | ({"secret": secret.reveal()} if secret is not None else {})
        for name, value in extras.items():
            self._own[f"extra.{name}"] = value.reveal()
            if name == "passphrase":
                self._own[name] = value.reveal()
        # Headers whose template names only the key's own fields are the same on every request: filled now.
        names_agent = any(name.lower() == "user-agent" for name, _ in request.headers)
        self._headers = {} if names_agent else {"User-Agent": USER_AGENT}
        self._templates: list[tuple[str, _Template]] = []  # (name, parsed template) of the headers filled per request
        for name, template in request.headers:
            named = template_fields(template)
            for field in named & self._own.keys():  # what a request adds is ASCII: only these may not fit a header
                _check_header_value(name, self._own[field])
            pieces = _parsed(template)
            if named <= self._own.keys():
                self._headers[name] = _filled(pieces, self._own)
            else:
                self._templates.append((name, pieces))
        if request.key_header:
            self._headers[request.key_header] = api_key
        if self._window and nonce.recv_window_header:
            self._headers[nonce.recv_window_header] = self._window
        self._nonce_header = nonce.header if nonce.style != "none" else ""
        self._content_type = _JSON if self._json else _FORM
        self._signer = signer
        self._signature_param = signing.param if signing is not None else ""
        self._signature_header = signing.header if signing is not None else ""
        self._stamp_is_time = nonce.is_timestamp
        self._stamp_text = iso_ms if nonce.style == "timestamp-iso" else str
        # Whether each request gets headers of its own (a nonce, a signature, a template filled per request).
        self._own_headers = bool(self._nonce_header or signer is not None or self._templates)

    def __repr__(self) -> str:
        return f"<RequestWriter {self.method} {self.path}>"

    def write(
        self, nonce: int, req_id: str, params: Params | None, method: str = "", path: str = "",
    ) -> tuple[str, str, bytes | None, dict[str, str]]:
        """(method, target, body, headers) of one attempt, to the request's own ``method`` and ``path`` if it
        names them ("": the profile's), signed as sent; the body None when there is none. ``req_id`` "": no id
        is sent (an ask of the order-status endpoint names the order in its params). ``params`` as the
        profile's check admitted them (``Endpoints``): none named as a param the profile sends itself; where
        they go as text, each a string (a boolean written ``true``/``false``), never an object, an array or null."""
        method = method or self.method
        path = self._base_path + path if path else self.path
        stamp = self._stamp_text(nonce)
        headers = self._headers
        if self._own_headers:
            headers = dict(headers)
            if self._nonce_header:
                headers[self._nonce_header] = stamp
        if self._json:
            fields = self._protocol_fields(stamp, req_id) if self._fields_in_body else {}
            if params:
                fields.update(params)
            query = "" if self._fields_in_body else self._protocol_query(stamp, req_id)
            body = json_text(fields) if fields else ""
        else:
            protocol = self._protocol_query(stamp, req_id)
            user = urlencode(params) if params else ""
            if self._form and self._fields_in_body:
                query, body = "", _joined(protocol, user)
            elif self._form:
                query, body = protocol, user
            else:
                query, body = _joined(protocol, user), ""
        if body:
            if headers is self._headers:
                headers = dict(headers)
            headers["Content-Type"] = self._content_type
        if self._signer is not None or self._templates:
            parts = SignedParts(
                method, path, query, body, stamp if self._nonce_param or self._nonce_header else "",
                stamp if self._stamp_is_time else "", self._key, self._window,
            )
            signature = self._signer.sign(parts) if self._signer is not None else ""
            if self._signature_header:
                headers[self._signature_header] = signature
            elif self._signature_param:
                query = _joined(query, f"{quote(self._signature_param)}={quote(signature)}")
            if self._templates:
                self._fill(headers, parts, signature)
        target = f"{path}?{query}" if query else path
        return method, target, body.encode() if body else None, headers

    def _fill(self, headers: dict[str, str], parts: SignedParts, signature: str) -> None:
        """Fill the headers whose templates name what changes per request, as the signature saw it."""
        values = {
            **self._own, "method": parts.method, "path": parts.path, "query": parts.query, "body": parts.body,
            "nonce": parts.nonce, "timestamp": parts.timestamp, "recv_window": parts.recv_window, "signature": signature,
        }
        for name, pieces in self._templates:
            headers[name] = _filled(pieces, values)

    def _protocol_fields(self, stamp: str, req_id: str) -> dict[str, str]:
        fields = {self._key_param: self._key} if self._key_param else {}
        if self._nonce_param:
            fields[self._nonce_param] = stamp
        if self._window_param:
            fields[self._window_param] = self._window
        if self._id_param and req_id:
            fields[self._id_param] = req_id
        return fields

    def _protocol_query(self, stamp: str, req_id: str) -> str:
        return _joined(f"{self._before_nonce}{stamp}" if self._nonce_param else self._before_nonce.rstrip("&"),
                       self._after_nonce, f"{self._id_prefix}{quote(req_id)}" if self._id_prefix and req_id else "")


def iso_ms(stamp_ms: int) -> str:
    """A millisecond timestamp as ISO-8601 UTC with its milliseconds: ``2026-11-25T06:11:05.123Z``."""
    seconds, ms = divmod(stamp_ms, 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{ms:03d}Z"


def _check_header_value(name: str, value: str) -> None:
    """Raises ValueError unless ``value`` can go in a header, never showing it: it may be the key's secret."""
    fault = header_fault(value)
    if fault:
        raise ValueError(f"header {name}: the key or its secret {fault}")


#: A header template parsed once: its pieces of literal text, each followed by the field it names (None: none).
_Template = tuple[tuple[str, str | None], ...]


def _parsed(template: str) -> _Template:
    """``template`` in pieces (``{{``/``}}`` already a brace), so a request only joins them with its values."""
    return tuple((text, name) for text, name, _, _ in Formatter().parse(template))


def _filled(pieces: _Template, values: Mapping[str, str]) -> str:
    """The template with each ``{field}`` replaced by its value (``{extra.token}`` is one field, not an attribute):
    what ``str.format_map`` does, for the names the profile's check admits."""
    return "".join(text + (values[name] if name is not None else "") for text, name in pieces)


def _joined(*parts: str) -> str:
    """Query-string parts joined with ``&``, the empty ones left out."""
    return "&".join(part for part in parts if part)
