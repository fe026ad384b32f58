"""Knobs of one model's generation engine; ``setting`` fields are its command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..requests import SpeculationMode
from ..settings import setting
from ..validation import Limits
from .grammar.formats import GrammarLimits


@dataclass(frozen=True)
class SchedulerConfig:
    max_active: int = setting(32, "rows prefilling or decoding at once per model (the memory budget admits too)")
    max_queued: int = setting(64, "requests waiting for admission per model")
    priority_aging_s: float = setting(
        5.0, "a waiting request gains one priority level per this many seconds, so low priorities are never "
             "starved (0: no aging)", flag="--priority-aging", metavar="SECONDS")
    fair_headroom: int = setting(
        -1, "rows beyond --max-active a tenant below its weighted share may start when every slot is taken "
            "(-1: max(1, max-active / 8); 0: none)")
    prefill_chunk: int = setting(256, "prompt tokens per prefill forward")
    tick_tokens: int = setting(512, "token budget of one scheduler tick")
    min_prefill_tokens: int = setting(16, "prompt tokens every tick prefills even when decode rows fill its budget")
    prefill_batch: int = setting(8, "short new prompts prefilled together in one forward (1: one at a time)")
    step_tokens: int = setting(
        16, "tokens one decode step may feed in all when rows speculate (drafts shrink as the batch grows)")
    speculation_rows: int = setting(
        1, "rows speculate only in decode steps of at most this many rows (on a CPU, realigning a larger "
           "batch's KV after ragged acceptance costs more than drafts save)")
    prefix_cache_bytes: int = setting(512 << 20,
                                      "bytes of KV kept for prefix reuse per model (0 turns the prefix cache off)")
    prefix_cache_entries: int = 64
    image_cache_bytes: int = setting(
        64 << 20, "bytes of encoded images and videos (the vision projector's output, keyed by the file's bytes) "
                  "kept per vision-language model, so a repeated image or video skips the vision tower (0: off)")
    kv_bits: int = setting(0, "hold attention KV in this many bits (8 or 4: MLX affine groups along the head; "
                              "0: the model's float dtype); memory plans and admission count the quantized "
                              "bytes; sliding-window and recurrent layers stay as they are", choices=(0, 8, 4))
    prefix_cache_dir: str | None = setting(
        None, "directory of the prefix cache's disk tier (one subdirectory per model fingerprint); entries "
              "there survive restarts (unset: memory only)", metavar="DIR", type=str)
    prefix_cache_key_file: str | None = setting(
        None, "file of 32 or more random bytes, outside --prefix-cache-dir, whose key signs (HMAC) and names the "
              "disk tier's entries (unset: prefix-cache.key generated once in the state directory, "
              "$MLX_GRPC_CACHE or ~/.cache/mlx-grpc)", metavar="PATH", type=str)
    prefix_cache_disk_bytes: int = setting(8 << 30, "bytes of files the disk tier keeps per model (least "
                                                    "recently used deleted first)")
    prefix_cache_disk_policy: str = setting(
        "all", "which entries the disk tier writes: all (every stored prefix, written in the background: "
               "survives a crash) or evicted (only what memory evicts, and what is held at a clean shutdown)",
        choices=("all", "evicted"))
    session_idle_s: float = setting(600.0, "a session's prefixes lose their eviction affinity after this long "
                                           "without a request (0: only CloseSession ends it)",
                                    flag="--session-idle", metavar="SECONDS")

    @property
    def headroom(self) -> int:
        return self.fair_headroom if self.fair_headroom >= 0 else max(1, self.max_active // 8)


@dataclass(frozen=True)
class SpeculationConfig:
    """Speculative decoding defaults (requests may ask for less, or turn it off)."""

    mode: SpeculationMode = setting(
        SpeculationMode.NGRAM, "speculative decoding for requests that leave it unset (output never changes): "
                               "ngram = prompt lookup, draft = the model's --draft-model", flag="--speculation",
        choices=("off", "ngram", "draft"))
    num_draft_tokens: int = setting(4, "drafts verified per step by default (at most 8)")
    prediction_draft_tokens: int = setting(16, "most tokens of a request's prediction verified per step "
                                               "(a request's num_draft_tokens, when set, caps it)")
    grammar_proposals: bool = setting(True, "do not propose the tokens a response format or forced tool call "
                                            "allows alone as drafts (the output is the same either way)")
    max_draft_tokens: int = 8  # the most a request may ask for


@dataclass(frozen=True)
class GenerationConfig:
    dtype: str = setting("auto", "dtype of float weights and of quantization scales: auto (float32 on CPU), "
                                 "float32, float16, bfloat16; quantized weights (GGUF blocks, MLX quantized) "
                                 "stay quantized")
    dequantize: bool = setting(False, "hold quantized weights as floats of --dtype instead (several times the "
                                      "memory)")
    numerics: str = setting("exact", "how a GGUF model's quantized products compute: exact (the dequantized "
                                     "float product, the default) or llama (llama.cpp's: activations quantized "
                                     "to 8 bits per block, ggml's integer dot products; faster, slightly "
                                     "different answers)", choices=("exact", "llama"))
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    limits: Limits = field(default_factory=Limits)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    memory_limit_bytes: int | None = setting(
        None, "memory the server may use for admission (default: what the machine has available)",
        flag="--memory-limit", metavar="BYTES", type=int)
    memory_reserve_bytes: int | None = setting(
        None, "bytes held back from admission (default: max(256 MiB, 5% of usable))", flag="--memory-reserve",
        metavar="BYTES", type=int)
    adapters: tuple[tuple[str, str], ...] = ()  # (name, directory) loaded at start
    max_adapters: int = setting(8, "adapters a generation model holds at once; loading beyond it unloads the "
                                   "least recently used idle one")
    adapter_root: str | None = setting(
        None, "directory LoadAdapter paths are relative to and may not leave (symbolic links included); "
              "unset: LoadAdapter is refused (--adapter directories may lie anywhere)", metavar="DIR", type=str)
    max_adapter_rank: int = setting(256, "highest LoRA/DoRA rank an adapter may have (checked before it loads)")
    max_adapter_bytes: int = setting(1 << 30, "tensor bytes an adapter's adapters.safetensors may hold (checked "
                                              "before it loads)")
    draft_model: str | None = None  # a model with the same tokenizer, for SPECULATION_MODE_DRAFT
    grammar: GrammarLimits = field(default_factory=GrammarLimits)  # what one response_format may cost
