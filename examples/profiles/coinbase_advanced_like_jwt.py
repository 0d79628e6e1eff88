"""The signing hook of coinbase-advanced-like.toml: an ES256 JWT per request, as Coinbase's Advanced Trade
docs build it ("Creating a JWT", as of 2026-11), with PyJWT over ``cryptography`` (``pip install 'pyjwt[crypto]'``,
pinned in requirements.txt).

The key's secret is its EC private key in PEM (the keys file's secret, as the key was downloaded); the key is
its name (``organizations/{org_id}/apiKeys/{key_id}``). The token is good for two minutes and names this one
request: its ``uri`` claim is ``METHOD HOST/path``, and the host is not among the parts a hook is given, so
``HOST`` says it (edit it for another host).
"""

from __future__ import annotations

import secrets
import time

import jwt

#: The API host the token is made for (its ``uri`` claim).
HOST = "api.coinbase.com"
#: How long a token is good for: Coinbase's docs set ``exp`` two minutes after ``nbf``.
LIFETIME_S = 120


def sign(secret: bytes, parts) -> str:
    """A fresh JWT for this request: ``sub`` and ``kid`` the key's name, ``iss`` "cdp", ``nbf``/``exp`` now and two
    minutes on, ``uri`` its method, host and path, and a random ``nonce`` header so no two tokens are alike."""
    now = int(time.time())
    claims = {"sub": parts.key, "iss": "cdp", "nbf": now, "exp": now + LIFETIME_S,
              "uri": f"{parts.method} {HOST}{parts.path}"}
    return jwt.encode(claims, secret, algorithm="ES256", headers={"kid": parts.key, "nonce": secrets.token_hex()})
