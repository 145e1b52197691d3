"""What a point costs the client: its warm-up, its prompt pool, its memory and open files."""

from __future__ import annotations

import math
import os
import resource
from typing import Any

from bench import replay, sessions
from bench.lengths import longest
from bench.plan.spec import Plan, SweepSpec
from bench.prompts import (
    PlanError,
)

# its share of the request's JSON), and per open-loop arrival time.
PROMPT_TOKEN_BYTES = 48
ARRIVAL_BYTES = 32
# Client memory per byte of a prompt file or dataset a point reads whole: the bytes read, their
# text (up to 4 bytes a character once one character needs them) and what is parsed from it (a
# token id written in 6 bytes of JSON is a 36-byte Python int and pointer).
FILE_BYTE_BYTES = 8
OPEN_FILES_RESERVED = 64   # log, bundle streams, pipes: file descriptors besides connections


def warmup_seconds(sweep: SweepSpec, rate: float) -> float:
    """How long an open loop at RATE req/s may warm up: the plan's warmup_s, else the point's
    own window (its duration, or its requests' worth of arrivals)."""
    if sweep.warmup_s > 0:
        return sweep.warmup_s
    return sweep.duration_s if sweep.duration_s > 0 else max(sweep.requests_per_point, 1) / rate


def warmup_count(sweep: SweepSpec, concurrency: int | None, rate: float | None = None) -> int:
    """Warm-up requests of a point: the plan's count; else in a closed loop one per stream (a
    request lifetime each); in an open loop the arrivals of warmup_seconds, at most one per
    slot of its cap (sized by load and by time: never the cap's worth at a slow rate)."""
    if sweep.warmup_requests >= 0:
        return sweep.warmup_requests
    if not rate:
        return concurrency or 1
    n = max(1, math.ceil(rate * warmup_seconds(sweep, rate) - 1e-9))
    return min(n, concurrency) if concurrency else n


def warmup_ends_at_first_reply(sweep: SweepSpec, rate: float | None) -> bool:
    """Whether a point's warm-up also ends when its first warm-up request ends (a request's
    lifetime): an open loop whose plan sets neither warmup_requests nor warmup_s."""
    return bool(rate) and sweep.warmup_requests < 0 and sweep.warmup_s <= 0


def prompt_pool_size(sweep: SweepSpec, concurrency: int, rate: float | None = None) -> int:
    """Prompts a point draws before it starts (each load process holds them all)."""
    warmup = warmup_count(sweep, concurrency, rate)
    if sweep.duration_s > 0:
        return min(warmup + 10**9, 4096)
    return warmup + max(sweep.requests_per_point, 1)


def host_memory_bytes() -> int:
    """Physical memory of this host."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_memory_bytes() -> int | None:
    """Memory this host can give a new process without swapping (/proc/meminfo's MemAvailable),
    None where the kernel does not say."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f.read(1 << 16).decode("ascii", "replace").splitlines():
                if line.startswith("MemAvailable:"):
                    kib = line.split()[1]
                    return int(kib) * 1024 if kib.isdigit() else None
    except OSError:
        return None
    return None


def _size(n: float) -> str:
    """N bytes in GiB, or in MiB under a tenth of one."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:,.1f} MiB"


def client_memory_budget() -> tuple[int, str]:
    """The client memory a point may need before it sends, and that bound in words: half of this
    host's memory, or what it has available now where that is less."""
    half = host_memory_bytes() // 2
    avail = available_memory_bytes()
    if avail is not None and avail < half:
        return avail, f"the {_size(avail)} this host has available (MemAvailable)"
    return half, f"half of this host's {_size(2 * half)}"


def open_files_limit() -> int:
    """The most files (sockets included) this process may raise its limit to."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard if hard != resource.RLIM_INFINITY else 1 << 20


def _file_bytes(path: str) -> int:
    """The size of the file at PATH, 0 when it cannot be read (its reader refuses it in words)."""
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return 0


def client_memory_parts(plan: Plan, point: dict[str, Any]) -> list[tuple[int, str]]:
    """What a point's client holds before its first request, each part (bytes, in words): its
    prompt pool (a trace's every kept prompt, a drawn length at its longest), a shared-prefix
    workload's prefixes, a sessions workload's histories, a prompt file or dataset read whole
    and an open loop's arrival schedule; once per load process."""
    s, w = plan.sweep, plan.workload
    C = point.get("concurrency") or 1
    procs = plan.client.workers
    parts: list[tuple[int, str]] = []
    if w.kind == replay.TRACE:
        tokens = sum(r.input_len for r in replay.load_trace(w).requests)
        parts.append((tokens * PROMPT_TOKEN_BYTES * procs, f"a trace's {tokens:,} prompt tokens"))
    elif w.kind in ("jsonl", replay.SHAREGPT):
        path = w.jsonl if w.kind == "jsonl" else w.dataset
        size = _file_bytes(path)
        parts.append((size * FILE_BYTE_BYTES * procs,
                      f"its {'prompt file' if w.kind == 'jsonl' else 'dataset'} of {size / 2**20:,.1f} MiB "
                      f"read whole, about {FILE_BYTE_BYTES} bytes held a byte"))
    else:
        n, each = prompt_pool_size(s, point.get("concurrency") if point.get("request_rate") else C,
                                   point.get("request_rate")), longest(w.input_dist, point["input_len"])
        if w.kind == "shared-prefix":
            # every prefix is drawn, however few prompts use it; a prompt keeps one token of its own
            prefixes = max(1, w.num_prefixes) * w.prefix_len
            parts.append((prefixes * PROMPT_TOKEN_BYTES * procs,
                          f"{max(1, w.num_prefixes):,} shared prefixes of {w.prefix_len:,} tokens"))
            each = max(each, w.prefix_len + 1)
        parts.append((n * each * PROMPT_TOKEN_BYTES * procs,
                      f"a pool of {n:,} prompts of up to {each:,} tokens"))
        if w.kind == sessions.KIND:
            longest_in, _ = sessions.longest_prompt(w, point["input_len"], w.output_len)
            parts.append((C * longest_in * PROMPT_TOKEN_BYTES * procs,
                          f"{C:,} users' histories of up to {longest_in:,} tokens"))
    rate = point.get("request_rate")
    if rate:
        n = (int(rate * s.duration_s) if s.duration_s > 0 else s.requests_per_point)
        parts.append(((n + warmup_count(s, point.get("concurrency"), rate)) * ARRIVAL_BYTES, f"{n:,} scheduled arrivals"))
    return parts


def client_memory_bytes(plan: Plan, point: dict[str, Any]) -> int:
    """Client memory a point needs before its first request (client_memory_parts, summed)."""
    return sum(b for b, _ in client_memory_parts(plan, point))


def check_capacity(plan: Plan, points: list[dict[str, Any]]) -> None:
    """Refuse points this host cannot hold: client memory over half of RAM (or over what it has
    available), too many sockets."""
    src = plan.source or "plan"
    budget, bound = client_memory_budget()
    for p in points:
        parts = client_memory_parts(plan, p)
        need = sum(b for b, _ in parts)
        if need > budget:
            what = ", ".join(f"{words} ({_size(b)})"
                             for b, words in sorted(parts, key=lambda x: -x[0]) if b)
            per = f" (each of {plan.client.workers} load processes holds its own)" if plan.client.workers > 1 else ""
            raise PlanError(
                f"{src}: point {p['id']} needs about {_size(need)} of client memory "
                f"before it sends a request: {what}{per}; over {bound}; lower input_len, "
                "concurrency, requests_per_point, prefix_len or num_prefixes, or use a smaller file")
    streams = max((p.get("concurrency") or 1) for p in points)
    per_process = -(-streams // plan.client.workers)
    limit = open_files_limit() - OPEN_FILES_RESERVED
    if per_process > limit:
        raise PlanError(f"{src} [sweep].concurrency: {streams} requests in flight need "
                        f"{per_process} connections per client process, over the {limit} this "
                        "host allows a process (ulimit -Hn, less files of its own); raise the "
                        "limit or use more [client].workers")
