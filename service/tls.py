"""TLS and mutual TLS server credentials from PEM files."""

from __future__ import annotations

import os
from pathlib import Path

import grpc


def server_credentials(cert_file: str | os.PathLike, key_file: str | os.PathLike,
                       client_ca_file: str | os.PathLike | None = None) -> grpc.ServerCredentials:
    """Credentials for ``add_secure_port``. With ``client_ca_file`` the server demands a
    client certificate signed by that CA (mutual TLS) and refuses the handshake without one."""
    cert = Path(cert_file).read_bytes()
    key = Path(key_file).read_bytes()
    client_ca = Path(client_ca_file).read_bytes() if client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)
