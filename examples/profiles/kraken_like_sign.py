"""The signing hook of kraken-like.toml: what its ``[sign]`` table's ``hook`` names.

A hook is any ``function(secret: bytes, parts) -> str``: ``secret`` is the key's secret decoded as the
profile's ``secret_encoding`` says, ``parts`` the request as it leaves (``method``, ``path``, ``query``,
``body``, ``nonce``, ``timestamp``, ``key``, ``recv_window``, all text), and the result is sent as the
signature. The daemon finds this file next to the profile; a module on the Python path works too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def sign(secret: bytes, parts) -> str:
    """base64(HMAC-SHA512(secret, path + SHA256(nonce + body))), as Kraken's docs define API-Sign."""
    digest = hashlib.sha256((parts.nonce + parts.body).encode()).digest()
    return base64.b64encode(hmac.new(secret, parts.path.encode() + digest, hashlib.sha512).digest()).decode()
