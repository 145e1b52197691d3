"""Replayed traffic: a request trace sent at its own times, or a ShareGPT dataset's conversations.

A `trace` workload (`[workload].kind = "trace"`, `trace`, `format`, `time_scale`, optional
`max_requests`, `max_duration_s`) makes each point send every kept request of the trace
(bench/traces.py) at its scheduled time from the point's start: an open loop with no cap on the
requests in flight, so a slow server never delays a later send (no coordinated omission); the
scheduled time is the request's `t_sched`. Its prompt is token ids, equal hash ids giving equal
blocks, so the record carries `shared_blocks` (of its blocks, how many an earlier request sent).
A `sharegpt` workload (`dataset`, optional `num_prompts`) sends the kept conversations' first
user turns (bench/datasets.py) with their replies' lengths as max_tokens, in the point's closed
or open loop. Paths are relative to the plan file. What the loader kept and dropped is the
manifest's `workload_source`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bench import datasets, traces
from bench.prompts import PlanError, Prompt, read_text_file

TRACE, SHAREGPT = "trace", "sharegpt"
KINDS = (TRACE, SHAREGPT)


def resolve_paths(w: Any, plan_source: str) -> None:
    """Make the workload's trace/dataset path relative to the plan file's folder absolute."""
    base = Path(plan_source).parent if plan_source and plan_source != "plan" else Path(".")
    for key in ("trace", "dataset"):
        value = getattr(w, key)
        if value and not Path(value).is_absolute():
            setattr(w, key, str(base / value))


def check_replay(w: Any, sweep: Any, src: str) -> None:
    """Refuse a trace or sharegpt workload no point could replay as written, naming the key."""
    if w.input_dist or w.output_dist:
        key = "input_dist" if w.input_dist else "output_dist"
        raise PlanError(f"{src} [workload.{key}]: a {w.kind} workload's requests have their own lengths")
    if w.kind == TRACE:
        if not w.trace:
            raise PlanError(f"{src} [workload].trace: required for kind = \"trace\"")
        if w.dataset:
            raise PlanError(f"{src} [workload].dataset: a sharegpt key; a trace workload reads "
                            "[workload].trace")
        if w.format not in traces.FORMATS:
            raise PlanError(f"{src} [workload].format: {w.format!r} is not one of "
                            f"{', '.join(traces.FORMATS)}")
        if w.api != "completions":
            raise PlanError(f"{src} [workload].api: a trace workload sends token-id prompts, so it "
                            f"needs the completions API (got {w.api!r})")
        if sweep.request_rate:
            raise PlanError(f"{src} [sweep].request_rate: a trace is sent at its own times; "
                            "give time_scale instead")
        if sweep.duration_s:
            raise PlanError(f"{src} [sweep].duration_s: a trace point sends the whole trace; "
                            "give [workload].max_duration_s instead")
        load_trace(w)  # a bad trace is refused before the round starts
        return
    for key in ("trace", "format"):
        if getattr(w, key):
            raise PlanError(f"{src} [workload].{key}: a trace's key; a sharegpt workload reads "
                            "[workload].dataset")
    if not w.dataset:
        raise PlanError(f"{src} [workload].dataset: required for kind = \"sharegpt\"")
    read_text_file(w.dataset, f"{src} [workload].dataset: {w.dataset}")


@functools.lru_cache(maxsize=4)
def _trace(path: str, fmt: str, time_scale: float, max_duration_s: float,
           max_requests: int) -> traces.Trace:
    return traces.load_trace(path, fmt, time_scale, max_duration_s or None, max_requests or None)


@functools.lru_cache(maxsize=4)
def _dataset(path: str, tokenizer_dir: str, num_prompts: int) -> datasets.Dataset:
    return datasets.load_sharegpt(path, datasets.model_token_counter(tokenizer_dir),
                                  num_prompts or None)


def load_trace(w: Any) -> traces.Trace:
    """The workload's trace, read once per process (every point replays the same requests)."""
    return _trace(w.trace, w.format, float(w.time_scale), float(w.max_duration_s),
                  int(w.max_requests))


def load_dataset(w: Any, tokenizer_dir: str | None) -> datasets.Dataset:
    """The workload's dataset, its lengths counted by the served model's tokenizer."""
    if not tokenizer_dir:
        raise PlanError("[workload].dataset: the served model's tokenizer is not known, so the "
                        "conversations' lengths cannot be counted; give [engine].model_config "
                        "(the config.json beside its tokenizer.json)")
    return _dataset(w.dataset, str(tokenizer_dir), int(w.num_prompts))


def source_facts(w: Any, tokenizer_dir: str | None) -> dict[str, Any]:
    """The manifest's `workload_source`: the file, its format and what the loader kept and dropped."""
    if w.kind == TRACE:
        t = load_trace(w)
        return {"kind": TRACE, "path": w.trace, "format": w.format, "time_scale": w.time_scale,
                "max_requests": w.max_requests or None, "max_duration_s": w.max_duration_s or None,
                "read": t.read, "kept": len(t.requests), "dropped": dict(t.dropped),
                "span_s": t.requests[-1].send_at_s}
    d = load_dataset(w, tokenizer_dir)
    return {"kind": SHAREGPT, "path": w.dataset, "format": "sharegpt",
            "num_prompts": w.num_prompts or None, "read": d.read, "kept": len(d.requests),
            "dropped": dict(d.dropped), "cut_bytes": d.cut_bytes}


def longest_request(w: Any, tokenizer_dir: str | None) -> tuple[int, int]:
    """(prompt tokens, reply tokens) of the kept request that needs the most context."""
    reqs = load_trace(w).requests if w.kind == TRACE else load_dataset(w, tokenizer_dir).requests
    worst = max(reqs, key=lambda r: r.input_len + r.output_len)
    return worst.input_len, worst.output_len


def trace_prompts(w: Any, seed: int) -> list[Prompt]:
    """Every kept trace request's prompt, in send order (request i is the trace's i-th)."""
    return [Prompt(traces.trace_prompt(r, k, seed, w.token_id_low, w.token_id_high), r.input_len,
                   r.output_len) for k, r in enumerate(load_trace(w).requests)]


def dataset_prompts(w: Any, tokenizer_dir: str | None) -> list[Prompt]:
    """The kept conversations' prompts, their replies' lengths as max_tokens, in file order."""
    return [Prompt(r.prompt, r.input_len, r.output_len)
            for r in load_dataset(w, tokenizer_dir).requests]


def trace_counts(w: Any, warmup_requests: int) -> tuple[int, int]:
    """(requests, of them warm-up) of a trace point: every kept request once, the first
    WARMUP_REQUESTS warm-up (at least one request measured)."""
    n = len(load_trace(w).requests)
    return n, min(max(warmup_requests, 0), n - 1)


def trace_schedule(w: Any, base: float) -> list[tuple[int, float]]:
    """(request index, scheduled send time) of every kept trace request, from BASE."""
    return [(i, base + r.send_at_s) for i, r in enumerate(load_trace(w).requests)]


def shared_blocks(w: Any, i: int) -> int:
    """How many of trace request I's blocks an earlier request of the trace sent."""
    return load_trace(w).requests[i].shared_blocks
