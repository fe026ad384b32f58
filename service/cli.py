"""The ``mlx-grpc`` command line: ``serve``, ``prepare`` and ``models``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from engine.embedded import default_embedding_model, default_generation_model
from engine.embedding_engine import EmbeddingEngine
from engine.generation import GenerationConfig, GenerationEngine
from engine.models import ModelSet
from engine.scheduler import SchedulerConfig
from engine.validation import Limits

from .server import ServerOptions, serve

DEFAULT_GENERATION_NAME = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_NAME = "all-minilm-l6-v2"


def _model_spec(text: str) -> tuple[str, str]:
    """NAME=SOURCE or SOURCE (the name is then derived from the source)."""
    name, sep, source = text.partition("=")
    return (name, source) if sep and source else ("", text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlx-grpc", description="gRPC inference server on MLX")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the server", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s.add_argument("--host", default="[::]", help="address to listen on")
    s.add_argument("--port", type=int, default=50051, help="port (0 picks a free one)")
    s.add_argument("--model", action="append", type=_model_spec, metavar="[NAME=]SOURCE",
                   help="generation model: a GGUF file, a Hugging Face directory or hub id; "
                        "repeatable; default: the embedded SmolLM2-135M-Instruct")
    s.add_argument("--embedding-model", action="append", type=_model_spec, metavar="[NAME=]DIR",
                   help="BERT-family embedding model directory; repeatable; "
                        "default: the embedded all-MiniLM-L6-v2")
    s.add_argument("--no-embedding", action="store_true", help="serve no embedding model")
    s.add_argument("--dtype", default="auto", help="weight dtype: auto (float32 on CPU), float32, float16, bfloat16")
    s.add_argument("--max-active", type=int, default=8, help="rows prefilling or decoding at once per model")
    s.add_argument("--max-queued", type=int, default=64, help="requests waiting for admission per model")
    s.add_argument("--prefill-chunk", type=int, default=256, help="prompt tokens per prefill forward")
    s.add_argument("--tick-tokens", type=int, default=512, help="token budget of one scheduler tick")
    s.add_argument("--max-tokens", type=int, default=4096, help="cap on generated tokens per request")
    s.add_argument("--max-top-logprobs", type=int, default=20, help="cap on top_logprobs")
    s.add_argument("--max-embed-inputs", type=int, default=256, help="cap on inputs per Embed")
    s.add_argument("--max-message-bytes", type=int, default=16 << 20, help="max gRPC message size")
    s.add_argument("--no-reflection", action="store_true", help="turn server reflection off")
    s.add_argument("--grace", type=float, default=10.0, help="seconds in-flight streams get on shutdown")

    sub.add_parser("prepare", help="convert the embedded default models once (shows progress)")
    sub.add_parser("models", help="print where the embedded default models are")
    return parser


def build_models(args: argparse.Namespace) -> ModelSet:
    limits = Limits(max_tokens=args.max_tokens, max_top_logprobs=args.max_top_logprobs,
                    max_embed_inputs=args.max_embed_inputs)
    config = GenerationConfig(dtype=args.dtype, limits=limits, scheduler=SchedulerConfig(
        max_active=args.max_active, max_queued=args.max_queued,
        prefill_chunk=args.prefill_chunk, tick_tokens=args.tick_tokens))
    specs = args.model or [(DEFAULT_GENERATION_NAME, str(default_generation_model()))]
    generation = [GenerationEngine(source, name=name, config=config) for name, source in specs]
    embedding = []
    if not args.no_embedding:
        specs = args.embedding_model or [(DEFAULT_EMBEDDING_NAME, str(default_embedding_model()))]
        embedding = [EmbeddingEngine(source, name=name, limits=limits) for name, source in specs]
    return ModelSet(generation, embedding)


def _prepare() -> None:
    from engine.gguf import prepare_gguf
    from engine.loading import cache_root

    def show(stage: str, fraction: float) -> None:
        print(f"\r{stage:<40} {fraction:6.1%}", end="", flush=True, file=sys.stderr)

    path = prepare_gguf(default_generation_model(), cache_root(), progress=show)
    print(f"\ngeneration model ready: {path}")
    print(f"embedding model: {default_embedding_model()}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "models":
        print(f"generation: {default_generation_model()}\nembedding:  {default_embedding_model()}")
        return 0
    if args.command == "prepare":
        _prepare()
        return 0
    options = ServerOptions(reflection=not args.no_reflection, max_message_bytes=args.max_message_bytes,
                            grace_s=args.grace)
    asyncio.run(serve(f"{args.host}:{args.port}", build_models(args), options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
