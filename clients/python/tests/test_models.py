"""Models loaded and unloaded at run time against a live server: the fixture's "llama"
directory, loaded again from the server's --model-root under another name, used, listed and
unloaded (the fixture server serves "llama" and, in CI, has its models directory as the
root). Without a "llama" model these skip, also with MLXGRPC_REQUIRE_LIVE=1: the default
server never has one. Where LoadModel cannot run at all (no admin role for this caller, or
no --model-root) they skip too, and fail with MLXGRPC_REQUIRE_LIVE=1."""

from __future__ import annotations

import grpc
import pytest

from mlxgrpc_client import error_details, pb

from conftest import unavailable
from _support import exact


@pytest.fixture(scope="module")
def llama(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "llama"]
    if not found:  # a plain skip: the default server never has this model
        pytest.skip("the server has no model named 'llama' (the fixture server serves one; the default never does)")
    return found[0]


def loading_unavailable(err: grpc.RpcError) -> None:
    """Skips (or fails, with MLXGRPC_REQUIRE_LIVE=1) where this server loads nothing at run time."""
    details = error_details(err)
    if details.code == grpc.StatusCode.PERMISSION_DENIED and details.reason == "ADMIN_ROLE_REQUIRED":
        unavailable("LoadModel needs the admin role here (PERMISSION_DENIED ADMIN_ROLE_REQUIRED): "
                    "no token with it, and no --admin-loopback")
    if details.code == grpc.StatusCode.FAILED_PRECONDITION and details.reason == "MODEL_ROOT_UNSET":
        unavailable("the server has no --model-root: LoadModel is FAILED_PRECONDITION MODEL_ROOT_UNSET")


def status_of(statuses: list[pb.ModelStatus], name: str) -> pb.ModelStatus | None:
    return next((s for s in statuses if s.name == name), None)


def check_steps(steps: list[pb.LoadModelResponse], name: str) -> None:
    """The load's steps came in order and ended SERVING with the model."""
    stages = [s.stage for s in steps]
    assert stages and stages == sorted(stages), stages
    assert stages[-1] == pb.LOAD_STAGE_SERVING and stages.count(pb.LOAD_STAGE_SERVING) == 1, stages
    assert steps[-1].model.name == name
    elapsed = [s.elapsed_seconds for s in steps]
    assert elapsed == sorted(elapsed)


def check_unloaded(client, name: str) -> None:
    """Not ready any more, and a Generate naming it is NOT_FOUND."""
    gone = status_of(client.model_statuses(), name)
    assert gone is None or gone.state != pb.MODEL_STATE_READY, gone
    assert name not in [m.name for m in client.list_models()]
    with pytest.raises(grpc.RpcError) as err:
        client.generate("Hello", model=name, max_tokens=4).collect()
    assert error_details(err.value).code == grpc.StatusCode.NOT_FOUND


def test_load_generate_list_and_unload(client, llama):
    steps: list[pb.LoadModelResponse] = []
    try:
        info = client.load_model("py-llama", "llama", on_progress=steps.append)
    except grpc.RpcError as err:
        loading_unavailable(err)
        raise
    try:
        assert isinstance(info, pb.ModelInfo) and info.name == "py-llama"
        assert info.kind == pb.MODEL_KIND_GENERATION and info.vocab_size == llama.vocab_size
        check_steps(steps, "py-llama")

        out = client.generate("Hello", model="py-llama", **exact(4)).collect()
        assert out.model == "py-llama" and len(out.token_ids) == 4

        status = status_of(client.model_statuses(), "py-llama")
        assert status is not None and status.state == pb.MODEL_STATE_READY, status
        assert status.kind == pb.MODEL_KIND_GENERATION and not status.on_demand
        assert "py-llama" in [m.name for m in client.list_models()]
    finally:
        unloaded = client.unload_model("py-llama")
    assert unloaded.name == "py-llama"
    check_unloaded(client, "py-llama")


def test_a_source_outside_the_root_is_invalid(client, llama):
    with pytest.raises(grpc.RpcError) as err:
        client.load_model("py-escape", "../escape")
    loading_unavailable(err.value)
    details = error_details(err.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert [v.field for v in details.field_violations] == ["source"]
    assert status_of(client.model_statuses(), "py-escape") is None


def test_unloading_an_unknown_model_is_not_found(client, llama):
    with pytest.raises(grpc.RpcError) as err:
        client.unload_model("py-no-such-model")
    loading_unavailable(err.value)
    assert error_details(err.value).code == grpc.StatusCode.NOT_FOUND


async def test_async_load_generate_and_unload(aclient, client, llama):
    heard = []

    async def on_progress(step: pb.LoadModelResponse) -> None:
        heard.append(step)

    try:
        info = await aclient.load_model("py-llama-aio", "llama", keep_alive=-1, on_progress=on_progress)
    except grpc.RpcError as err:
        loading_unavailable(err)
        raise
    try:
        assert info.name == "py-llama-aio"
        check_steps(heard, "py-llama-aio")
        out = await aclient.generate("Hello", model="py-llama-aio", **exact(4)).collect()
        assert len(out.token_ids) == 4
        status = status_of(await aclient.model_statuses(), "py-llama-aio")
        assert status is not None and status.state == pb.MODEL_STATE_READY, status
    finally:
        unloaded = await aclient.unload_model("py-llama-aio", cancel_requests=True)
    assert unloaded.name == "py-llama-aio"
    check_unloaded(client, "py-llama-aio")
