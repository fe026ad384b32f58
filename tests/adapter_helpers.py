"""Helpers for the adapter tests: a model's adapters brought to a known set, and
requests held running until released."""

from __future__ import annotations

import asyncio
from pathlib import Path

from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from tests.helpers import request


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


class Held:
    """A long Generate with an adapter, running until ``release`` cancels it."""

    def __init__(self, stub, adapter: str):
        self.stub, self.request_id, self.tokens = stub, f"held-{adapter}-{id(self)}", 0
        self.task = asyncio.create_task(self._run(request("Hello world", model="llama", adapter=adapter,
                                                          max_tokens=3000, request_id=self.request_id)))

    async def _run(self, req):
        async for msg in self.stub.Generate(req):
            self.tokens += len(msg.delta.token_ids)
            if msg.HasField("finished"):
                return msg.finished

    async def running(self, more: int = 1) -> None:
        """Returns once ``more`` further tokens have arrived."""
        target = self.tokens + more
        while self.tokens < target:
            assert not self.task.done()
            await asyncio.sleep(0.005)

    async def release(self):
        await self.stub.Cancel(pb.CancelRequest(request_id=self.request_id))
        return await self.task
