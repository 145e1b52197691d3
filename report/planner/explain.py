"""`serving-ledger explain`: the capacity planner's command line (its flags, the model's
config read, the plan printed as text or JSON).

Given a model's config.json and a GPU name (plus, optionally, the KV memory or pool size and
a workload C / L / O), it prints what the architecture and the datasheet predict: KV bytes
per token, pool size, expected KV usage, the largest concurrency and prompt that fit, the
ridge point, arithmetic intensities, the ITL slope, and the same for an MHA counterfactual
("if this were MHA, the pool would hold 12,409 tokens and L could be at most 519 at C=16").

Capacity follows vLLM's KV layout (report.architecture.kvlayout): sliding-window layers hold at most the
window, cross-attention layers hold nothing per text token, and the pool, the largest
concurrency and the longest prompt come from the per-request KV curve. Parameters and weight
bytes count experts and quantization (report.architecture.params); a TP size vLLM refuses is refused here,
and weights or a KV budget that cannot fit the GPU are warned about (report.architecture.fit). The answer
says, in English or Chinese, what it modelled and what it did not (report.planner.notes).

The plan is `report.planner.capacity.plan`, which resolves the quantities of
`report.planner.quantities`; `report.planner.listing` prints it. Every number is a value of
the plan's ledger, from a pure function, so a value that cannot be computed is null with a
reason, never 0. Bad input gives one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from report.architecture.gpus import known_gpu_names
from report.architecture.modelconfig import parse_config_json
from report.ledger import Absent
from report.planner.capacity import plan
from report.planner.listing import plan_json, plan_text
from report.words import LANGS

PROG = "serving-ledger explain"


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
DTYPES = ("auto", "bfloat16", "float16", "float32")


def _fraction(text: str) -> float:
    """An argparse type: a number in (0, 1]."""
    v = _positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction of at most 1, got {text!r}")
    return v


DESCRIPTION = ("Capacity planner: what the architecture and the GPU datasheet predict for KV "
               "capacity, concurrency and the roofline.")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger explain`."""
    ap.add_argument("--model", required=True, metavar="CONFIG_JSON_OR_DIR",
                    help="a model's config.json, or a directory that holds one")
    ap.add_argument("--gpu", required=True, metavar="NAME",
                    help='NVML device name or alias, e.g. "NVIDIA GeForce RTX 4090", "H200"')
    ap.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size (default 1)")
    ap.add_argument("--dtype", choices=DTYPES, default="auto",
                    help="as vLLM's --dtype (default auto: the config's, float32 served in bfloat16)")
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
                      help='KV pool per GPU in tokens per KV group, as the log\'s "GPU KV cache size: '
                           'N tokens" for a model with one group')
    pool.add_argument("--kv-pool-blocks", type=_positive_int, metavar="N",
                      help="KV pool per GPU in blocks, as cache_config_info's num_gpu_blocks")
    ap.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9, metavar="F",
                    help="as vLLM's flag (default 0.9): the share of GPU memory vLLM may use")
    ap.add_argument("--max-model-len", type=_positive_int, metavar="N",
                    help="as vLLM's flag (default: the config's max_position_embeddings)")
    ap.add_argument("--max-num-batched-tokens", type=_positive_int, metavar="N",
                    help="as vLLM's flag (default: vLLM 0.32's default for the GPU's memory)")
    ap.add_argument("--lang", choices=LANGS, default="en", help="language of the text output")
    ap.add_argument("--json", action="store_true", help="print one flat JSON object instead of text")


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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}") from None
    try:
        return parse_config_json(text), path
    except Absent as e:
        raise InputError(f"{path}: {e}") from None


def _fail(message: str) -> int:
    """One line on stderr, exit status 2."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """`serving-ledger explain`: 0 on success, 2 with one line on stderr for bad input."""
    try:
        config, path = load_config(args.model)
    except InputError as e:
        return _fail(str(e))
    settings = {
        "model": str(path), "tp": args.tp, "dtype": args.dtype, "kv_dtype": args.kv_dtype,
        "block_size": args.block_size, "concurrency": args.concurrency, "input_len": args.input_len,
        "output_len": args.output_len, "kv_memory_gib": args.kv_memory_gib,
    }
    try:
        p = plan(config, args.gpu, tp=args.tp, dtype=args.dtype, kv_dtype=args.kv_dtype,
                 block_size=args.block_size, concurrency=args.concurrency, input_len=args.input_len,
                 output_len=args.output_len, kv_memory_gib=args.kv_memory_gib,
                 kv_pool_tokens=args.kv_pool_tokens, kv_pool_blocks=args.kv_pool_blocks,
                 gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                 max_num_batched_tokens=args.max_num_batched_tokens)
    except Absent as e:
        return _fail(f"{path}: {e}")
    except LookupError:
        return _fail(f"unknown GPU {args.gpu!r}; the table knows: {', '.join(known_gpu_names())}")
    if args.json:
        print(json.dumps(plan_json(p, settings, args.lang), ensure_ascii=False))
    else:
        sys.stdout.write(plan_text(p, settings, args.lang))
    return 0
