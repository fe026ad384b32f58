"""Adapters against the live server: the default generation model's first loaded adapter
(from ListAdapters) is used, and loaded again from its directory under another name.
A server with no adapter loaded skips these (fails them with MLXGRPC_REQUIRE_LIVE=1), and so does
the check of a bad directory where LoadAdapter cannot run at all (no admin role for this caller, or
no --adapter-root: the plain default server)."""

from __future__ import annotations

import grpc
import pytest

from mlxgrpc_client import error_details, pb

from conftest import unavailable
from _support import exact


@pytest.fixture(scope="module")
def adapter(client, generator) -> pb.AdapterInfo:
    listed = client.list_adapters()
    assert listed.model == generator.name and listed.max_adapters > 0
    if not listed.adapters:
        unavailable(f"model {generator.name!r} has no adapter loaded (serve it with --adapter NAME=DIR)")
    return listed.adapters[0]


def test_model_info_lists_the_adapters(client, generator, adapter):
    info = client.model_info()
    assert adapter.name in [a.name for a in info.adapters] and info.max_adapters > 0
    assert adapter.kind in (pb.ADAPTER_KIND_LORA, pb.ADAPTER_KIND_DORA)
    assert adapter.rank > 0 and adapter.layers > 0 and adapter.bytes > 0


def test_generate_with_an_adapter_changes_the_output(client, adapter):
    base = client.generate("The quick brown fox", **exact(8)).collect()
    tuned = client.generate("The quick brown fox", adapter=adapter.name, **exact(8)).collect()
    assert tuned.finish_reason == pb.FINISH_REASON_LENGTH and len(tuned.token_ids) == 8
    assert tuned.token_ids != base.token_ids


def test_unknown_adapter_is_not_found(client):
    with pytest.raises(grpc.RpcError) as err:
        client.generate("Hi", max_tokens=2, adapter="no-such-adapter").collect()
    details = error_details(err.value)
    assert details.code == grpc.StatusCode.NOT_FOUND and details.reason == "ADAPTER_NOT_FOUND"


def test_load_use_and_unload(client, adapter):
    loaded = client.load_adapter("py-sync", adapter.source)
    assert loaded.adapter.name == "py-sync" and loaded.adapter.kind == adapter.kind
    assert loaded.adapter.rank == adapter.rank and loaded.adapter.bytes == adapter.bytes
    again = client.generate("The quick brown fox", adapter="py-sync", **exact(8)).collect()
    first = client.generate("The quick brown fox", adapter=adapter.name, **exact(8)).collect()
    assert again.token_ids == first.token_ids  # the same weights under another name
    assert client.unload_adapter("py-sync").name == "py-sync"
    assert "py-sync" not in [a.name for a in client.list_adapters().adapters]


def test_a_directory_without_an_adapter_is_invalid(client):
    with pytest.raises(grpc.RpcError) as err:
        client.load_adapter("nothing", "/nonexistent/adapter")
    details = error_details(err.value)
    # The plain default server loads nothing at run time: LoadAdapter needs the admin role (a
    # token with it, or --admin-loopback) and then --adapter-root.
    if details.code == grpc.StatusCode.PERMISSION_DENIED and details.reason == "ADMIN_ROLE_REQUIRED":
        unavailable("LoadAdapter needs the admin role here (PERMISSION_DENIED ADMIN_ROLE_REQUIRED): "
                    "no token with it, and no --admin-loopback")
    if details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "ADAPTER_ROOT_UNSET":
        unavailable("the server has no --adapter-root: LoadAdapter is FAILED_PRECONDITION ADAPTER_ROOT_UNSET")
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.field_violations] == ["path"]


async def test_async_load_use_and_unload(aclient, adapter):
    loaded = await aclient.load_adapter("py-aio", adapter.source)
    assert loaded.adapter.name == "py-aio"
    out = await aclient.generate("Hello", adapter="py-aio", **exact(4)).collect()
    assert len(out.token_ids) == 4
    assert "py-aio" in [a.name for a in (await aclient.list_adapters()).adapters]
    assert (await aclient.unload_adapter("py-aio")).name == "py-aio"
