"""Fixtures: the live server (``MLXGRPC_ADDRESS``), clients, and the models it serves,
discovered with ListModels so the tests run against any server: the default one
(``bash scripts/serve.sh``) or the test fixture.

Without ``MLXGRPC_ADDRESS`` the live tests are skipped (pytest ``-ra`` lists why);
with ``MLXGRPC_REQUIRE_LIVE=1`` (CI) a test that could not run fails instead.
``MLXGRPC_TOKEN``, when set, is sent on every call (a server with a tokens file; the
adapter tests need the admin role), and ``MLXGRPC_TENANT`` names its tenant (default
empty: the one tenant of a server without tokens).
"""

from __future__ import annotations

import os

import pytest
import pytest_asyncio

from mlxgrpc_client import aio, connect, pb


def unavailable(reason: str):
    """Skips the test, or fails it when MLXGRPC_REQUIRE_LIVE is set."""
    if os.environ.get("MLXGRPC_REQUIRE_LIVE") == "1":
        pytest.fail(f"{reason} (MLXGRPC_REQUIRE_LIVE=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def address() -> str:
    address = os.environ.get("MLXGRPC_ADDRESS")
    if not address:
        unavailable("MLXGRPC_ADDRESS is not set (no live server to test against)")
    return address


@pytest.fixture(scope="session")
def token() -> str | None:
    return os.environ.get("MLXGRPC_TOKEN") or None


@pytest.fixture(scope="session")
def tenant() -> str:
    """The tenant this caller's requests count under (GetLoad's ``tenants``)."""
    return os.environ.get("MLXGRPC_TENANT", "")


@pytest.fixture(scope="session")
def client(address, token):
    with connect(address, token=token, timeout=120) as c:
        yield c


@pytest_asyncio.fixture(scope="session")
async def aclient(address, token):
    async with aio.connect(address, token=token, timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def models(client) -> list[pb.ModelInfo]:
    return client.list_models()


def _first(models: list[pb.ModelInfo], kind: int, what: str) -> pb.ModelInfo:
    found = [m for m in models if m.kind == kind]
    if not found:
        unavailable(f"the server has no {what} model")
    return found[0]


@pytest.fixture(scope="session")
def generator(models) -> pb.ModelInfo:
    """The default generation model (ListModels lists it first)."""
    return _first(models, pb.MODEL_KIND_GENERATION, "generation")


@pytest.fixture(scope="session")
def embedder(models) -> pb.ModelInfo:
    """The first model that embeds (a reranker is an embedding-kind model that does not)."""
    return _first([m for m in models if m.capabilities.embeddings], pb.MODEL_KIND_EMBEDDING, "embedding")
