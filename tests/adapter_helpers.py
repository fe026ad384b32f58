"""Helpers for the adapter tests: bringing a model's adapters to a known set."""

from __future__ import annotations

from pathlib import Path

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb


async def listed(stub, model: str) -> dict[str, object]:
    """Name -> AdapterInfo of the model's loaded adapters."""
    reply = await stub.ListAdapters(pb.ListAdaptersRequest(model=model))
    return {a.name: a for a in reply.adapters}


async def keep_only(stub, model: str, names: list[str], dirs: dict[str, Path]) -> None:
    """Unloads the model's other adapters, then loads the missing ones of ``names``."""
    current = await listed(stub, model)
    for name in current:
        if name not in names:
            await stub.UnloadAdapter(pb.UnloadAdapterRequest(model=model, name=name))
    for name in names:
        if name not in current:
            await stub.LoadAdapter(pb.LoadAdapterRequest(model=model, name=name, path=str(dirs[name])))
