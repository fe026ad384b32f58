"""The benchmark's report: facts, tables of ours vs an anchor, and the goals."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .common import percentile, ratio

if TYPE_CHECKING:
    from .run import Plan


@dataclass
class Row:
    metric: str
    ours: str
    anchor: str = ""
    vs: str = ""
    note: str = ""


class Report:
    def __init__(self) -> None:
        self.facts: dict[str, str] = {}
        self.tables: list[tuple[str, tuple[str, str], list[Row]]] = []

    def table(self, title: str, ours: str, anchor: str) -> list[Row]:
        rows: list[Row] = []
        self.tables.append((title, (ours, anchor), rows))
        return rows

    def render(self, markdown: bool) -> str:
        out = []
        if markdown:
            out += ["| fact | value |", "|---|---|"]
            out += [f"| {k} | {v} |" for k, v in self.facts.items()]
        else:
            width = max(map(len, self.facts), default=0)
            out += [f"{k:<{width}}  {v}" for k, v in self.facts.items()]
        for title, (ours, anchor), rows in self.tables:
            if not rows:
                continue
            head = ["metric", ours, anchor, "ratio", "note"]
            body = [[r.metric, r.ours, r.anchor, r.vs, r.note] for r in rows]
            out.append("")
            if markdown:
                out.append(f"**{title}**")
                out.append("")
                out.append("| " + " | ".join(head) + " |")
                out.append("|" + "---|" * len(head))
                out += ["| " + " | ".join(c or "" for c in r) + " |" for r in body]
            else:
                out.append(f"== {title}")
                widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
                for r in [head, *body]:
                    out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        return "\n".join(out)

    def publish(self, command: str, started: float, markdown: bool, path: str | None) -> None:
        """Records the command and the wall time since ``started``, prints the report
        and writes it to ``path`` too when given."""
        self.facts["command"] = command
        self.facts["wall time"] = f"{time.perf_counter() - started:.0f} s"
        text = self.render(markdown)
        print(text)
        if path:
            Path(path).write_text(text + "\n")


def ms(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x * 1e3:.0f}"


def build_tables(report: Report, results: dict, plan: Plan) -> None:
    limit = results.get("bandwidth", 0) / results["weight_bytes"] if results.get("weight_bytes") else math.nan
    t = report.table("ours vs mlx-lm (same weights, dtype, BLAS)", "ours", "mlx-lm")
    if "grpc_decode" in results:
        o, a = results["grpc_decode"], results["mlx_lm_decode"]
        t.append(Row(f"decode tok/s, 1 stream, {plan.decode_tokens} tokens", o.fmt(), a.fmt(),
                     ratio(o.median, a.median), f"ours via gRPC; anchor stream_generate; limit {limit:.1f}"))
    if "grpc_prefill" in results:
        o, a = results["grpc_prefill"], results["mlx_lm_prefill"]
        t.append(Row(f"prefill tok/s, {plan.prefill_tokens}-token prompt", o.fmt(0), a.fmt(0),
                     ratio(o.median, a.median), "ours via gRPC (TTFT, cache bypassed)"))
    for n in plan.levels:
        o, a = results.get(f"ours_{n}"), results.get(f"anchor_{n}")
        if not o or not a:
            continue
        tokens = plan.level_tokens.get(n, 32)
        note = f"anchor mlx_lm.server; tokens/stream ours {min(o['tokens'])}-{max(o['tokens'])}, " \
               f"anchor {min(a['tokens'])}-{max(a['tokens'])}"
        t.append(Row(f"{n} streams: aggregate tok/s ({tokens} tok each)", o["agg"].fmt(), a["agg"].fmt(),
                     ratio(o["agg"].median, a["agg"].median), note))
        t.append(Row(f"{n} streams: TTFT p50 / p95 ms",
                     f"{ms(percentile(o['ttft'], 50))} / {ms(percentile(o['ttft'], 95))}",
                     f"{ms(percentile(a['ttft'], 50))} / {ms(percentile(a['ttft'], 95))}",
                     ratio(percentile(o["ttft"], 50), percentile(a["ttft"], 50)), "lower is better"))
        t.append(Row(f"{n} streams: inter-token p50 / p95 ms",
                     f"{ms(percentile(o['itl'], 50))} / {ms(percentile(o['itl'], 95))}",
                     f"{ms(percentile(a['itl'], 50))} / {ms(percentile(a['itl'], 95))}",
                     ratio(percentile(o["itl"], 50), percentile(a["itl"], 50)), "lower is better"))
    if "prefix" in results:
        cold, hit, cached, total = results["prefix"]
        t = report.table(f"prefix cache ({total}-token prompts sharing a {plan.prefix_tokens}-token prefix)",
                         "hit", "cold")
        t.append(Row("TTFT ms", hit.fmt(0, 1e3), cold.fmt(0, 1e3), ratio(cold.median, hit.median),
                     f"ratio = speedup; cached tokens on hits: {min(cached)}-{max(cached)}"))
    if "grpc_decode" in results and "engine_decode" in results:
        t = report.table("gRPC overhead (the same engine in the benchmark's process vs a server)",
                         "via gRPC", "in-process")
        o, e = results["grpc_decode"], results["engine_decode"]
        t.append(Row("decode tok/s, 1 stream", o.fmt(), e.fmt(), ratio(o.median, e.median),
                     f"overhead {100 * (1 - o.median / e.median):+.1f}%"))
        if "grpc_prefill" in results and "engine_prefill" in results:
            o, e = results["grpc_prefill"], results["engine_prefill"]
            t.append(Row(f"prefill tok/s, {plan.prefill_tokens}-token prompt", o.fmt(0), e.fmt(0),
                         ratio(o.median, e.median), f"overhead {100 * (1 - o.median / e.median):+.1f}%"))
        n = plan.overhead_streams
        if f"ours_{n}" in results and f"engine_{n}" in results:
            o, e = results[f"ours_{n}"]["agg"], results[f"engine_{n}"]["agg"]
            t.append(Row(f"{n} streams aggregate tok/s", o.fmt(), e.fmt(), ratio(o.median, e.median),
                         f"overhead {100 * (1 - o.median / e.median):+.1f}%"))
    if "embed_rpc" in results and "embed_direct" in results:
        t = report.table("embeddings", "Embed RPC", "direct MLX")
        o, e = results["embed_rpc"], results["embed_direct"]
        t.append(Row(f"inputs/s ({plan.embed_texts} sentences)", o.fmt(0), e.fmt(0), ratio(o.median, e.median),
                     "one Embed call vs EmbeddingModel.embed"))




def _ratio_row(t: list[Row], metric: str, a, b, note: str = "", digits: int = 1) -> None:
    t.append(Row(metric, a.fmt(digits), b.fmt(digits), ratio(a.median, b.median), note))


def kernel_tables(report: Report, results: dict, plan: Plan) -> None:
    """Long context, kernels on/off, 8-bit weights and llama.cpp."""
    if "long" in results:
        s = results["long"]
        t = report.table(f"long context ({plan.long_tokens}-token prompt), ours via gRPC vs mlx-lm", "ours", "mlx-lm")
        _ratio_row(t, f"prefill tok/s, {plan.long_tokens}-token prompt", s["grpc_prefill"], s["mlx_lm_prefill"], digits=0)
        _ratio_row(t, f"decode tok/s right after it ({plan.long_decode_tokens} tokens)", s["grpc_decode"],
                   s["mlx_lm_decode"])
    if "kernels" in results:
        s = results["kernels"]
        t = report.table("CPU kernels on vs off (our engine in-process; the encoder directly)", "kernels", "mlx ops")
        _ratio_row(t, f"decode tok/s, 1 stream, {plan.decode_tokens} tokens", s["kernels_decode"], s["stock_decode"])
        _ratio_row(t, f"prefill tok/s, {plan.prefill_tokens}-token prompt", s["kernels_prefill"], s["stock_prefill"],
                   digits=0)
        if "kernels_embed" in s:
            _ratio_row(t, f"embed inputs/s ({plan.embed_texts} sentences)", s["kernels_embed"], s["stock_embed"],
                       digits=0)
    if "q8" in results:
        s = results["q8"]
        t = report.table("8-bit weights (MLX affine, groups of 64): our engine vs mlx-lm, same weights", "ours",
                         "mlx-lm")
        _ratio_row(t, f"decode tok/s, 1 stream, {plan.decode_tokens} tokens", s["ours_decode"], s["mlx_lm_decode"])
        t.append(Row(f"prefill tok/s, {plan.prefill_tokens}-token prompt", s["ours_prefill"].fmt(0), "", "",
                     "ours alone: see the llama.cpp table"))
    if "llamacpp" in results:
        _llama_table(report, results, plan)
    if "gguf" in results:
        _gguf_table(report, results, plan)
    _goals(report, results, plan)


def _gguf_table(report: Report, results: dict, plan: Plan) -> None:
    from .common import Sample

    t = report.table("GGUF files served from their own bits vs llama.cpp on the same file (llama-bench, all cores)",
                     "ours", "llama.cpp")
    for kind, s in results["gguf"].items():
        facts = f"{s['tensor_types']}; ours {s['dtype']}"
        _ratio_row(t, f"decode tok/s, {kind}, {plan.decode_tokens} tokens", s["ours_decode"],
                   Sample([float(s["llama_decode"])]), facts, 1)
        _ratio_row(t, f"prefill tok/s, {kind}, {plan.prefill_tokens}-token prompt", s["ours_prefill"],
                   Sample([float(s["llama_prefill"])]), "", 0)
        t.append(Row(f"resident weights, {kind} (MiB)", f"{s['resident_bytes'] / 2**20:.1f}",
                     f"{s['file_tensor_bytes'] / 2**20:.1f}", ratio(s["resident_bytes"], s["file_tensor_bytes"]),
                     "anchor: the file's tensor bytes"))
        if "decode_limit" in s:
            limit = s["decode_limit"]
            t.append(Row(f"decode limit, {kind}: read bandwidth / resident bytes", f"{limit:.1f} tok/s", "", "",
                         f"ours reach {s['ours_decode'].median / limit:.0%} of it"))
        for n in (8, 32):
            if f"streams_{n}" in s and f"f32_streams_{n}" in s:
                _ratio_row(t, f"{n} streams aggregate tok/s, {kind} vs the same weights as float32",
                           s[f"streams_{n}"], s[f"f32_streams_{n}"], "anchor: ours with --dequantize", 1)


def _llama_table(report: Report, results: dict, plan: Plan) -> None:
    from .common import Sample

    t = report.table("llama.cpp on the same weights (llama-bench, all cores)", "ours", "llama.cpp")
    rows = [(f"decode tok/s, F32, {plan.decode_tokens} tokens", "grpc_decode", "F32.decode", 1),
            (f"prefill tok/s, F32, {plan.prefill_tokens}-token prompt", "grpc_prefill", "F32.prefill", 0),
            ("decode tok/s, 8-bit (ours MLX affine g64, llama.cpp Q8_0)", "q8.ours_decode", "Q8_0.decode", 1),
            (f"prefill tok/s, 8-bit, {plan.prefill_tokens}-token prompt", "q8.ours_prefill", "Q8_0.prefill", 0)]
    for metric, ours, theirs, digits in rows:
        mine, value = _lookup(results, ours), _lookup(results["llamacpp"], theirs)
        if mine is not None and value is not None:
            note = "ours via gRPC" if ours.startswith("grpc") else "ours in-process"
            _ratio_row(t, metric, mine, Sample([float(value)]), note, digits)


def goals(plan: Plan) -> list[tuple[str, float, str, str, bool]]:
    """(goal, target ratio, ours, anchor, higher is better) with this plan's lengths."""
    return [
        ("decode 1 stream f32 vs mlx-lm", 1.15, "grpc_decode", "mlx_lm_decode", True),
        ("decode 1 stream f32 vs llama.cpp F32", 0.9, "grpc_decode", "llamacpp.F32.decode", True),
        ("decode 1 stream 8-bit vs llama.cpp Q8_0", 0.8, "q8.ours_decode", "llamacpp.Q8_0.decode", True),
        (f"prefill {plan.prefill_tokens} tokens vs llama.cpp F32", 1.0, "grpc_prefill", "llamacpp.F32.prefill", True),
        (f"prefill {plan.prefill_tokens} tokens vs mlx-lm", 2.5, "grpc_prefill", "mlx_lm_prefill", True),
        (f"prefill {plan.long_tokens} tokens vs mlx-lm", 3.0, "long.grpc_prefill", "long.mlx_lm_prefill", True),
        (f"decode at {plan.long_tokens} tokens of context vs mlx-lm", 1.5, "long.grpc_decode", "long.mlx_lm_decode",
         True),
        ("8 streams aggregate vs mlx_lm.server", 1.3, "ours_8.agg", "anchor_8.agg", True),
        ("32 streams aggregate vs mlx_lm.server", 1.2, "ours_32.agg", "anchor_32.agg", True),
        ("32 streams TTFT p50 vs mlx_lm.server (lower)", 0.8, "ours_32.ttft", "anchor_32.ttft", False),
        ("embed inputs/s, kernels vs MLX's ops", 3.0, "kernels.kernels_embed", "kernels.stock_embed", True),
        ("decode, the embedded Q4_1 file vs llama.cpp", 1.2, "gguf.Q4_1.ours_decode", "gguf.Q4_1.llama_decode", True),
        ("decode, Q4_K_M vs llama.cpp", 1.0, "gguf.Q4_K_M.ours_decode", "gguf.Q4_K_M.llama_decode", True),
        ("decode, Q8_0 vs llama.cpp", 1.0, "gguf.Q8_0.ours_decode", "gguf.Q8_0.llama_decode", True),
        (f"prefill {plan.prefill_tokens} tokens, Q4_1 vs llama.cpp", 1.5, "gguf.Q4_1.ours_prefill",
         "gguf.Q4_1.llama_prefill", True),
        (f"prefill {plan.prefill_tokens} tokens, Q4_K_M vs llama.cpp", 1.5, "gguf.Q4_K_M.ours_prefill",
         "gguf.Q4_K_M.llama_prefill", True),
        ("8 streams, Q4_1 vs the same weights as float32", 2.0, "gguf.Q4_1.streams_8", "gguf.Q4_1.f32_streams_8",
         True),
        ("32 streams, Q4_1 vs the same weights as float32", 2.0, "gguf.Q4_1.streams_32",
         "gguf.Q4_1.f32_streams_32", True),
        ("decode, Q4_1, of its limit (bandwidth / resident bytes)", 0.7, "gguf.Q4_1.ours_decode",
         "gguf.Q4_1.decode_limit", True),
        ("resident weights, Q4_1 vs the file's tensor bytes (lower)", 1.3, "gguf.Q4_1.resident_bytes",
         "gguf.Q4_1.file_tensor_bytes", False),
    ]


def _lookup(results: dict, key: str):
    node = results
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _value(results: dict, key: str) -> float:
    node = _lookup(results, key)
    if node is None:
        return math.nan
    if isinstance(node, list):
        return percentile(node, 50)
    return node.median if hasattr(node, "median") else float(node)


def _goals(report: Report, results: dict, plan: Plan) -> None:
    t = report.table("goals (ratios from this run)", "measured", "goal")
    for goal, target, ours, anchor, higher in goals(plan):
        a, b = _value(results, ours), _value(results, anchor)
        if math.isnan(a) or math.isnan(b) or not b:
            continue
        met = a / b >= target if higher else a / b <= target
        t.append(Row(goal, f"{a / b:.2f}x", f"{'>=' if higher else '<='} {target}x", "met" if met else "missed"))
