"""A throwaway CA and a certificate for 127.0.0.1, and the flags that put a server and a client on HTTPS with them."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsSetup", "tls_setup"]


@dataclass(frozen=True)
class TlsSetup:
    server_args: tuple[str, ...]  # for original_server.py
    client_args: tuple[str, ...]  # for the client
    context: ssl.SSLContext  # verifies the server (its /api/stats)


def tls_setup(folder: Path) -> TlsSetup:
    """Make the CA and the certificate in ``folder`` (trustme, imported only when HTTPS is wanted)."""
    import trustme

    ca = trustme.CA()
    server_pem, ca_pem = folder / "server.pem", folder / "ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    return TlsSetup(
        server_args=("--tls-cert", str(server_pem), "--tls-key", str(server_pem)),
        client_args=("--ca-file", str(ca_pem)),
        context=ssl.create_default_context(cafile=str(ca_pem)),
    )
