"""Fixtures: the live server's address (tests skip when MLXGRPC_ADDRESS is unset) and clients."""

from __future__ import annotations

import os

import pytest
import pytest_asyncio

from mlxgrpc_client import aio, connect

@pytest.fixture(scope="session")
def address() -> str:
    address = os.environ.get("MLXGRPC_ADDRESS")
    if not address:
        pytest.skip("MLXGRPC_ADDRESS is not set (no live server to test against)")
    return address


@pytest.fixture(scope="session")
def client(address):
    with connect(address, timeout=60) as c:
        yield c


@pytest_asyncio.fixture(scope="session")
async def aclient(address):
    async with aio.connect(address, timeout=60) as c:
        yield c
