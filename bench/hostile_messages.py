"""Worst-case messages up to the message limit against a live server, health polled meanwhile.

    .venv/bin/python -m bench.hostile_messages            # embedded SmolLM2, 16 MiB messages
    .venv/bin/python -m bench.hostile_messages --quick    # 4 MiB messages, fewer repeats

One ``mlx-grpc serve`` subprocess (no tokens, loopback). Each message is built on the wire
(no client-side parse) to fill the message limit with what costs a parser most: millions of
empty sub-messages, map entries, strings or packed numbers, deep JSON. For each: the status it
ends with and the time to it, the health check's latency max / p99 while it was in flight
(polled every 10 ms), and the server's RSS growth (peak over the run before it). Goals: refused
(INVALID_ARGUMENT or RESOURCE_EXHAUSTED) within 1 s, health <= 100 ms, RSS growth <= 64 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto import mlx_engine_pb2 as mlx_pb
from smg_grpc_proto import vllm_engine_pb2 as vllm_pb

from service.gen.mlxgrpc.v1 import generation_pb2 as gen_pb
from service.gen.mlxgrpc.v1 import inference_service_pb2 as pb

from .common import default_model, machine_facts, percentile, wait_low_load
from .servers import OurServer

GENERATE = "/mlxgrpc.v1.InferenceService/Generate"
VLLM = "/vllm.grpc.engine.VllmEngine/Generate"
MLX = "/mlx.grpc.engine.MlxEngine/Generate"
POLL_S = 0.01


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def field(message_type, name: str, payload: bytes) -> bytes:
    number = message_type.DESCRIPTOR.fields_by_name[name].number
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def filled(element: bytes, budget: int) -> bytes:
    return element * (budget // len(element))


def messages(limit: int) -> list[tuple[str, str, bytes]]:
    """(name, method, wire bytes), each just under ``limit``."""
    room = limit - 64
    empty = lambda t, n: field(t, n, b"")  # noqa: E731
    chat = lambda inner: field(pb.GenerateRequest, "chat", inner)  # noqa: E731
    one_message = lambda inner: chat(field(gen_pb.ChatMessages, "messages", inner))  # noqa: E731
    bias = gen_pb.SamplingParams()
    bias.logit_bias[0] = 0.0
    vbias = vllm_pb.SamplingParams()
    vbias.logit_bias[0] = 0.0
    mbias = mlx_pb.SamplingParams()
    mbias.logit_bias[0] = 0.0
    deep = "[" * 30_000 + "]" * 30_000
    kwargs = gen_pb.ChatMessages(messages=[gen_pb.ChatMessage(role="user", content="hi")],
                                 template_kwargs={"x": deep})
    base = pb.GenerateRequest(stopping=gen_pb.StoppingCriteria(max_tokens=1)).SerializeToString()
    return [
        ("chat.tools: empty tools", GENERATE, chat(filled(empty(gen_pb.ChatMessages, "tools"), room))),
        ("chat.messages: empty messages", GENERATE, chat(filled(empty(gen_pb.ChatMessages, "messages"), room))),
        ("chat.messages: one-field messages", GENERATE,
         chat(filled(field(gen_pb.ChatMessages, "messages", gen_pb.ChatMessage(role="u").SerializeToString()), room))),
        ("one message: empty parts", GENERATE, one_message(filled(empty(gen_pb.ChatMessage, "parts"), room))),
        ("one message: empty tool_calls", GENERATE,
         one_message(filled(empty(gen_pb.ChatMessage, "tool_calls"), room))),
        ("sampling.logit_bias: one key, repeated", GENERATE,
         base + field(pb.GenerateRequest, "sampling", filled(bias.SerializeToString(), room))),
        ("stopping.stop: empty strings", GENERATE,
         field(pb.GenerateRequest, "stopping", filled(empty(gen_pb.StoppingCriteria, "stop"), room))),
        ("tokens.ids: packed 1-byte ids", GENERATE,
         field(pb.GenerateRequest, "tokens", field(gen_pb.TokenIds, "ids", b"\x01" * room))),
        ("unknown fields, empty", GENERATE, filled(varint(999 << 3 | 2) + b"\x00", room)),
        ("text: one long prompt", GENERATE, field(pb.GenerateRequest, "text", b"a" * room)),
        ("template_kwargs: 30k-deep JSON", GENERATE, base + field(pb.GenerateRequest, "chat",
                                                                   kwargs.SerializeToString())),
        ("Embed: empty inputs", "/mlxgrpc.v1.InferenceService/Embed",
         filled(empty(pb.EmbedRequest, "inputs"), room)),
        ("Tokenize: one long text", "/mlxgrpc.v1.InferenceService/Tokenize",
         field(pb.TokenizeRequest, "text", b"a" * room)),
        ("vLLM logit_bias: one key, repeated", VLLM,
         vllm_pb.GenerateRequest(request_id="h", text="hi").SerializeToString()
         + field(vllm_pb.GenerateRequest, "sampling_params", filled(vbias.SerializeToString(), room))),
        ("vLLM stop: empty strings", VLLM, field(vllm_pb.GenerateRequest, "sampling_params",
                                                filled(empty(vllm_pb.SamplingParams, "stop"), room))),
        ("vLLM json_schema: 30k-deep", VLLM, vllm_pb.GenerateRequest(
            request_id="h", text="hi", sampling_params=vllm_pb.SamplingParams(json_schema=deep)).SerializeToString()),
        ("MLX logit_bias: one key, repeated", MLX,
         mlx_pb.GenerateRequest(request_id="h", text="hi").SerializeToString()
         + field(mlx_pb.GenerateRequest, "sampling_params", filled(mbias.SerializeToString(), room))),
    ]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Poller:
    """Health checks every POLL_S and the server's RSS, recorded while running."""

    def __init__(self, channel: grpc.aio.Channel, pid: int):
        self.health = health_pb2_grpc.HealthStub(channel)
        self.pid = pid
        self.latencies: list[float] = []
        self.peak_rss = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            sent = time.perf_counter()
            await self.health.Check(health_pb2.HealthCheckRequest(), timeout=30)
            self.latencies.append(time.perf_counter() - sent)
            self.peak_rss = max(self.peak_rss, rss_mib(self.pid))
            await asyncio.sleep(POLL_S)

    def start(self) -> None:
        self.latencies, self.peak_rss = [], rss_mib(self.pid)
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def send(channel: grpc.aio.Channel, method: str, data: bytes) -> str:
    call = channel.unary_stream(method) if method.endswith("/Generate") or method.endswith("/Embed") \
        else channel.unary_unary(method)
    try:
        result = call(data, timeout=60)
        if hasattr(result, "__aiter__"):
            async for _ in result:
                pass
        else:
            await result
        return "OK"
    except grpc.aio.AioRpcError as err:
        return err.code().name


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 MiB messages, one at a time only")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--concurrent", type=int, default=3, help="messages sent at once in the last row")
    parser.add_argument("--only", default="", help="rows whose name holds this text only")
    parser.add_argument("--max-load", type=float, default=2.5, help="wait (up to 5 min) for the 1-minute load "
                                                                       "average to fall below this first")
    args = parser.parse_args(argv)
    limit = (4 if args.quick else 16) << 20
    log_dir = Path(tempfile.mkdtemp(prefix="hostile-"))
    server = OurServer(args.model or default_model(), None, log_dir, max_active=4,
                       extra=["--max-message-bytes", str(limit)])
    wait_low_load(args.max_load, 300, print)
    facts = machine_facts()
    print(f"{facts['machine']}; load average at start {facts['load average at start']}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=[
        ("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)])
    poller = Poller(server.channel, server.proc.proc.pid)
    worst = {"health": 0.0, "refusal": 0.0, "rss": 0.0}
    try:
        print(f"message limit {limit >> 20} MiB; health polled every {POLL_S * 1000:.0f} ms")
        print(f"{'message':40s} {'MiB':>5s} {'status':>18s} {'refused s':>9s} {'health max ms':>13s} "
              f"{'p99 ms':>7s} {'RSS +MiB':>8s}")
        cases = messages(limit)
        rows = [("idle: no message (health baseline)", GENERATE, [])]
        rows += [(name, method, [data]) for name, method, data in cases]
        if args.concurrent > 1:
            rows.append((f"{args.concurrent} at once: tools, parts, logit_bias", GENERATE,
                         [cases[0][2], cases[2][2], cases[4][2]][:args.concurrent]))
        for name, method, datas in [r for r in rows if args.only in r[0]]:
            await asyncio.sleep(0.3)
            before = rss_mib(server.proc.proc.pid)
            poller.start()
            await asyncio.sleep(0.05)
            sent = time.perf_counter()
            codes = await asyncio.gather(*(send(channel, method, d) for d in datas)) if datas else ["-"]
            if not datas:
                await asyncio.sleep(0.5)
            took = time.perf_counter() - sent
            await asyncio.sleep(0.05)
            await poller.stop()
            lat = poller.latencies or [0.0]
            grew = max(0.0, poller.peak_rss - before)
            if datas:
                worst["health"] = max(worst["health"], max(lat))
                worst["refusal"] = max(worst["refusal"], took)
                worst["rss"] = max(worst["rss"], grew)
            size = len(datas[0]) / 2**20 if datas else 0.0
            print(f"{name:40s} {size:5.1f} {'/'.join(sorted(set(codes))):>18s} {took:9.3f} "
                  f"{max(lat) * 1000:13.1f} {percentile(lat, 99) * 1000:7.1f} {grew:8.1f}", flush=True)
        print(f"worst: refusal {worst['refusal']:.3f} s (goal <= 1), health {worst['health'] * 1000:.1f} ms "
              f"(goal <= 100), RSS +{worst['rss']:.1f} MiB (goal <= 64)")
    finally:
        await channel.close()
        await server.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
