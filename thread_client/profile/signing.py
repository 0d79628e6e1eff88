"""Signing a request: an HMAC over a template of the request's parts, or a user's hook for what a template
cannot say; the secret is held in a ``Secret`` that never shows itself."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .model import Signing

__all__ = ["HookError", "Secret", "SignedParts", "Signer", "load_hook"]

_DIGESTS = {"hmac-sha256": hashlib.sha256, "hmac-sha512": hashlib.sha512}


class Secret:
    """A key's signing secret: its value only through ``reveal()``; printed, logged or repr'd it is ``***``,
    so no format string, traceback or config dump can leak it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)


@dataclass(frozen=True, slots=True)
class SignedParts:
    """What a signature may cover, as sent (the query without the signature, the body as bytes leave)."""

    method: str
    path: str
    query: str
    body: str
    nonce: str
    timestamp: str
    key: str
    recv_window: str

    @property
    def target(self) -> str:
        """The request target as sent, the signature param aside: the path, then ``?`` and the query where there is
        one (OKX signs ``/api/v5/trade/order?instId=BTC-USDT&clOrdId=o1``, and a bare ``/api/v5/trade/order``)."""
        return f"{self.path}?{self.query}" if self.query else self.path


#: A user's signing hook: the secret's bytes (decoded as ``secret_encoding`` says) and the request's parts
#: in; the signature's text out, as it is to be sent.
Hook = Callable[[bytes, SignedParts], str]


class HookError(ValueError):
    """Raised when a signing hook named ``module:function`` cannot be found or is not callable."""


def load_hook(spec: str, folder: str = "") -> Hook:
    """The callable ``spec`` names: ``module:function``, the module importable, or a ``module.py`` in
    ``folder`` (the profile's own folder, so a profile and its hook travel together)."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise HookError(f"hook must look like module:function, got {spec!r}")
    candidate = Path(folder, *module_name.split(".")).with_suffix(".py") if folder else None
    try:
        if candidate is not None and candidate.is_file():
            module = sys.modules.get(f"thread_client_hook.{module_name}")
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(f"thread_client_hook.{module_name}", candidate)
                if loader_spec is None or loader_spec.loader is None:
                    raise ImportError(f"no loader for {candidate}")
                module = importlib.util.module_from_spec(loader_spec)
                loader_spec.loader.exec_module(module)
                sys.modules[loader_spec.name] = module
        else:
            module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: whatever it raises on import is a profile error
        raise HookError(f"hook {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise HookError(f"hook {spec!r}: {module_name} has no function {function_name}")
    return function


class Signer:
    """Signs requests for one key. Built once per worker; ``sign`` is called once per attempt."""

    def __init__(self, signing: "Signing", secret: Secret) -> None:
        raw = secret.reveal()
        if signing.secret_encoding == "base64":
            try:
                self._secret = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError("the key's secret is not base64, as the profile's secret_encoding says") from exc
        else:
            self._secret = raw.encode()
        self._hook = load_hook(signing.hook, signing.hook_dir) if signing.hook else None
        self._message = signing.message
        self._digest = _DIGESTS[signing.algorithm]
        self._base64 = signing.output == "base64"

    def __repr__(self) -> str:
        return f"<Signer {'hook' if self._hook else self._digest().name}>"

    def sign(self, parts: SignedParts) -> str:
        """The signature of ``parts``. Raises TypeError if a hook gives anything but printable ASCII text
        (what a query or a header can carry), and whatever the hook raises."""
        if self._hook is not None:
            signature = self._hook(self._secret, parts)
            if not isinstance(signature, str) or not signature.isascii() or not signature.isprintable():
                raise TypeError(f"the signing hook gave a {type(signature).__name__}, not printable ASCII text")
            return signature
        message = self._message.format(
            method=parts.method, path=parts.path, query=parts.query, target=parts.target, body=parts.body,
            nonce=parts.nonce, timestamp=parts.timestamp, key=parts.key, recv_window=parts.recv_window,
        )
        mac = hmac.new(self._secret, message.encode(), self._digest).digest()
        return base64.b64encode(mac).decode() if self._base64 else mac.hex()
