"""The caller of the RPC being served: its tenant and its role (inference, router or admin).

Invariants: a call no interceptor identified is the anonymous tenant with the inference role;
the admin role holds every right of the router role, and both hold the inference role's.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from engine.tenancy import ANONYMOUS, Tenant

INFERENCE = "inference"  # generate, embed, tokenize; its own tenant's figures only
ROUTER = "router"  # a gateway's credential: KV events (every tenant's token ids), global loads, FlushCache
ADMIN = "admin"  # adapters, file paths, everything the router role may do
ROLES = (INFERENCE, ROUTER, ADMIN)


@dataclass(frozen=True)
class Identity:
    tenant: Tenant = ANONYMOUS
    role: str = INFERENCE

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")

    @property
    def admin(self) -> bool:
        """Adapters and server paths."""
        return self.role == ADMIN

    @property
    def router(self) -> bool:
        """KV events, FlushCache and every tenant's load figures (the admin role has them too)."""
        return self.role in (ROUTER, ADMIN)


NOBODY = Identity()
_CURRENT: contextvars.ContextVar[Identity] = contextvars.ContextVar("mlxgrpc_identity", default=NOBODY)


def current_identity() -> Identity:
    return _CURRENT.get()


def set_identity(identity: Identity) -> contextvars.Token:
    return _CURRENT.set(identity)
