"""The ``mlx-grpc`` command line: ``serve``, ``prepare`` and ``models``. ``serve``'s
knobs are the config classes' ``setting`` fields (service/flags.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from engine.config import SECTIONS
from engine.embedding.config import EmbeddingConfig
from engine.embedding.precision import PRECISIONS
from engine.generation.config import GenerationConfig, SpeculationConfig
from engine.loading.embedded import default_embedding_model, default_generation_model

from . import tracing
from .access_log import configure_logging
from .assembly import adapters_by_model, build_limits, build_models  # noqa: F401 - part of the CLI's API
from .bearer_tokens import ENV_VAR, load_table
from .flags import add_settings, from_args
from .server import ServerOptions, exposure, serve
from .tls import server_credentials
from .watchdog import EXIT_ENGINE_BROKEN


def _precision_spec(text: str) -> tuple[str, str]:
    """[MODEL=]PRECISION."""
    model, _, precision = text.rpartition("=")
    if precision not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"{text!r}: the precision is one of {', '.join(PRECISIONS)}")
    return model, precision


def _model_spec(text: str) -> tuple[str, str]:
    """NAME=SOURCE or SOURCE (the name is then derived from the source)."""
    name, sep, source = text.partition("=")
    return (name, source) if sep and source else ("", text)


def _adapter_spec(text: str) -> tuple[str, str, str]:
    """[MODEL:]NAME=DIR -> (model or "" for the default, name, directory)."""
    target, sep, path = text.partition("=")
    model, _, name = target.rpartition(":")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected [MODEL:]NAME=DIR, got {text!r}")
    return model, name, path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlx-grpc", description="gRPC inference server on MLX")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log lines as text or one JSON object per line (default text)")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the server", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; any other than loopback needs auth tokens or --insecure-open")
    s.add_argument("--port", type=int, default=50051, help="port (0 picks a free one)")
    s.add_argument("--model", action="append", type=_model_spec, metavar="[NAME=]SOURCE",
                   help="generation model: a GGUF file, a Hugging Face directory or hub id; "
                        "repeatable; default: the embedded SmolLM2-135M-Instruct")
    s.add_argument("--embedding-model", action="append", type=_model_spec, metavar="[NAME=]DIR",
                   help="embedding model directory (BERT-family, or a decoder for last-token pooling), or a "
                        "BERT sequence classifier (*ForSequenceClassification): with one label a cross-encoder "
                        "served for Rerank and Classify, with more served for Classify; or a SPLADE model "
                        "(BERT *ForMaskedLM) served for EmbedSparse; repeatable; default: the embedded "
                        "all-MiniLM-L6-v2")
    s.add_argument("--no-embedding", action="store_true", help="serve no embedding model")
    s.add_argument("--speech-model", action="append", type=_model_spec, metavar="[NAME=]DIR",
                   help="speech-to-text model directory (Whisper: mlx-audio's layout or Hugging Face's, with its "
                        "processor files) served for Transcribe; repeatable; default: none")
    groups = {cls: s.add_argument_group(title) for title, cls in SECTIONS}  # the config tree's flags
    for cls, group in groups.items():
        add_settings(group, cls)
    embedding = groups[EmbeddingConfig]
    embedding.add_argument("--embed-precision", action="append", type=_precision_spec, default=[],
                           metavar="[MODEL=]PRECISION",
                           help="a BERT embedding model's matmul precision: f32 (the default), bf16 or int8 (8-bit "
                                "blocks of weights and inputs); bf16 runs where the CPU has AVX-512 BF16, int8 where "
                                "it has AVX-512 VNNI or AVX-VNNI, float32 elsewhere (logged at start; GetModelInfo's "
                                "dtype says what runs); without MODEL= every embedding model; repeatable")
    embedding.add_argument("--embed-precision-force", action="store_true",
                           help="run --embed-precision's bf16 or int8 products even on a CPU without those "
                                "instructions (slower than float32 there: for checking their accuracy)")
    models = groups[GenerationConfig]
    models.add_argument("--adapter", action="append", type=_adapter_spec, default=[], metavar="[MODEL:]NAME=DIR",
                        help="LoRA/DoRA adapter directory (as mlx_lm.lora writes it) loaded at start for the "
                             "default generation model, or MODEL; requests select it by NAME; repeatable")
    speculation = groups[SpeculationConfig]
    speculation.add_argument("--draft-model", action="append", type=_model_spec, metavar="[MODEL=]SOURCE",
                             help="a draft model with the same tokenizer for the served MODEL (default: the "
                                  "first); 'mtp': the MTP layer the model's own checkpoint carries; an EAGLE-3 "
                                  "head directory: a head reading the model's hidden layers; repeatable")
    server = s.add_argument_group("server")
    add_settings(server, ServerOptions)
    server.add_argument("--auth-token-file", metavar="PATH",
                        help="require 'authorization: Bearer <token>' with a token from this file, one per line: "
                             "TOKEN [TENANT [ROLE [key=value ...]]] (ROLE inference, router or admin); "
                             f"tokens may also come from ${ENV_VAR} (comma-separated; tenant default, role inference)")
    server.add_argument("--tls-cert", metavar="PEM", help="server certificate chain: serve TLS")
    server.add_argument("--tls-key", metavar="PEM", help="server private key")
    server.add_argument("--tls-client-ca", metavar="PEM", help="CA for client certificates: require them (mutual TLS)")

    sub.add_parser("prepare", help="convert the embedded default models once (shows progress)")
    sub.add_parser("models", help="print where the embedded default models are")
    return parser


def _prepare() -> None:
    from engine.loading.gguf import prepare_gguf
    from engine.loading.model import cache_root

    def show(stage: str, fraction: float) -> None:
        print(f"\r{stage:<40} {fraction:6.1%}", end="", flush=True, file=sys.stderr)

    path = prepare_gguf(default_generation_model(), cache_root(), progress=show)
    print(f"\ngeneration model ready: {path}")
    print(f"embedding model: {default_embedding_model()}")


def server_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ServerOptions:
    try:
        table = load_table(args.auth_token_file)
    except (OSError, ValueError) as exc:
        parser.error(f"--auth-token-file: {exc}")
    for flag in ("max_concurrent_rpcs", "max_anonymous_streams", "max_streams_per_tenant"):
        if getattr(args, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be at least 0")
    options = from_args(ServerOptions, args, auth_table=table, limits=build_limits(args))
    if problem := tracing.check(options):
        parser.error(f"refusing to start: {problem}")
    problem = exposure(args.host, options)
    if problem and not args.insecure_open:
        parser.error(f"refusing to start: {problem}")
    return options


def tls_credentials(args: argparse.Namespace, parser: argparse.ArgumentParser):
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        parser.error("--tls-client-ca needs --tls-cert and --tls-key")
    if not args.tls_cert:
        return None
    try:
        return server_credentials(args.tls_cert, args.tls_key, args.tls_client_ca)
    except OSError as exc:
        parser.error(f"TLS: {exc}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    if args.command == "models":
        print(f"generation: {default_generation_model()}\nembedding:  {default_embedding_model()}")
        return 0
    if args.command == "prepare":
        _prepare()
        return 0
    options = server_options(args, parser)
    credentials = tls_credentials(args, parser)
    if args.max_adapters < 1:
        parser.error("--max-adapters must be at least 1")
    if args.max_adapter_rank < 1 or args.max_adapter_bytes < 1:
        parser.error("--max-adapter-rank and --max-adapter-bytes must be at least 1")
    if args.adapter_root is not None and not os.path.isdir(args.adapter_root):
        parser.error("--adapter-root must be an existing directory")
    if args.model_root is not None and not os.path.isdir(args.model_root):
        parser.error("--model-root must be an existing directory")
    if args.model_catalog is not None and not os.path.isfile(args.model_catalog):
        parser.error("--model-catalog must be an existing file")
    if args.models_memory_limit is not None and args.models_memory_limit < 1:
        parser.error("--models-memory-limit must be at least 1")
    try:
        models = build_models(args)
    except ValueError as exc:
        parser.error(str(exc))
    status = asyncio.run(serve(f"{args.host}:{args.port}", models, options, credentials=credentials))
    if status == EXIT_ENGINE_BROKEN:  # a stuck engine thread must not keep the process alive
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
