"""The caller of the RPC being served: its tenant and whether it holds the admin role.

Invariant: a call no interceptor identified is the anonymous tenant, without the admin role.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from engine.tenancy import ANONYMOUS, Tenant


@dataclass(frozen=True)
class Identity:
    tenant: Tenant = ANONYMOUS
    admin: bool = False


NOBODY = Identity()
_CURRENT: contextvars.ContextVar[Identity] = contextvars.ContextVar("mlxgrpc_identity", default=NOBODY)


def current_identity() -> Identity:
    return _CURRENT.get()


def set_identity(identity: Identity) -> contextvars.Token:
    return _CURRENT.set(identity)
