"""llama.cpp's own server (``llama-server``, from ``python -m bench.llamacpp build``) as a
side of the benchmark, and its streaming client.

Requests go to ``/completion`` with token ids (the same ids our side gets), greedy,
``ignore_eos`` and ``cache_prompt`` off, streamed as server-sent events so TTFT is the
first event's arrival; the token count is the server's own ``tokens_predicted`` (events
may hold back an incomplete UTF-8 sequence). Read with plain asyncio streams, chunked
transfer encoding or not, in the benchmark's event loop, one coroutine per stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from .common import free_port
from .inproc import StreamResult
from .servers import Subprocess


def version() -> str:
    """``llama-server --version``'s first line (its build number and commit)."""
    from . import llamacpp

    done = subprocess.run([str(llamacpp.tool(llamacpp.SERVER)), "--version"], capture_output=True, text=True)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("version")]
    return lines[0] if lines else "unknown"


class LlamaServer:
    def __init__(self, model: Path, log_dir: Path, slots: int = 32, threads: int | None = None,
                 context_per_slot: int = 512, extra: list[str] | None = None):
        from . import llamacpp

        self.port = free_port()
        self.threads = threads or os.cpu_count() or 1
        # -c is shared by the slots: each gets context_per_slot (prompt + tokens must fit)
        self.argv = [str(llamacpp.tool(llamacpp.SERVER)), "-m", str(model), "-np", str(slots), "-cb",
                     "-t", str(self.threads), "-c", str(slots * context_per_slot),
                     "--host", "127.0.0.1", "--port", str(self.port), *(extra or [])]
        self.proc = Subprocess("llama-server", self.argv, log_dir)

    async def start(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.proc.check()
            try:
                if (await self._get("/health"))[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server did not become ready")
            await asyncio.sleep(0.5)

    async def _get(self, path: str) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
        return status, data

    async def generate(self, *, tokens: int, ids: list[int]) -> StreamResult:
        body = json.dumps({"prompt": ids, "n_predict": tokens, "ignore_eos": True, "cache_prompt": False,
                           "stream": True, "temperature": 0.0, "return_tokens": True}).encode()
        r = StreamResult(sent=time.perf_counter(), token_times=[])
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(b"POST /completion HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        try:
            status, headers = await _headers(reader)
            if status != 200:
                raise RuntimeError(f"llama-server answered {status}: {(await reader.read())[:500]!r}")
            counted = 0
            async for event in _events(reader, "chunked" in headers.get("transfer-encoding", "")):
                now = time.perf_counter()
                msg = json.loads(event)
                if msg.get("stop"):
                    r.done, r.prompt_tokens = now, msg.get("tokens_evaluated", 0)
                    r.tokens = msg.get("tokens_predicted") or msg.get("timings", {}).get("predicted_n") or counted
                    break
                if not r.first:
                    r.first = now
                counted += len(msg.get("tokens") or ()) or 1
                r.token_times.append(now)
        finally:
            writer.close()
        if not r.done:
            raise RuntimeError("llama-server's stream ended without its last event")
        return r

    async def complete(self, *, tokens: int, ids: list[int]) -> list[int]:
        """The ids of ``tokens`` greedy tokens after ``ids`` (one answer, not streamed)."""
        body = json.dumps({"prompt": ids, "n_predict": tokens, "ignore_eos": True, "cache_prompt": False,
                           "temperature": 0.0, "return_tokens": True}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(b"POST /completion HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
        data = await reader.read()
        writer.close()
        return [int(t) for t in json.loads(data.split(b"\r\n\r\n", 1)[1])["tokens"]]

    async def close(self) -> None:
        self.proc.stop()


async def _headers(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status = int((await reader.readline()).split(b" ", 2)[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip().lower()
    return status, headers


async def _events(reader: asyncio.StreamReader, chunked: bool):
    """The ``data:`` payloads of a server-sent event stream."""
    buffer = b""
    while True:
        if chunked:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            data = await reader.readexactly(size + 2) if size else b""
            data = data[:-2]
        else:
            data = await reader.read(65536)
        if not data:
            return
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.splitlines():
                if line.startswith(b"data: "):
                    yield line[6:]
