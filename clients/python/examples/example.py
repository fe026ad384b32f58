"""A tour of the mlx-grpc Python client against a running server.

    MLXGRPC_ADDRESS=localhost:50051 python examples/example.py
    MLXGRPC_IMAGE=photo.png MLXGRPC_MODEL=vision python examples/example.py   # the image step alone

MLXGRPC_TOKEN, when set, is sent as the bearer token of every call (a server with a tokens file).

Model info, a streamed generation, generations cancelled with the Cancel RPC and
client-side, two embeddings and their cosine similarity, an answer constrained by a
JSON schema, and the error details of an invalid request. With MLXGRPC_IMAGE set, only
the image step: the file sent in a chat message to MLXGRPC_MODEL (default "vision").
"""

from __future__ import annotations

import json
import math
import os
import sys

import grpc

from mlxgrpc_client import connect, error_details, image_part, pb


def cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def describe_image(address: str, token: str | None, path: str, model: str) -> int:
    """Sends the image at ``path`` with a question and prints the streamed answer."""
    with connect(address, token=token, timeout=120) as client:
        message = {"role": "user", "parts": [image_part(path), "Describe the image."]}
        print(f"image {path} to {model!r}: ", end="", flush=True)
        try:
            for event in client.generate([message], model=model, max_tokens=24):
                kind = event.WhichOneof("event")
                if kind == "started":
                    print(f"[{event.started.prompt_tokens} prompt tokens] ", end="")
                elif kind == "delta":
                    print(event.delta.text, end="", flush=True)
                elif kind == "finished":
                    print(f"\n[{pb.FinishReason.Name(event.finished.reason)}]")
        except grpc.RpcError as err:
            details = error_details(err)
            print(f"\nrefused: {details.code.name}: {details.message}")
            return 1
    return 0


def main() -> int:
    address = os.environ.get("MLXGRPC_ADDRESS", "localhost:50051")
    token = os.environ.get("MLXGRPC_TOKEN") or None
    if os.environ.get("MLXGRPC_IMAGE"):
        return describe_image(address, token, os.environ["MLXGRPC_IMAGE"], os.environ.get("MLXGRPC_MODEL", "vision"))
    with connect(address, token=token, timeout=60) as client:
        info = client.model_info()
        print(f"model {info.name}: {pb.ModelKind.Name(info.kind)}, graph {info.graph.id}, "
              f"context {info.context_length}, vocab {info.vocab_size}, dtype {info.dtype}, "
              f"generation={info.capabilities.generation}, chat template={info.has_chat_template}")

        # 1. Stream a generation, printing each text delta as it arrives.
        print("\n--- generate (streamed) ---")
        stream = client.generate([("user", "Tell me a story.")], max_tokens=24)
        for event in stream:
            kind = event.WhichOneof("event")
            if kind == "started":
                print(f"[started {event.started.request_id}, {event.started.prompt_tokens} prompt tokens]")
            elif kind == "delta":
                print(event.delta.text, end="", flush=True)
            elif kind == "finished":
                f = event.finished
                print(f"\n[finished: {pb.FinishReason.Name(f.reason)}, "
                      f"{f.usage.completion_tokens} tokens, {f.timings.decode_tokens_per_second:.0f} tok/s]")

        # 2. Start another generation and cancel it with the Cancel RPC after a few deltas.
        print("\n--- generate, cancelled after 3 deltas ---")
        stream = client.generate("Count forever:", max_tokens=2000, stopping={"ignore_eos": True})
        deltas = 0
        for event in stream:
            if event.HasField("delta"):
                deltas += 1
                print(event.delta.text, end="", flush=True)
                if deltas == 3:
                    print(f"\n[Cancel({stream.request_id}) -> {client.cancel(stream.request_id)}]")
            elif event.HasField("finished"):
                print(f"[finished: {pb.FinishReason.Name(event.finished.reason)} after "
                      f"{event.finished.usage.completion_tokens} tokens]")

        # 3. Or cancel the call itself, client-side: the stream stops and the call ends CANCELLED.
        print("\n--- generate, call cancelled client-side after 3 events ---")
        with client.generate("Count forever:", max_tokens=2000, stopping={"ignore_eos": True}) as stream:
            for i, event in enumerate(stream, 1):
                if i == 3:
                    stream.cancel()
        print(f"[{len(stream.result.token_ids)} tokens received, call ended {stream.code().name}]")

        # 4. Embed two sentences and compare them.
        print("\n--- embed ---")
        a, b = client.embed(["A man is eating food.", "A man is eating a piece of bread."])
        print(f"vector length {len(a.embedding)}, cosine similarity {cosine(a.embedding, b.embedding):.3f}")

        # 5. Structured output: the answer is JSON that validates against a schema.
        print("\n--- generate with a JSON schema ---")
        schema = {"type": "object", "additionalProperties": False, "required": ["city", "country"],
                  "properties": {"city": {"type": "string", "maxLength": 40},
                                 "country": {"type": "string", "maxLength": 40}}}
        result = client.generate([("user", "Where is the Eiffel Tower?")], json_schema=schema,
                                 max_tokens=64).collect()
        print(f"{result.text} [{pb.FinishReason.Name(result.finish_reason)}]")
        if result.finish_reason == pb.FINISH_REASON_STOP:  # complete, so it parses
            print("parsed:", json.loads(result.text))

        # 6. An invalid request: the error carries google.rpc details.
        print("\n--- invalid request (sampling.temperature = -1) ---")
        try:
            client.generate("Hi", sampling={"temperature": -1}, max_tokens=4).collect()
            print("unexpected: the request succeeded")
            return 1
        except grpc.RpcError as err:
            details = error_details(err)
            print(f"status {details.code.name}: {details.message}")
            print(f"reason {details.reason}, field violations: "
                  f"{[v.field for v in details.field_violations]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
