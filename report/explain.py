"""`python -m report explain`: a capacity planner over the theory ledger.

Given a model's config.json and a GPU name (plus, optionally, the KV memory or pool size and
a workload C / L / O), it prints what the architecture and the datasheet predict: KV bytes
per token, pool size, expected KV usage, the largest concurrency and prompt that fit, the
ridge point, arithmetic intensities, the ITL slope, and the same for an MHA counterfactual
("if this were MHA, the pool would hold 12,409 tokens and L could be at most 519 at C=16").

Every number is a `Ledger.derive` of a `report.theory` function, so a value that cannot be
computed is null with a reason, never 0. Bad input gives one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import unicodedata
from pathlib import Path
from typing import Any

from report import theory as th
from report.gpus import known_gpu_names, lookup_gpu, normalize_dtype
from report.ledger import Absent, Ledger, Value

PROG = "python -m report explain"


class _UsageError(Exception):
    """A bad flag or flag value; main turns it into one line on stderr and exit 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting."""

    def error(self, message: str):
        """Raise _UsageError with argparse's message."""
        raise _UsageError(message)


def _positive_int(text: str) -> int:
    """An argparse type: an integer ≥ 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {v}")
    return v


def _non_negative_int(text: str) -> int:
    """An argparse type: an integer ≥ 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {v}")
    return v


def _positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")


def build_parser() -> argparse.ArgumentParser:
    """The explain command's flags."""
    ap = _Parser(prog=PROG, description="Capacity planner: what the architecture and the GPU "
                 "datasheet predict for KV capacity, concurrency and the roofline.")
    ap.add_argument("--model", required=True, metavar="CONFIG_JSON_OR_DIR",
                    help="a model's config.json, or a directory that holds one")
    ap.add_argument("--gpu", required=True, metavar="NAME",
                    help='NVML device name or alias, e.g. "NVIDIA GeForce RTX 4090", "H200"')
    ap.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size (default 1)")
    ap.add_argument("--kv-dtype", choices=KV_DTYPES, default="auto",
                    help="KV cache dtype, as vLLM's --kv-cache-dtype (default auto = model dtype)")
    ap.add_argument("--block-size", type=_positive_int, default=16, help="KV block size in tokens (default 16)")
    ap.add_argument("--concurrency", type=_positive_int, metavar="C", help="concurrent requests")
    ap.add_argument("--input-len", type=_non_negative_int, metavar="L", help="prompt tokens per request")
    ap.add_argument("--output-len", type=_non_negative_int, metavar="O", help="output tokens per request")
    pool = ap.add_mutually_exclusive_group()
    pool.add_argument("--kv-memory-gib", type=_positive_float, metavar="X",
                      help='KV memory per GPU, as the log\'s "Available KV cache memory: X GiB"')
    pool.add_argument("--kv-pool-tokens", type=_positive_int, metavar="N",
                      help='KV pool per GPU, as the log\'s "GPU KV cache size: N tokens"')
    ap.add_argument("--lang", choices=("zh", "en"), default="en", help="language of the text output")
    ap.add_argument("--json", action="store_true", help="print one flat JSON object instead of text")
    return ap


class InputError(Exception):
    """A model path or config that cannot be read; the message says why in one line."""


def load_config(path_text: str) -> tuple[dict[str, Any], Path]:
    """The config.json at PATH (or inside the directory PATH) as a dict, and the file it came from."""
    path = Path(path_text)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError(f"no model config at {path}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path} does not hold a JSON object")
    return config, path


# --------------------------------------------------------------------------------------------
# The plan: a small ledger of theory values
# --------------------------------------------------------------------------------------------


def _given(ledger: Ledger, key: str, value: Any, flag: str, doc: str, unit: str = "") -> Value:
    """Record a command-line input; when it was not given the reason names the flag."""
    return ledger.record(key, value, unit=unit, doc=doc, missing=f"not given ({flag})")


def _mean_context(input_len: int, output_len: int) -> float:
    """Mean context a request has while it decodes: in + out/2."""
    return input_len + output_len / 2


def _gib_to_bytes(kv_memory_gib: float) -> float:
    """Bytes in X GiB."""
    return kv_memory_gib * th.GIB


def _pool_times_bytes(pool_tokens: int, kv_bytes_per_token: int) -> int:
    """KV memory the pool occupies: pool tokens × KV bytes per token."""
    return pool_tokens * kv_bytes_per_token


def _times(count: int, concurrency: int) -> int:
    """A per-request count times C requests."""
    return count * concurrency


def _peak(spec, dtype: str, sparse: bool) -> float:
    """The GPU's tensor peak for the model's dtype."""
    return spec.peak_flops(dtype, sparse=sparse)


def plan(config: dict[str, Any], gpu_name: str, *, tp: int = 1, kv_dtype: str = "auto",
         block_size: int = 16, concurrency: int | None = None, input_len: int | None = None,
         output_len: int | None = None, kv_memory_gib: float | None = None,
         kv_pool_tokens: int | None = None) -> tuple[Ledger, th.ModelShape, Any]:
    """The capacity plan as a Ledger; Absent from the config, LookupError for an unknown GPU."""
    shape = th.model_shape(config)
    spec = lookup_gpu(gpu_name)
    if spec is None:
        raise LookupError(gpu_name)
    lg = Ledger()
    src = ("config.json",)
    C = _given(lg, "concurrency", concurrency, "--concurrency", "Concurrent requests")
    L = _given(lg, "input_len", input_len, "--input-len", "Prompt tokens per request", "tokens")
    out_len = _given(lg, "output_len", output_len, "--output-len", "Output tokens per request", "tokens")
    gib = _given(lg, "kv_memory_gib", kv_memory_gib, "--kv-memory-gib", "KV memory per GPU", "GiB")
    d = lg.derive

    d("kv_dtype_bytes", th.kv_cache_dtype_bytes, unit="B", kv_cache_dtype=kv_dtype,
      model_dtype_bytes=shape.dtype_bytes)
    kv = d("kv_bytes_per_token", th.model_kv_bytes_per_token, unit="B", sources=src,
           config=shape, kv_cache_dtype=kv_dtype, tp=tp)
    mha = d("mha_kv_bytes_per_token", th.model_mha_kv_bytes_per_token, unit="B", sources=src,
            config=shape, kv_cache_dtype=kv_dtype, tp=tp)
    if kv_memory_gib is not None:
        mem = d("kv_memory_bytes", _gib_to_bytes, unit="B", kv_memory_gib=gib)
        pool = d("kv_pool_tokens", th.kv_pool_tokens_from_memory, unit="tokens",
                 kv_memory_bytes=mem, kv_bytes_per_token=kv, block_size=block_size)
        # The same memory cut into MHA-sized blocks.
        mha_pool = d("mha_kv_pool_tokens", th.kv_pool_tokens_from_memory, unit="tokens",
                     kv_memory_bytes=mem, kv_bytes_per_token=mha, block_size=block_size)
    elif kv_pool_tokens is not None:
        pool = lg.record("kv_pool_tokens", kv_pool_tokens, unit="tokens",
                         doc="KV pool per GPU as logged (--kv-pool-tokens)")
        d("kv_memory_bytes", _pool_times_bytes, unit="B", pool_tokens=pool, kv_bytes_per_token=kv)
        # Only the token count is known, so scale it by the bytes ratio (the seeds' 86,864 / 7).
        mha_pool = d("mha_kv_pool_tokens", th.pool_tokens_at_kv_bytes, unit="tokens",
                     pool_tokens=pool, kv_bytes_per_token=kv, other_kv_bytes_per_token=mha)
    else:
        why = "give --kv-memory-gib or --kv-pool-tokens"
        lg.record("kv_memory_bytes", None, unit="B", doc="KV memory per GPU", missing=why)
        pool = lg.record("kv_pool_tokens", None, unit="tokens", doc="KV pool per GPU", missing=why)
        mha_pool = lg.record("mha_kv_pool_tokens", None, unit="tokens", doc="KV pool if MHA", missing=why)

    dtype = normalize_dtype(shape.dtype)
    table = ("report/data/gpus.toml",)
    no_row = "the GPU table row does not give it"
    peak = d("peak_flops", _peak, unit="FLOP/s", sources=table, spec=spec, dtype=dtype, sparse=False)
    d("peak_flops_sparse", _peak, unit="FLOP/s", sources=table, spec=spec, dtype=dtype, sparse=True)
    bw = lg.record("peak_bandwidth", spec.memory_bandwidth, unit="B/s", sources=table,
                   doc=f"Peak memory bandwidth of the {spec.name}", missing=no_row)
    lg.record("power_limit_w", spec.power_limit_w, unit="W", sources=table,
              doc=f"Power limit of the {spec.name}", missing=no_row)
    lg.record("gpu_memory_bytes", spec.memory_bytes, unit="B", sources=table,
              doc=f"Memory of the {spec.name}", missing=no_row)
    d("ridge_flops_per_byte", th.ridge_flops_per_byte, unit="FLOP/B", peak_flops=peak, peak_bandwidth=bw)

    peak_t = d("request_peak_tokens", th.request_peak_tokens, unit="tokens",
               input_len=L, output_len=out_len, block_size=block_size)
    mean_t = d("request_mean_tokens", th.request_mean_tokens, unit="tokens",
               input_len=L, output_len=out_len, block_size=block_size)
    d("expected_kv_peak_fraction", th.expected_kv_peak_fraction, unit="fraction",
      concurrency=C, peak_tokens=peak_t, pool_tokens=pool)
    d("expected_kv_mean_fraction", th.expected_kv_mean_fraction, unit="fraction",
      concurrency=C, mean_tokens=mean_t, pool_tokens=pool)
    waste = d("block_alignment_waste_tokens", th.block_alignment_waste_tokens, unit="tokens",
              input_len=L, output_len=out_len, block_size=block_size)
    d("block_alignment_waste_tokens_total", _times, unit="tokens", count=waste, concurrency=C)
    d("max_concurrency", th.max_concurrency, pool_tokens=pool, input_len=L, output_len=out_len,
      block_size=block_size)
    d("max_input_len_at_concurrency", th.max_input_len_at_concurrency, unit="tokens",
      pool_tokens=pool, concurrency=C, output_len=out_len)
    d("max_input_len_at_concurrency_whole_blocks", th.max_input_len_at_concurrency_whole_blocks,
      unit="tokens", pool_tokens=pool, concurrency=C, output_len=out_len, block_size=block_size)
    d("mha_max_concurrency", th.max_concurrency, pool_tokens=mha_pool, input_len=L, output_len=out_len,
      block_size=block_size)
    d("mha_max_input_len_at_concurrency", th.max_input_len_at_concurrency, unit="tokens",
      pool_tokens=mha_pool, concurrency=C, output_len=out_len)
    d("itl_kv_slope_ms_per_token", th.itl_kv_slope_ms_per_token, unit="ms/token",
      concurrency=C, kv_bytes_per_token=kv, peak_bandwidth=bw)

    n = d("params_non_embedding", th.model_params_non_embedding, sources=src, config=shape)
    d("weight_bytes", th.weight_bytes, unit="B", params_non_embedding=n, vocab=shape.vocab,
      hidden=shape.hidden, dtype_bytes=shape.dtype_bytes, tied_embeddings=shape.tied_embeddings)
    w_read = d("weight_bytes_read_per_step", th.weight_bytes_read_per_step, unit="B",
               params_non_embedding=n, vocab=shape.vocab, hidden=shape.hidden,
               dtype_bytes=shape.dtype_bytes)
    d("flops_per_token", th.flops_per_token, unit="FLOP", params_non_embedding=n,
      attention_width=shape.attention_width, layers=shape.layers)
    d("attention_flops_per_context_token", th.attention_flops_per_context_token, unit="FLOP",
      attention_width=shape.attention_width, layers=shape.layers)
    ctx = d("decode_context_len", _mean_context, unit="tokens", input_len=L, output_len=out_len)
    d("decode_arithmetic_intensity", th.decode_arithmetic_intensity, unit="FLOP/B",
      concurrency=C, context_len=ctx, params_non_embedding=n, attention_width=shape.attention_width,
      layers=shape.layers, weight_bytes=w_read, kv_bytes_per_token=kv, tp=tp)
    d("prefill_arithmetic_intensity", th.prefill_arithmetic_intensity, unit="FLOP/B",
      input_len=L, params_non_embedding=n, weight_bytes=w_read)
    return lg, shape, spec


# Keys of the JSON object, in order. Settings first, then derived values.
JSON_KEYS = (
    "kv_dtype_bytes", "kv_bytes_per_token", "kv_memory_bytes", "kv_pool_tokens",
    "peak_flops", "peak_flops_sparse", "peak_bandwidth", "power_limit_w", "gpu_memory_bytes",
    "ridge_flops_per_byte",
    "request_peak_tokens", "request_mean_tokens",
    "expected_kv_peak_fraction", "expected_kv_mean_fraction",
    "block_alignment_waste_tokens", "block_alignment_waste_tokens_total",
    "max_concurrency", "max_input_len_at_concurrency", "max_input_len_at_concurrency_whole_blocks",
    "itl_kv_slope_ms_per_token",
    "params_non_embedding", "weight_bytes", "weight_bytes_read_per_step",
    "flops_per_token", "attention_flops_per_context_token", "decode_context_len",
    "decode_arithmetic_intensity", "prefill_arithmetic_intensity",
    "mha_kv_bytes_per_token", "mha_kv_pool_tokens", "mha_max_concurrency",
    "mha_max_input_len_at_concurrency",
)


def plan_json(lg: Ledger, shape: th.ModelShape, spec: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """One flat JSON-ready dict: settings, the model's shape, the GPU, and every derived value (null when absent)."""
    out: dict[str, Any] = {
        "model": settings["model"], "gpu": spec.name, "gpu_source": spec.source,
        "tp": settings["tp"], "kv_cache_dtype": settings["kv_dtype"], "block_size": settings["block_size"],
        "concurrency": settings["concurrency"], "input_len": settings["input_len"],
        "output_len": settings["output_len"], "kv_memory_gib": settings["kv_memory_gib"],
        "layers": shape.layers, "hidden": shape.hidden, "heads": shape.heads,
        "kv_heads": shape.kv_heads, "head_dim": shape.head_dim, "attention": shape.attention_kind,
        "dtype": shape.dtype, "dtype_bytes": shape.dtype_bytes,
        "peak_flops_kind": spec.peak_label(normalize_dtype(shape.dtype)),
    }
    for k in JSON_KEYS:
        out[k] = lg[k].value
    return out


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------

WORDS = {
    "en": {
        "model": "Model", "gpu": "GPU", "settings": "Settings", "workload": "Workload",
        "layers": "layers", "heads": "Q heads", "kv_heads": "KV heads",
        "kv": "KV cache", "capacity": "Capacity", "roofline": "Roofline", "mha": "MHA counterfactual",
        "absent": "—", "because": "because",
        "peak_used": "MFU would divide by the dense {dtype} tensor peak (not the 2:4-sparse one).",
        "kv_dtype_bytes": "KV element size",
        "kv_bytes_per_token": "KV bytes per token (per GPU)",
        "kv_memory_bytes": "KV memory (per GPU)",
        "kv_pool_tokens": "KV pool",
        "request_peak_tokens": "Tokens per request at its end (block-rounded)",
        "request_mean_tokens": "Tokens per request on average (block-rounded)",
        "expected_kv_peak_fraction": "Expected peak KV usage",
        "expected_kv_mean_fraction": "Expected mean KV usage",
        "block_alignment_waste_tokens": "Block-rounding waste per request",
        "block_alignment_waste_tokens_total": "Block-rounding waste, all C requests",
        "max_concurrency": "Most requests that fit at once",
        "max_input_len_at_concurrency": "Longest prompt at this C (pool/C − out)",
        "max_input_len_at_concurrency_whole_blocks": "Longest prompt at this C, whole blocks",
        "peak_flops": "Peak tensor FLOP/s (dense)",
        "peak_flops_sparse": "Peak tensor FLOP/s (2:4 sparse)",
        "peak_bandwidth": "Peak memory bandwidth",
        "power_limit_w": "Power limit",
        "ridge_flops_per_byte": "Ridge point",
        "itl_kv_slope_ms_per_token": "ITL slope from KV reads",
        "params_non_embedding": "Non-embedding parameters N",
        "weight_bytes": "Weights in memory",
        "weight_bytes_read_per_step": "Weights read per step",
        "flops_per_token": "FLOPs per token (2N)",
        "attention_flops_per_context_token": "Attention FLOPs per context token",
        "decode_context_len": "Mean decode context (in + out/2)",
        "decode_arithmetic_intensity": "Decode step arithmetic intensity",
        "prefill_arithmetic_intensity": "Prefill arithmetic intensity",
        "mha_kv_bytes_per_token": "KV bytes per token if MHA",
        "mha_kv_pool_tokens": "KV pool if MHA",
        "mha_max_concurrency": "Most requests that fit if MHA",
        "mha_max_input_len_at_concurrency": "Longest prompt at this C if MHA",
        "mha_sentence": "If this were MHA ({heads} KV heads), a token would take {kib} KiB, the pool "
                        "would hold {pool} tokens and L could be at most {maxl} at C={c}.",
        "mha_sentence_short": "If this were MHA ({heads} KV heads), a token would take {kib} KiB and "
                              "the pool would hold {pool} tokens.",
        "already_mha": "The model already has one KV head per query head (MHA).",
    },
    "zh": {
        "model": "模型", "gpu": "GPU", "settings": "设置", "workload": "负载",
        "layers": "层", "heads": "Q head", "kv_heads": "KV head",
        "kv": "KV 缓存", "capacity": "容量", "roofline": "屋顶线", "mha": "MHA 反事实",
        "absent": "—", "because": "原因",
        "peak_used": "MFU 的分母取 {dtype} 张量核心「稠密」峰值(不是 2:4 稀疏峰值)。",
        "kv_dtype_bytes": "KV 元素字节数",
        "kv_bytes_per_token": "每 token 的 KV 字节(每卡)",
        "kv_memory_bytes": "KV 显存(每卡)",
        "kv_pool_tokens": "KV 池",
        "request_peak_tokens": "单请求结束时占用(按块取整)",
        "request_mean_tokens": "单请求平均占用(按块取整)",
        "expected_kv_peak_fraction": "预期 KV 峰值占用",
        "expected_kv_mean_fraction": "预期 KV 平均占用",
        "block_alignment_waste_tokens": "每请求块对齐浪费",
        "block_alignment_waste_tokens_total": "C 条请求的块对齐浪费",
        "max_concurrency": "池子能同时容纳的请求数",
        "max_input_len_at_concurrency": "该并发下最长输入(池/C − 输出)",
        "max_input_len_at_concurrency_whole_blocks": "该并发下最长输入(整块)",
        "peak_flops": "张量核心峰值(稠密)",
        "peak_flops_sparse": "张量核心峰值(2:4 稀疏)",
        "peak_bandwidth": "显存带宽峰值",
        "power_limit_w": "功耗上限",
        "ridge_flops_per_byte": "脊点",
        "itl_kv_slope_ms_per_token": "KV 读取带来的 ITL 斜率",
        "params_non_embedding": "非嵌入参数量 N",
        "weight_bytes": "权重占用",
        "weight_bytes_read_per_step": "每步读取的权重",
        "flops_per_token": "每 token FLOPs(2N)",
        "attention_flops_per_context_token": "每个上下文 token 的注意力 FLOPs",
        "decode_context_len": "解码平均上下文(输入 + 输出/2)",
        "decode_arithmetic_intensity": "decode 步算术强度",
        "prefill_arithmetic_intensity": "prefill 算术强度",
        "mha_kv_bytes_per_token": "若为 MHA,每 token 的 KV 字节",
        "mha_kv_pool_tokens": "若为 MHA,KV 池",
        "mha_max_concurrency": "若为 MHA,能同时容纳的请求数",
        "mha_max_input_len_at_concurrency": "若为 MHA,该并发下最长输入",
        "mha_sentence": "如果是 MHA({heads} 个 KV head),每 token 要 {kib} KiB,池子只能放 {pool} "
                        "token,C={c} 时 L 最多 {maxl}。",
        "mha_sentence_short": "如果是 MHA({heads} 个 KV head),每 token 要 {kib} KiB,池子只能放 "
                              "{pool} token。",
        "already_mha": "该模型本来就是每个 Q head 一个 KV head(MHA)。",
    },
}

# How each key is printed: (kind, digits)
FORMATS = {
    "kv_dtype_bytes": "B", "kv_bytes_per_token": "B_kib", "kv_memory_bytes": "B_gib",
    "kv_pool_tokens": "tokens", "request_peak_tokens": "tokens", "request_mean_tokens": "tokens",
    "expected_kv_peak_fraction": "pct", "expected_kv_mean_fraction": "pct",
    "block_alignment_waste_tokens": "tokens", "block_alignment_waste_tokens_total": "tokens",
    "max_concurrency": "int", "max_input_len_at_concurrency": "tokens",
    "max_input_len_at_concurrency_whole_blocks": "tokens",
    "peak_flops": "tflops", "peak_flops_sparse": "tflops", "peak_bandwidth": "gbs",
    "power_limit_w": "watts", "ridge_flops_per_byte": "fpb",
    "itl_kv_slope_ms_per_token": "ms_tok", "params_non_embedding": "giga",
    "weight_bytes": "B_gb", "weight_bytes_read_per_step": "B_gb", "flops_per_token": "gflop",
    "attention_flops_per_context_token": "gflop6", "decode_context_len": "tokens",
    "decode_arithmetic_intensity": "fpb", "prefill_arithmetic_intensity": "fpb",
    "mha_kv_bytes_per_token": "B_kib", "mha_kv_pool_tokens": "tokens", "mha_max_concurrency": "int",
    "mha_max_input_len_at_concurrency": "tokens",
}

SECTIONS = (
    ("kv", ("kv_dtype_bytes", "kv_bytes_per_token", "kv_memory_bytes", "kv_pool_tokens")),
    ("capacity", ("request_peak_tokens", "request_mean_tokens", "expected_kv_peak_fraction",
                  "expected_kv_mean_fraction", "block_alignment_waste_tokens",
                  "block_alignment_waste_tokens_total", "max_concurrency",
                  "max_input_len_at_concurrency", "max_input_len_at_concurrency_whole_blocks")),
    ("roofline", ("peak_flops", "peak_flops_sparse", "peak_bandwidth", "power_limit_w",
                  "ridge_flops_per_byte", "params_non_embedding", "weight_bytes",
                  "weight_bytes_read_per_step", "flops_per_token", "attention_flops_per_context_token",
                  "decode_context_len", "decode_arithmetic_intensity", "prefill_arithmetic_intensity",
                  "itl_kv_slope_ms_per_token")),
    ("mha", ("mha_kv_bytes_per_token", "mha_kv_pool_tokens", "mha_max_concurrency",
             "mha_max_input_len_at_concurrency")),
)


def display_width(text: str) -> int:
    """Columns TEXT takes in a terminal (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def format_number(value: Any, kind: str, lang: str = "en") -> str:
    """A value printed for the text listing, with thousands separators and a unit."""
    v = value
    tok = "token" if lang == "zh" else "tokens"
    if kind == "B":
        return f"{v:,} B"
    if kind == "B_kib":
        return f"{v:,} B ({v / 1024:,.1f} KiB)"
    if kind == "B_gib":
        return f"{v:,.0f} B ({v / th.GIB:,.2f} GiB)"
    if kind == "B_gb":
        return f"{v / 1e9:,.2f} GB ({v / th.GIB:,.2f} GiB)"
    if kind == "tokens":
        return f"{v:,.0f} {tok}" if float(v).is_integer() else f"{v:,.1f} {tok}"
    if kind == "int":
        return f"{v:,}"
    if kind == "pct":
        return f"{v * 100:.1f} %"
    if kind == "tflops":
        return f"{v / 1e12:,.1f} TFLOP/s"
    if kind == "gbs":
        return f"{v / 1e9:,.0f} GB/s"
    if kind == "watts":
        return f"{v:,.0f} W"
    if kind == "fpb":
        return f"{v:,.1f} FLOP/B"
    if kind == "ms_tok":
        return f"{v:.5f} ms/token"
    if kind == "giga":
        return f"{v / 1e9:,.2f} × 10⁹ ({v:,})"
    if kind == "gflop":
        return f"{v / 1e9:,.2f} GFLOP"
    if kind == "gflop6":
        return f"{v / 1e9:.6f} GFLOP ({v:,} FLOP)"
    return str(v)


def plan_text(lg: Ledger, shape: th.ModelShape, spec: Any, settings: dict[str, Any], lang: str) -> str:
    """The plan as a short listing in LANG (zh or en): settings, then each value or the reason it is absent."""
    w = WORDS[lang]
    dtype = normalize_dtype(shape.dtype)
    lines = [
        f"{w['model']}: {settings['model']} · {shape.layers} {w['layers']} · {shape.attention_kind} "
        f"{shape.heads} {w['heads']} / {shape.kv_heads} {w['kv_heads']} · head_dim {shape.head_dim} · {shape.dtype}",
        f"{w['gpu']}: {spec.name} ({spec.source})",
        f"{w['settings']}: TP {settings['tp']} · --kv-cache-dtype {settings['kv_dtype']} · "
        f"block {settings['block_size']}",
        f"{w['workload']}: C={_or_dash(settings['concurrency'])} L={_or_dash(settings['input_len'])} "
        f"O={_or_dash(settings['output_len'])}",
        w["peak_used"].format(dtype=dtype),
    ]
    width = max(display_width(w[k]) for _, keys in SECTIONS for k in keys)
    for title, keys in SECTIONS:
        lines.append("")
        lines.append(f"[{w[title]}]")
        for k in keys:
            v = lg[k]
            shown = (format_number(v.value, FORMATS[k], lang) if v.present
                     else f"{w['absent']} ({w['because']}: {v.missing})")
            pad = " " * (width - display_width(w[k]))
            lines.append(f"  {w[k]}{pad}  {shown}")
    lines.append("")
    lines.append(_mha_sentence(lg, shape, settings, w))
    return "\n".join(lines) + "\n"


def _or_dash(v: Any) -> str:
    """V, or a dash when not given."""
    return "—" if v is None else f"{v:,}"


def _mha_sentence(lg: Ledger, shape: th.ModelShape, settings: dict[str, Any], w: dict[str, str]) -> str:
    """The one-sentence MHA counterfactual, as far as the inputs reach."""
    if not shape.is_mla and shape.kv_heads == shape.heads:
        return w["already_mha"]
    mha, pool, maxl = lg["mha_kv_bytes_per_token"], lg["mha_kv_pool_tokens"], lg["mha_max_input_len_at_concurrency"]
    if not (mha.present and pool.present):
        return ""
    fields = {"heads": shape.heads, "kib": f"{mha.value / 1024:,.1f}", "pool": f"{pool.value:,}"}
    if maxl.present:
        return w["mha_sentence"].format(**fields, maxl=f"{maxl.value:,}", c=settings["concurrency"])
    return w["mha_sentence_short"].format(**fields)


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def _fail(message: str) -> int:
    """One line on stderr, exit status 2."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    """Run `python -m report explain ARGV`; 0 on success, 2 with one line on stderr for bad input."""
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as e:
        return _fail(str(e))
    except SystemExit as e:  # --help prints and exits 0
        return e.code if isinstance(e.code, int) else 0
    try:
        config, path = load_config(args.model)
    except InputError as e:
        return _fail(str(e))
    settings = {
        "model": str(path), "tp": args.tp, "kv_dtype": args.kv_dtype, "block_size": args.block_size,
        "concurrency": args.concurrency, "input_len": args.input_len, "output_len": args.output_len,
        "kv_memory_gib": args.kv_memory_gib,
    }
    try:
        lg, shape, spec = plan(config, args.gpu, tp=args.tp, kv_dtype=args.kv_dtype,
                               block_size=args.block_size, concurrency=args.concurrency,
                               input_len=args.input_len, output_len=args.output_len,
                               kv_memory_gib=args.kv_memory_gib, kv_pool_tokens=args.kv_pool_tokens)
    except Absent as e:
        return _fail(f"{path}: {e}")
    except LookupError:
        return _fail(f"unknown GPU {args.gpu!r}; the table knows: {', '.join(known_gpu_names())}")
    if args.json:
        print(json.dumps(plan_json(lg, shape, spec, settings), ensure_ascii=False))
    else:
        sys.stdout.write(plan_text(lg, shape, spec, settings, args.lang))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
