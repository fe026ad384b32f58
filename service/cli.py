"""The ``mlx-grpc`` command line: ``serve``, ``prepare`` and ``models``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from engine.loading.embedded import default_embedding_model, default_generation_model
from engine.validation import BYTES_PER_TOKEN

from .access_log import configure_logging
from .assembly import adapters_by_model, build_limits, build_models  # noqa: F401 - part of the CLI's API
from .server import ServerOptions, exposure, serve
from .tenants import ENV_VAR, load_table
from .tls import server_credentials
from .watchdog import EXIT_ENGINE_BROKEN


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
                   help="BERT-family embedding model directory; repeatable; "
                        "default: the embedded all-MiniLM-L6-v2")
    s.add_argument("--no-embedding", action="store_true", help="serve no embedding model")
    s.add_argument("--adapter", action="append", type=_adapter_spec, default=[], metavar="[MODEL:]NAME=DIR",
                   help="LoRA/DoRA adapter directory (as mlx_lm.lora writes it) loaded at start for the default "
                        "generation model, or MODEL; requests select it by NAME; repeatable")
    s.add_argument("--max-adapters", type=int, default=8,
                   help="adapters a generation model holds at once; loading beyond it unloads the least "
                        "recently used idle one")
    s.add_argument("--adapter-root", default=None, metavar="DIR",
                   help="directory LoadAdapter paths are relative to and may not leave (symbolic links "
                        "included); unset: LoadAdapter is refused (--adapter directories may lie anywhere)")
    s.add_argument("--max-adapter-rank", type=int, default=256,
                   help="highest LoRA/DoRA rank an adapter may have (checked before it loads)")
    s.add_argument("--max-adapter-bytes", type=int, default=1 << 30,
                   help="tensor bytes an adapter's adapters.safetensors may hold (checked before it loads)")
    s.add_argument("--dtype", default="auto",
                   help="dtype of float weights and of quantization scales: auto (float32 on CPU), float32, "
                        "float16, bfloat16; quantized weights (GGUF blocks, MLX quantized) stay quantized")
    s.add_argument("--dequantize", action="store_true",
                   help="hold quantized weights as floats of --dtype instead (several times the memory)")
    s.add_argument("--max-active", type=int, default=32,
                   help="rows prefilling or decoding at once per model (the memory budget admits too)")
    s.add_argument("--max-queued", type=int, default=64, help="requests waiting for admission per model")
    s.add_argument("--priority-aging", type=float, default=5.0, metavar="SECONDS",
                   help="a waiting request gains one priority level per this many seconds, so low "
                        "priorities are never starved (0: no aging)")
    s.add_argument("--fair-headroom", type=int, default=-1,
                   help="rows beyond --max-active a tenant below its weighted share may start when every "
                        "slot is taken (-1: max(1, max-active / 8); 0: none)")
    s.add_argument("--prefill-chunk", type=int, default=256, help="prompt tokens per prefill forward")
    s.add_argument("--tick-tokens", type=int, default=512, help="token budget of one scheduler tick")
    s.add_argument("--min-prefill-tokens", type=int, default=16,
                   help="prompt tokens every tick prefills even when decode rows fill its budget")
    s.add_argument("--prefill-batch", type=int, default=8,
                   help="short new prompts prefilled together in one forward (1: one at a time)")
    s.add_argument("--speculation", choices=("off", "ngram", "draft"), default="ngram",
                   help="speculative decoding for requests that leave it unset (output never changes): "
                        "ngram = prompt lookup, draft = the model's --draft-model")
    s.add_argument("--num-draft-tokens", type=int, default=4, help="drafts verified per step by default (at most 8)")
    s.add_argument("--draft-model", action="append", type=_model_spec, metavar="[MODEL=]SOURCE",
                   help="a draft model with the same tokenizer for the served MODEL (default: the first); "
                        "repeatable")
    s.add_argument("--step-tokens", type=int, default=16,
                   help="tokens one decode step may feed in all when rows speculate (drafts shrink as "
                        "the batch grows)")
    s.add_argument("--speculation-rows", type=int, default=1,
                   help="rows speculate only in decode steps of at most this many rows (on a CPU, "
                        "realigning a larger batch's KV after ragged acceptance costs more than drafts save)")
    s.add_argument("--prefix-cache-bytes", type=int, default=512 << 20,
                   help="bytes of KV kept for prefix reuse per model (0 turns the prefix cache off)")
    s.add_argument("--memory-limit", type=int, default=None, metavar="BYTES",
                   help="memory the server may use for admission (default: what the machine has available)")
    s.add_argument("--memory-reserve", type=int, default=None, metavar="BYTES",
                   help="bytes held back from admission (default: max(256 MiB, 5%% of usable))")
    s.add_argument("--max-tokens", type=int, default=4096, help="cap on generated tokens per request")
    s.add_argument("--max-prompt-tokens", type=int, default=0,
                   help="cap on prompt tokens per request (0: the model's context length)")
    s.add_argument("--max-prompt-bytes", type=int, default=0,
                   help=f"cap on UTF-8 bytes of a text or chat prompt, and of Tokenize's text "
                        f"(0: {BYTES_PER_TOKEN} per prompt token allowed)")
    s.add_argument("--max-chat-messages", type=int, default=0,
                   help="cap on messages per chat prompt (0: one per prompt token allowed)")
    s.add_argument("--max-stop-strings", type=int, default=16, help="cap on stop strings per request")
    s.add_argument("--max-logit-bias", type=int, default=1024,
                   help="cap on logit_bias entries, and on stop_token_ids, per request")
    s.add_argument("--max-top-logprobs", type=int, default=20, help="cap on top_logprobs")
    s.add_argument("--max-embed-inputs", type=int, default=256, help="cap on inputs per Embed")
    s.add_argument("--max-embed-input-bytes", type=int, default=0,
                   help=f"cap on UTF-8 bytes of each Embed input and of its instruction "
                        f"(0: {BYTES_PER_TOKEN} per token of the embedding model's input length)")
    s.add_argument("--max-format-bytes", type=int, default=64 << 10,
                   help="cap on a response_format's schema, regex, grammar or choice options (bytes)")
    s.add_argument("--format-compile-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="time a response_format may take to compile")
    s.add_argument("--format-compile-queue", type=int, default=64, metavar="N",
                   help="response_formats that may wait for a compile thread per model; more are refused "
                        "with RESOURCE_EXHAUSTED")
    s.add_argument("--max-message-bytes", type=int, default=16 << 20, help="max gRPC message size")
    s.add_argument("--no-reflection", action="store_true", help="turn server reflection off")
    s.add_argument("--grace", type=float, default=10.0, help="seconds in-flight streams get on shutdown")
    s.add_argument("--engine-stall-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="a model whose engine thread is busy this long on one step is broken: its requests "
                        f"fail UNAVAILABLE (ENGINE_DEAD) and the server exits with status {EXIT_ENGINE_BROKEN} "
                        "(a thread that dies does so at once); 0 turns the stall check off")
    s.add_argument("--auth-token-file", metavar="PATH",
                   help=f"require 'authorization: Bearer <token>' with a token from this file, one per line: "
                        f"TOKEN [TENANT [ROLE [key=value ...]]] (ROLE inference or admin); tokens may also "
                        f"come from ${ENV_VAR} (comma-separated; tenant default, role inference)")
    s.add_argument("--auth-open-reflection", action="store_true",
                   help="serve reflection without a token (health is always open)")
    s.add_argument("--insecure-open", action="store_true",
                   help="allow a non-loopback --host without auth tokens (anyone reaching it may generate)")
    s.add_argument("--max-concurrent-rpcs", type=int, default=1024,
                   help="RPCs served at once; beyond it grpc answers RESOURCE_EXHAUSTED (0: unbounded)")
    s.add_argument("--tls-cert", metavar="PEM", help="server certificate chain: serve TLS")
    s.add_argument("--tls-key", metavar="PEM", help="server private key")
    s.add_argument("--tls-client-ca", metavar="PEM",
                   help="CA for client certificates: require them (mutual TLS)")
    s.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on this HTTP port (off by default; 0 picks one)")
    s.add_argument("--metrics-host", default="0.0.0.0", help="address of the metrics endpoint")
    s.add_argument("--no-access-log", action="store_true", help="no per-RPC line on the service.access logger")
    s.add_argument("--no-smg-worker", action="store_true",
                   help="do not serve SMG's worker contract mlx.grpc.engine.MlxEngine (the Shepherd Model Gateway's)")

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
    if args.max_concurrent_rpcs < 0:
        parser.error("--max-concurrent-rpcs must be at least 0")
    options = ServerOptions(reflection=not args.no_reflection, max_message_bytes=args.max_message_bytes,
                            grace_s=args.grace, auth_table=table, auth_open_reflection=args.auth_open_reflection,
                            metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                            access_log=not args.no_access_log, limits=build_limits(args),
                            smg_worker=not args.no_smg_worker, insecure_open=args.insecure_open,
                            max_concurrent_rpcs=args.max_concurrent_rpcs,
                            engine_stall_timeout_s=args.engine_stall_timeout)
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
