"""The tokens file (``TOKEN [TENANT [ROLE [key=value ...]]]`` per line; docs/OPERATIONS.md) and its parser.

Invariant: the table is keyed by sha256(token), so look-up time never depends on a configured
token; a tenant on several lines is one tenant, and no key takes two values.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from engine.tenancy import MAX_PRIORITY, Tenant

from .identity import ROLES, Identity

ENV_VAR = "MLXGRPC_AUTH_TOKENS"
DEFAULT_TENANT = "default"
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_INT_KEYS = ("max_in_flight", "max_queued", "tokens_per_minute", "max_streams")
KEYS = ("weight", *_INT_KEYS, "max_priority", "cache_namespace", "max_keep_alive_s")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class TokenTable:
    """sha256(token) -> Identity. Empty: the server has no tokens (no authentication)."""

    identities: Mapping[bytes, Identity] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.identities)

    def __len__(self) -> int:
        return len(self.identities)

    def identify(self, token: str) -> Identity | None:
        """The identity of ``token``, None when it is no configured token."""
        return self.identities.get(digest(token))

    def tenants(self) -> dict[str, Tenant]:
        return {i.tenant.name: i.tenant for i in self.identities.values()}

    @classmethod
    def of_tokens(cls, tokens) -> TokenTable:
        """Bare tokens, each tenant ``default`` with the inference role."""
        return parse_lines([(0, t) for t in tokens], "tokens")


def load_table(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> TokenTable:
    """The tokens of the file at ``path`` (if any), then of ``$MLXGRPC_AUTH_TOKENS``; ValueError
    names the line of any mistake (a given file with no token is one)."""

    lines: list[tuple[int, str]] = []
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
                 if line.strip() and not line.strip().startswith("#")]
        if not lines:
            raise ValueError(f"the auth token file {path} holds no token")
    value = (os.environ if env is None else env).get(ENV_VAR, "")
    from_env = [t.strip() for t in value.split(",") if t.strip()]
    if any(any(c.isspace() for c in t) for t in from_env):
        raise ValueError(f"${ENV_VAR}: auth tokens must not contain whitespace")
    return parse_lines(lines + [(0, t) for t in from_env], str(path))


@dataclass
class _Line:
    where: str
    token: str
    tenant: str
    role: str
    settings: dict[str, object]


def parse_lines(lines: list[tuple[int, str]], source: str) -> TokenTable:
    """``(line number, text)`` pairs (number 0: from the environment) -> the table."""
    parsed = [_parse(f"{source}:{n}" if n else f"${ENV_VAR}", text) for n, text in lines]
    settings: dict[str, dict[str, tuple[Any, str]]] = {}  # Tenant fields of several types
    for line in parsed:
        mine = settings.setdefault(line.tenant, {})
        for key, value in line.settings.items():
            if key in mine and mine[key][0] != value:
                raise ValueError(f"{line.where}: tenant {line.tenant!r} already has {key}={mine[key][0]} "
                                 f"({mine[key][1]}), not {key}={value}")
            mine.setdefault(key, (value, line.where))
    tenants = {name: Tenant(name=name, **{k: v for k, (v, _) in given.items()})
               for name, given in settings.items()}
    identities: dict[bytes, Identity] = {}
    seen: dict[bytes, str] = {}
    for line in parsed:
        hashed, identity = digest(line.token), Identity(tenants[line.tenant], line.role)
        if hashed in identities and identities[hashed] != identity:
            raise ValueError(f"{line.where}: this token is also on {seen[hashed]} with another tenant or role")
        identities[hashed] = identity
        seen.setdefault(hashed, line.where)
    return TokenTable(identities)


def _parse(where: str, text: str) -> _Line:
    parts = text.split()
    token, rest = parts[0], parts[1:]
    positional: list[str] = []
    while rest and "=" not in rest[0] and len(positional) < 2:
        positional.append(rest.pop(0))
    tenant = positional[0] if positional else DEFAULT_TENANT
    role = positional[1] if len(positional) > 1 else ROLES[0]
    if not NAME.fullmatch(tenant):
        raise ValueError(f"{where}: tenant {tenant[:80]!r} is not a name of 1-64 characters from [A-Za-z0-9._-]")
    if role not in ROLES:
        raise ValueError(f"{where}: role {role[:80]!r} is none of {', '.join(ROLES)}")
    if rest and len(positional) < 2:
        raise ValueError(f"{where}: settings come after TOKEN TENANT ROLE")
    settings: dict[str, object] = {}
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{where}: expected key=value, got {item[:80]!r}")
        if key in settings:
            raise ValueError(f"{where}: {key} is given twice")
        settings[key] = _value(where, key, value)
    return _Line(where, token, tenant, role, settings)


def _value(where: str, key: str, value: str) -> object:
    if key == "weight":
        try:
            weight = float(value)
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"{where}: weight must be a number > 0, got {value[:80]!r}")
        return weight
    if key in _INT_KEYS:
        if not value.isdigit() or not value.isascii():
            raise ValueError(f"{where}: {key} must be an integer >= 0, got {value[:80]!r}")
        return int(value)
    if key == "max_priority":
        if not value.isdigit() or not value.isascii() or int(value) > MAX_PRIORITY:
            raise ValueError(f"{where}: max_priority must be an integer from 0 to {MAX_PRIORITY}, got {value[:80]!r}")
        return int(value)
    if key == "max_keep_alive_s":
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"{where}: max_keep_alive_s must be a number of seconds >= 0, got {value[:80]!r}")
        return seconds
    if key == "cache_namespace":
        if not NAME.fullmatch(value):
            raise ValueError(f"{where}: cache_namespace {value[:80]!r} is not a name of 1-64 characters "
                             "from [A-Za-z0-9._-]")
        return value
    raise ValueError(f"{where}: unknown setting {key[:80]!r} (known: {', '.join(KEYS)})")

