"""The types of every sample stream's fields, checked where a record is written and where it is read.

A record may hold fields not listed here (a later collector's additions); a listed field, when
present, must have its type. `null` is allowed only where the collector writes it (a value the
server or NVML did not give). A type error names the field, so the reader's message names file,
line and field.
"""

from __future__ import annotations

from typing import Any, Callable

from bundle.gpu_fields import GPM_FIELDS

Check = Callable[[Any], bool]

# The largest token count a chunk may carry: the request table holds counts in int32.
MAX_COUNT = 2**31 - 1


def number(v: Any) -> bool:
    """A JSON number (not a boolean)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def integer(v: Any) -> bool:
    """A JSON integer (not a boolean)."""
    return isinstance(v, int) and not isinstance(v, bool)


def text(v: Any) -> bool:
    return isinstance(v, str)


def boolean(v: Any) -> bool:
    return isinstance(v, bool)


def obj(v: Any) -> bool:
    return isinstance(v, dict)


def array(v: Any) -> bool:
    return isinstance(v, list)


def nullable(check: Check) -> Check:
    """CHECK, or null."""
    def ok(v: Any) -> bool:
        return v is None or check(v)
    ok.__doc__ = f"{check.__doc__ or check.__name__}, or null"
    ok.__name__ = f"{check.__name__} or null"
    return ok


def numbers_by_name(v: Any) -> bool:
    """An object of numbers or nulls (a scrape's samples)."""
    return isinstance(v, dict) and all(x is None or number(x) for x in v.values())


def count(v: Any) -> bool:
    """A JSON integer at or above 0."""
    return integer(v) and v >= 0


def chunk_pairs(v: Any) -> bool:
    """A list of [time, tokens or null] pairs, tokens a whole number up to MAX_COUNT."""
    return isinstance(v, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and number(p[0])
        and (p[1] is None or (integer(p[1]) and 0 <= p[1] <= MAX_COUNT)) for p in v)


# What each word names in a message.
WHAT = {number: "a number", integer: "an integer", text: "a string", boolean: "true or false",
        obj: "an object", array: "a list", numbers_by_name: "an object of numbers",
        chunk_pairs: "a list of [time, tokens or null] pairs",
        count: "a whole number at or above 0"}

# "search": a search sweep's verdict on a point (met_slo), which chose the next one.
POINT_EVENTS = ("start", "measure", "end", "server_start", "server_ready", "server_stop", "search")
POINT_STATUSES = ("ok", "failed")

# The fields of a point's `settings` (bench/plan.py Plan.points writes them).
SETTINGS: dict[str, Check] = {
    "id": text, "server_flags": array, "server_set": count, "input_len": count,
    "output_len": count, "arrival": text, "concurrency": nullable(count),
    "request_rate": nullable(number), "ramp_s": number, "ramp": text,
}

STREAMS: dict[str, dict[str, Check]] = {
    "points": {"t": number, "event": text, "point": nullable(text), "settings": obj,
               "status": text, "reason": nullable(text), "seed": integer, "server_set": count,
               "command": nullable(array), "mode": text, "met_slo": boolean},
    "metrics": {"t": number, "dt": number, "ok": boolean, "samples": numbers_by_name,
                "error": text},
    "dcgm": {"t": number, "dt": number, "ok": boolean, "samples": numbers_by_name, "error": text},
    "gpu": {"t": number, "gpu": count, "power_w": nullable(number),
            "power_limit_w": nullable(number), "temperature_c": nullable(number),
            "sm_clock_mhz": nullable(number), "mem_clock_mhz": nullable(number),
            "gpu_util_pct": nullable(number), "mem_util_pct": nullable(number),
            "mem_used_bytes": nullable(number), "energy_mj": nullable(number),
            "throttle_reasons": nullable(count), "pstate": nullable(integer),
            "unsupported": array, "errors": obj,
            **{name: nullable(number) for name in GPM_FIELDS}},
    "client": {"t": number, "loop_lag_s": number, "tasks": count, "reads": count,
               "reads_kernel_stamped": count, "read_wait_max_s": number},
    # A Ray round's worker per point (bench/ray_cluster.py): status "ok", "died" or "lost".
    "shards": {"t": number, "point": text, "worker": count, "node": nullable(text),
               "status": text, "error": nullable(text), "planned": nullable(count),
               "sent": nullable(count), "done": nullable(count), "errors": nullable(count),
               "clock_offset_s": nullable(number), "clock_uncertainty_s": nullable(number),
               "clock_rtt_s": nullable(number), "clock_probes": nullable(count)},
    "host": {"t": number, "cores": count, "cpu_busy_s": number, "cpu_total_s": number,
             "client_cpu_s": number, "engine_cpu_s": nullable(number)},
}

# A trace request's prompt is blocks of this many tokens (Mooncake's hash ids); its record's
# `shared_blocks` counts the leading ones an earlier request of the trace sent.
TRACE_BLOCK_TOKENS = 512

# Request records (bundle/request_table.py reads them into columns).
REQUEST: dict[str, Check] = {
    "point": text, "i": integer, "warmup": boolean, "status": text, "error": nullable(text),
    "t_slot": nullable(number), "t_sched": nullable(number), "t_send": nullable(number),
    "t_headers": nullable(number), "t_first": nullable(number), "t_end": nullable(number),
    "input_len": nullable(number), "usage": nullable(obj), "server_metrics": nullable(numbers_by_name),
    "chunks": nullable(chunk_pairs), "max_tokens": nullable(count), "http_status": nullable(integer),
    "finish_reason": nullable(text),
    # A sessions workload's turn: its conversation, turn index (0 first), think time after it.
    "session": nullable(count), "turn": nullable(count), "think_s": nullable(number),
    # A trace workload's request: of its 512-token blocks, how many an earlier request sent.
    "shared_blocks": nullable(count),
    # A round against several endpoints: the index (in plan.engine.endpoints) it was sent to.
    "endpoint": count,
    # A Ray round's request: the worker (bundle manifest `ray.workers`: its node) that sent it.
    "worker": count,
}
USAGE: dict[str, Check] = {"prompt_tokens": nullable(count), "completion_tokens": nullable(count),
                           "total_tokens": nullable(count)}


def field_problem(rec: dict, fields: dict[str, Check]) -> str | None:
    """The first listed field of REC that has the wrong type, in words; None when all hold."""
    for name, check in fields.items():
        if name in rec and not check(rec[name]):
            return f"field {name!r} is {rec[name]!r:.60}, not {what(check)}"
    return None


def what(check: Check) -> str:
    """CHECK in words."""
    if check in WHAT:
        return WHAT[check]
    base = check.__name__.removesuffix(" or null")
    named = next((w for c, w in WHAT.items() if c.__name__ == base), base)
    return f"{named} or null"


def record_problem(stream: str, rec: dict) -> str | None:
    """Why REC is not a record of STREAM (a sample stream or "requests"), None when it is."""
    if stream == "requests" or stream.startswith("requests.w"):
        bad = field_problem(rec, REQUEST)
        if bad is None and isinstance(rec.get("usage"), dict):
            bad = field_problem(rec["usage"], USAGE)
            bad = bad and f"usage {bad}"
        return bad
    bad = field_problem(rec, STREAMS.get(stream, {}))
    if bad is None and stream == "points":
        if rec["event"] not in POINT_EVENTS:
            return f"field 'event' is {rec['event']!r:.60}, not one of {', '.join(POINT_EVENTS)}"
        if rec["event"] == "end" and rec.get("status", "ok") not in POINT_STATUSES:
            return f"field 'status' is {rec['status']!r:.60}, not one of {', '.join(POINT_STATUSES)}"
        if rec["event"] in ("start", "measure", "end") and not isinstance(rec.get("point"), str):
            return f"field 'point' is {rec.get('point')!r:.60}: a {rec['event']} event names its point"
        if isinstance(rec.get("settings"), dict):
            bad = field_problem(rec["settings"], SETTINGS)
            bad = bad and f"settings {bad}"
    return bad
