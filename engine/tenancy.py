"""Who a request belongs to: a tenant's name, weight, limits (0: none), priority cap and prefix-cache
namespace.

Invariant: request ids, prefix-cache hits and fair shares are scoped by tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PRIORITY = 100  # requests carry a priority in [-MAX_PRIORITY, MAX_PRIORITY]; higher first


@dataclass(frozen=True)
class Tenant:
    name: str = ""  # "" is the anonymous tenant of a server without tokens
    weight: float = 1.0  # share of the engine against other tenants with work waiting
    max_in_flight: int = 0  # requests tokenizing, queued or running at once, per model
    max_queued: int = 0  # requests waiting for admission, per model
    tokens_per_minute: int = 0  # prompt plus generated tokens over the last 60 s, per model
    cache_namespace: str = ""  # prefix-cache namespace; "" is the tenant's own (its name)
    max_streams: int | None = None  # streaming calls open at once; None: the server's default (a flag)
    max_priority: int = MAX_PRIORITY  # the highest priority its requests may carry
    max_keep_alive_s: float | None = None  # the longest keep-alive its requests may ask; None: the server's

    @property
    def namespace(self) -> str:
        """The prefix-cache namespace: a hit never crosses namespaces."""
        return self.cache_namespace or self.name


ANONYMOUS = Tenant()
