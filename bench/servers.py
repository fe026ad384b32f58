"""Servers under test (subprocesses) and their streaming clients.

* ours: ``python -m service serve`` over gRPC (grpc.aio client, the generated stubs);
* the anchor: ``mlx_lm.server`` (OpenAI-style HTTP, streamed as server-sent events),
  read with plain asyncio streams.
Both clients run in the benchmark's event loop, one coroutine per stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb
from service.gen.mlxgrpc.v1 import inference_service_pb2_grpc as pb_grpc

from .common import free_port
from .inproc import StreamResult, spread_times

REPO = Path(__file__).resolve().parent.parent


class Subprocess:
    def __init__(self, name: str, argv: list[str], log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("w")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text()[-3000:]
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); log tail:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


# -- ours ------------------------------------------------------------------------------------

class OurServer:
    def __init__(self, model_dir: Path, embedding_dir: Path | None, log_dir: Path, max_active: int = 32,
                 extra: list[str] | None = None, speculation: str = "off"):
        self.port = free_port()
        argv = [sys.executable, "-m", "service", "--log-level", "WARNING", "serve",
                "--host", "127.0.0.1", "--port", str(self.port), "--model", f"bench={model_dir}",
                "--max-active", str(max_active), "--max-queued", "64", "--speculation", speculation]
        argv += ["--embedding-model", f"embed={embedding_dir}"] if embedding_dir else ["--no-embedding"]
        argv += extra or []
        self.proc = Subprocess("ours", argv, log_dir)
        self.channel: grpc.aio.Channel | None = None
        self.stub: pb_grpc.InferenceServiceStub | None = None

    async def start(self, timeout: float = 300) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=[
            ("grpc.max_receive_message_length", 64 << 20)])
        self.stub = pb_grpc.InferenceServiceStub(self.channel)
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + timeout
        while True:
            self.proc.check()
            try:
                r = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("our server did not become ready")
            await asyncio.sleep(0.5)

    async def info(self) -> pb.GetModelInfoResponse:
        return await self.stub.GetModelInfo(pb.GetModelInfoRequest(model="bench"))

    async def generate(self, *, tokens: int, ids: list[int] | None = None, text: str | None = None,
                       bypass: bool = False, ignore_eos: bool = True) -> StreamResult:
        req = pb.GenerateRequest(model="bench", bypass_prefix_cache=bypass,
                                 stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=ignore_eos))
        if ids is not None:
            req.tokens.ids.extend(ids)
        else:
            req.text = text or ""
        r = StreamResult(sent=time.perf_counter(), token_times=[])
        async for resp in self.stub.Generate(req):
            now = time.perf_counter()
            kind = resp.WhichOneof("event")
            if kind == "started":
                r.prompt_tokens, r.cached_tokens = resp.started.prompt_tokens, resp.started.cached_tokens
            elif kind == "delta" and resp.delta.token_ids:
                n = len(resp.delta.token_ids)
                if not r.first:
                    r.first = now
                spread_times(r.token_times, r.token_times[-1] if r.token_times else 0.0, now, n)
                r.tokens += n
            elif kind == "finished":
                r.done = now
        return r

    async def greedy(self, ids: list[int], tokens: int) -> list[int]:
        """The ids of ``tokens`` greedy tokens after ``ids`` (EOS ignored)."""
        req = pb.GenerateRequest(model="bench", tokens=gen_pb.TokenIds(ids=ids),
                                 sampling=gen_pb.SamplingParams(temperature=0.0),
                                 stopping=gen_pb.StoppingCriteria(max_tokens=tokens, ignore_eos=True))
        out: list[int] = []
        async for resp in self.stub.Generate(req):
            if resp.WhichOneof("event") == "delta":
                out += list(resp.delta.token_ids)
        return out

    async def embed(self, texts: list[str]) -> int:
        n = 0
        async for _ in self.stub.Embed(pb.EmbedRequest(model="embed", inputs=texts)):
            n += 1
        return n

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        self.proc.stop()


# -- the anchor: mlx_lm.server ---------------------------------------------------------------

class AnchorServer:
    def __init__(self, model_dir: Path, log_dir: Path, decode_concurrency: int = 32):
        self.port = free_port()
        self.model_dir = model_dir
        argv = [sys.executable, "-m", "bench.anchor_server", "--model", str(model_dir),
                "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "WARNING",
                "--decode-concurrency", str(decode_concurrency)]
        self.proc = Subprocess("mlx_lm.server", argv, log_dir)

    async def start(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.proc.check()
            try:
                status, _ = await self._get("/v1/models")
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("mlx_lm.server did not become ready")
            await asyncio.sleep(0.5)

    async def _get(self, path: str) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
        return status, data

    async def generate(self, *, tokens: int, text: str) -> StreamResult:
        body = json.dumps({"model": "default_model", "prompt": text, "max_tokens": tokens,
                           "temperature": 0.0, "stream": True,
                           "stream_options": {"include_usage": True}}).encode()
        r = StreamResult(sent=time.perf_counter(), token_times=[])
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        chunks = 0
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    break
                now = time.perf_counter()
                msg = json.loads(payload)
                usage = msg.get("usage")
                if usage:
                    r.prompt_tokens = usage.get("prompt_tokens", 0)
                    r.tokens = usage.get("completion_tokens", chunks)
                    continue
                choices = msg.get("choices") or [{}]
                if choices[0].get("text"):
                    if not r.first:
                        r.first = now
                    r.token_times.append(now)
                    chunks += 1
        finally:
            writer.close()
        r.done = time.perf_counter()
        if not r.tokens:
            r.tokens = chunks
        return r

    async def close(self) -> None:
        self.proc.stop()
