"""Optional bearer-token authentication.

Clients send ``authorization: Bearer <token>`` metadata. The token is compared in
constant time (``hmac.compare_digest``) with every configured token; a missing or
wrong token ends the call with UNAUTHENTICATED and ErrorInfo (reason
UNAUTHENTICATED, domain mlxgrpc.v1) before the request is even parsed. The health
service stays open for probes; reflection too when asked.

Tokens come from a file (one per line; blank lines and ``#`` comments ignored) and/or
the ``MLXGRPC_AUTH_TOKENS`` environment variable (comma-separated).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Iterable, Mapping

import grpc
from grpc_reflection.v1alpha import reflection

from .handlers import HEALTH_SERVICE, is_probe, rejecting, split_method
from .status import status_of

ENV_VAR = "MLXGRPC_AUTH_TOKENS"
REFLECTION_SERVICES = (reflection.SERVICE_NAME, "grpc.reflection.v1.ServerReflection")


def load_tokens(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The configured tokens, file first, then the environment; duplicates dropped.
    A file given but holding no token is an error (auth would silently be off)."""
    tokens: list[str] = []
    if path is not None:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        from_file = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
        if not from_file:
            raise ValueError(f"the auth token file {path} holds no token")
        tokens += from_file
    value = (os.environ if env is None else env).get(ENV_VAR, "")
    tokens += [t.strip() for t in value.split(",") if t.strip()]
    for t in tokens:
        if any(c.isspace() for c in t):
            raise ValueError("auth tokens must not contain whitespace")
    return tuple(dict.fromkeys(tokens))


def bearer_token(metadata: Iterable | None) -> str | None:
    """The token of the first ``authorization: Bearer <token>`` entry, else None."""
    for item in metadata or ():
        key, value = item
        if key.lower() != "authorization" or not isinstance(value, str):
            continue
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tokens: Iterable[str], *, open_reflection: bool = False):
        self._tokens = [t.encode("utf-8") for t in tokens]
        if not self._tokens:
            raise ValueError("AuthInterceptor needs at least one token")
        self.open_services = {HEALTH_SERVICE, *(REFLECTION_SERVICES if open_reflection else ())}
        self._missing = status_of(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED",
                                  "missing bearer token: send the metadata 'authorization: Bearer <token>'")
        self._invalid = status_of(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "invalid bearer token")

    def authorized(self, token: str) -> bool:
        presented = token.encode("utf-8")
        match = False
        for expected in self._tokens:  # no early exit: the time does not tell which token
            match |= hmac.compare_digest(expected, presented)
        return match

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        if split_method(details.method)[0] in self.open_services or is_probe(details.method):
            return await continuation(details)
        token = bearer_token(details.invocation_metadata)
        if token is not None and self.authorized(token):
            return await continuation(details)
        # an unknown method is UNAUTHENTICATED too: nothing is revealed before auth
        handler = await continuation(details)
        return rejecting(handler, self._missing if token is None else self._invalid)
