"""One request's method, target, body and headers, as a profile says to build them: compiled once per
key and worker, so each send only fills in its nonce, its id and its parameters."""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

from ..profile import NonceShape, RequestShape, SignedParts, Signer, Signing

__all__ = ["RequestWriter"]

_FORM = "application/x-www-form-urlencoded"
_JSON = "application/json"


class RequestWriter:
    """Builds every attempt of one key. The API key, its parameter and the static headers are formatted
    here once; ``write`` joins them with the nonce, the id and the user's parameters.

    Where each field goes: the key, nonce, receive window and id (unless the profile puts them in
    headers) travel with the user's parameters where ``params_in`` says: the query string, a form body
    or a JSON body; a signature param goes last in the query string, over everything before it.
    """

    def __init__(
        self, base_path: str, api_key: str, request: RequestShape = RequestShape(), nonce: NonceShape = NonceShape(),
        signing: Signing | None = None, signer: Signer | None = None,
    ) -> None:
        if (signing is None) != (signer is None):
            raise ValueError("a signing profile needs the key's signer, and only it")
        self.method = request.method
        self.path = base_path.rstrip("/") + request.path
        self._key = api_key
        self._json = request.params_in == "json"
        self._form = request.params_in == "form"
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
        self._headers = dict(request.headers)
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

    def __repr__(self) -> str:
        return f"<RequestWriter {self.method} {self.path}>"

    def write(self, nonce: int, req_id: str, params: dict[str, str] | None) -> tuple[str, str, bytes | None, dict[str, str]]:
        """(method, target, body, headers) of one attempt; the body None when there is none."""
        stamp = str(nonce)
        headers = self._headers
        if self._nonce_header or self._signer is not None:
            headers = dict(headers)
            if self._nonce_header:
                headers[self._nonce_header] = stamp
        if self._json:
            fields = self._protocol_fields(stamp, req_id)
            if params:
                fields.update(params)
            query, body = "", json.dumps(fields, separators=(",", ":"))
        else:
            query = self._protocol_query(stamp, req_id)
            if params:
                query = f"{query}&{urlencode(params)}" if query else urlencode(params)
            if self._form:
                query, body = "", query
            else:
                body = ""
        if body:
            if headers is self._headers:
                headers = dict(headers)
            headers["Content-Type"] = self._content_type
        if self._signer is not None:
            signature = self._signer.sign(SignedParts(
                self.method, self.path, query, body, stamp if self._nonce_param or self._nonce_header else "",
                stamp if self._stamp_is_time else "", self._key, self._window,
            ))
            if self._signature_header:
                headers[self._signature_header] = signature
            else:
                signed = f"{quote(self._signature_param)}={quote(signature)}"
                query = f"{query}&{signed}" if query else signed
        target = f"{self.path}?{query}" if query else self.path
        return self.method, target, body.encode() if body else None, headers

    def _protocol_fields(self, stamp: str, req_id: str) -> dict[str, str]:
        fields = {self._key_param: self._key} if self._key_param else {}
        if self._nonce_param:
            fields[self._nonce_param] = stamp
        if self._window_param:
            fields[self._window_param] = self._window
        if self._id_param:
            fields[self._id_param] = req_id
        return fields

    def _protocol_query(self, stamp: str, req_id: str) -> str:
        parts = [f"{self._before_nonce}{stamp}" if self._nonce_param else self._before_nonce.rstrip("&")]
        if self._after_nonce:
            parts.append(self._after_nonce)
        if self._id_prefix:
            parts.append(f"{self._id_prefix}{quote(req_id)}")
        return "&".join(part for part in parts if part)
