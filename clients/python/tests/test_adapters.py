"""Adapters against the live server: it starts with adapter "tone" on "llama";
MLXGRPC_ADAPTER_DIR (set by the CI script) is another adapter directory on the server."""

from __future__ import annotations

import os

import grpc
import pytest

from mlxgrpc_client import error_details, pb


@pytest.fixture(scope="module")
def adapter_dir() -> str:
    path = os.environ.get("MLXGRPC_ADAPTER_DIR")
    if not path:
        pytest.skip("MLXGRPC_ADAPTER_DIR is not set")
    return path


def test_generate_with_an_adapter_changes_the_output(client):
    listed = client.list_adapters()
    assert listed.model == "llama" and "tone" in [a.name for a in listed.adapters]
    base = client.generate("The quick brown fox", max_tokens=8).collect()
    tuned = client.generate("The quick brown fox", max_tokens=8, adapter="tone").collect()
    assert tuned.finish_reason == pb.FINISH_REASON_LENGTH and len(tuned.token_ids) == 8
    assert tuned.token_ids != base.token_ids


def test_unknown_adapter_is_not_found(client):
    with pytest.raises(grpc.RpcError) as err:
        client.generate("Hi", max_tokens=2, adapter="no-such-adapter").collect()
    details = error_details(err.value)
    assert details.code == grpc.StatusCode.NOT_FOUND and details.reason == "ADAPTER_NOT_FOUND"


def test_load_use_and_unload(client, adapter_dir):
    loaded = client.load_adapter("py-sync", adapter_dir)
    assert loaded.adapter.name == "py-sync" and loaded.adapter.kind == pb.ADAPTER_KIND_LORA
    assert loaded.adapter.rank > 0 and loaded.adapter.bytes > 0
    out = client.generate("Hello", max_tokens=4, adapter="py-sync").collect()
    assert len(out.token_ids) == 4
    assert client.unload_adapter("py-sync").name == "py-sync"
    assert "py-sync" not in [a.name for a in client.list_adapters().adapters]


def test_a_directory_without_an_adapter_is_invalid(client):
    with pytest.raises(grpc.RpcError) as err:
        client.load_adapter("nothing", "/nonexistent/adapter")
    details = error_details(err.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.field_violations] == ["path"]


async def test_async_load_use_and_unload(aclient, adapter_dir):
    loaded = await aclient.load_adapter("py-aio", adapter_dir)
    assert loaded.adapter.name == "py-aio"
    out = await aclient.generate("Hello", max_tokens=4, adapter="py-aio").collect()
    assert len(out.token_ids) == 4
    assert "py-aio" in [a.name for a in (await aclient.list_adapters()).adapters]
    assert (await aclient.unload_adapter("py-aio")).name == "py-aio"
