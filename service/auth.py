"""Who calls: bearer tokens, roles, and the caller's Identity on every RPC.

Invariants: a missing or unknown token (when tokens are set) and a missing admin or router role
are refused before the request is parsed; without tokens every caller has the inference role
(``anonymous_role`` may make it router), and only ``admin_loopback`` gives callers on this
machine the admin role.
"""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
from typing import Any, Callable, Iterable
from urllib.parse import unquote

import grpc
from grpc_reflection.v1alpha import reflection

from engine.tenancy import ANONYMOUS

from .bearer_tokens import TokenTable
from .calls import current_call
from .handlers import FACTORIES, HEALTH_SERVICE, Malformed, behavior_of, is_probe, rejecting, split_method
from .identity import ADMIN, INFERENCE, NOBODY, ROUTER, Identity, set_identity
from .status import ADMIN_ROLE_REQUIRED, ROUTER_ROLE_REQUIRED, status_of

REFLECTION_SERVICES = (reflection.SERVICE_NAME, "grpc.reflection.v1.ServerReflection")
ADMIN_METHODS = frozenset({
    "/mlxgrpc.v1.InferenceService/LoadAdapter",
    "/mlxgrpc.v1.InferenceService/UnloadAdapter",
    "/mlxgrpc.v1.InferenceService/LoadModel",
    "/mlxgrpc.v1.InferenceService/UnloadModel",
})
# A gateway's methods (the admin role may call them too).
ROUTER_METHODS = frozenset({
    "/vllm.grpc.engine.VllmEngine/SubscribeKvEvents",  # every tenant's token ids
    "/vllm.grpc.engine.VllmEngine/FlushCache",  # every tenant's prefixes
})


def needed_role(method: str) -> str | None:
    """The role ``method`` needs beyond the inference one (None: none)."""
    return ADMIN if method in ADMIN_METHODS else ROUTER if method in ROUTER_METHODS else None


def holds(identity: Identity, role: str | None) -> bool:
    return role is None or (identity.admin if role == ADMIN else identity.router)


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


def is_loopback_peer(peer: str) -> bool:
    """Whether a grpc peer string (ipv4, ipv6, URI-escaped, unix) is a caller on this machine."""
    scheme, _, rest = unquote(peer or "").partition(":")
    if scheme in ("unix", "unix-abstract"):
        return True
    if scheme not in ("ipv4", "ipv6"):
        return False
    return _loopback_ip(rest.rpartition(":")[0].strip("[]"))


def is_loopback_host(host: str) -> bool:
    """Whether listening on ``host`` (as ``--host`` takes it) reaches only this machine."""
    host = host.strip()
    if host.startswith(("unix:", "unix-abstract:")) or host.lower() == "localhost":
        return True
    return _loopback_ip(host.strip("[]"))


def _loopback_ip(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


class _Unparsed:
    """An admin method's request bytes, parsed only once the caller may call it."""

    def __init__(self, data: bytes):
        self.data = data


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Without tokens: every caller holds ``anonymous_role``, and with ``admin_loopback`` callers
    on this machine hold the admin role (behind a same-host proxy or sidecar every remote caller
    would). With tokens both are ignored."""

    def __init__(self, table: TokenTable = TokenTable(), *, open_reflection: bool = False,
                 admin_loopback: bool = False, anonymous_role: str = INFERENCE):
        self.table = table
        self.admin_loopback = admin_loopback and not table
        self.anonymous = Identity(ANONYMOUS, anonymous_role)
        self.open_services = {HEALTH_SERVICE, *(REFLECTION_SERVICES if open_reflection else ())}
        self._missing = status_of(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED",
                                  "missing bearer token: send the metadata 'authorization: Bearer <token>'")
        self._invalid = status_of(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "invalid bearer token")
        how = ("a token" if table else
               "a token (this server has none: give it a tokens file, or --admin-loopback for callers on this "
               "machine)")
        self._denied = {
            ADMIN: status_of(grpc.StatusCode.PERMISSION_DENIED, ADMIN_ROLE_REQUIRED,
                             f"this method needs {how} with the admin role"),
            ROUTER: status_of(grpc.StatusCode.PERMISSION_DENIED, ROUTER_ROLE_REQUIRED,
                              f"this method serves every tenant's data: it needs {how} with the router or "
                              "admin role")}

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        method = details.method
        role = needed_role(method)
        if not self.table:
            if handler is not None and role is not None and not self.admin_loopback and not holds(self.anonymous, role):
                return self._identified(rejecting(handler, self._denied[role]), method, self.anonymous)
            return self._identified(handler, method, None) if handler else None
        token = bearer_token(details.invocation_metadata)
        identity = self.table.identify(token) if token is not None else None
        if identity is None:
            if split_method(method)[0] in self.open_services or is_probe(method):
                return self._identified(handler, method, NOBODY) if handler else None
            # an unknown method is UNAUTHENTICATED too: nothing is revealed before auth
            return rejecting(handler, self._missing if token is None else self._invalid)
        if handler is not None and role is not None and not holds(identity, role):
            handler = rejecting(handler, self._denied[role])
        return self._identified(handler, method, identity) if handler else None

    def _identified(self, handler: grpc.RpcMethodHandler, method: str,
                    known: Identity | None) -> grpc.RpcMethodHandler:
        """``handler`` run with the caller's identity set (``known`` None: the peer's, on a server
        without tokens); a role-gated method's request is parsed only after the role is checked."""
        inner = behavior_of(handler)
        role = needed_role(method)
        deferred = known is None and role is not None and not handler.request_streaming
        parse = handler.request_deserializer

        def who(context: grpc.aio.ServicerContext) -> Identity:
            identity = known
            if identity is None:
                peer = ""
                with contextlib.suppress(Exception):
                    peer = context.peer() or ""
                local_admin = self.admin_loopback and is_loopback_peer(peer)
                identity = Identity(ANONYMOUS, ADMIN) if local_admin else self.anonymous
            set_identity(identity)
            call = current_call()
            if call is not None:
                call.tenant = identity.tenant.name
            return identity

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            """The request, once the caller is known to hold the method's role."""
            identity = who(context)
            if deferred:
                if role is not None and not holds(identity, role):
                    await context.abort_with_status(self._denied[role])
                request = await self._parsed(parse, request, method, context)
            return request

        if inspect.isasyncgenfunction(inner):
            async def streaming(request: Any, context: grpc.aio.ServicerContext):
                request = await checked(request, context)
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        yield response
            behavior: Callable[..., Any] = streaming
        else:
            async def unary(request: Any, context: grpc.aio.ServicerContext):
                request = await checked(request, context)
                result = inner(request, context)
                return await result if inspect.isawaitable(result) else result
            behavior = unary

        factory = FACTORIES[(handler.request_streaming, handler.response_streaming)]
        return factory(behavior, request_deserializer=_Unparsed if deferred else parse,
                       response_serializer=handler.response_serializer)

    @staticmethod
    async def _parsed(parse: Callable | None, request: Any, method: str, context: grpc.aio.ServicerContext):
        if not isinstance(request, _Unparsed) or parse is None:
            return request
        try:
            parsed = parse(request.data)
        except Exception as exc:  # noqa: BLE001 - the caller's bad bytes
            await context.abort_with_status(Malformed(split_method(method)[1] + "Request", exc).status())
        if isinstance(parsed, Malformed):  # refused on its wire bytes (wire_budget)
            await context.abort_with_status(parsed.status())
        call = current_call()
        if call is not None:
            call.model = str(getattr(parsed, "model", "") or "")
        return parsed
