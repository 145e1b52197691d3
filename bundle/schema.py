"""Every sample stream of a bundle, declared once (`STREAMS`: its file, its fields' types, the
fields it requires, its order), checked where a record is written and where it is read.

A record may hold fields not listed here (a later collector's additions); a listed field, when
present, must have its type. `null` is allowed only where the collector writes it (a value the
server or NVML did not give). A type error names the field, so the reader's message names file,
line and field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from bundle.gpu_fields import GPM_FIELDS
from bundle.plausible import DCGM_PREFIX, label_problem

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


def words(v: Any) -> bool:
    """A command line: one string, or a list of strings."""
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def texts_by_name(v: Any) -> bool:
    """An object of strings (each withheld sample's reason)."""
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


# The languages a plan may state its title in (`title = {en = "...", zh = "..."}`); a plain
# string is the English title. The pages' languages (report/words.py LANGS) are these.
TITLE_LANGS = ("en", "zh")


def plan_title(v: Any) -> bool:
    """A plan's title: a string (the English title), or a table of strings by language."""
    return isinstance(v, str) or (isinstance(v, dict) and set(v) <= set(TITLE_LANGS)
                                  and all(isinstance(x, str) for x in v.values()))


def plan_titles(title: Any) -> dict[str, str]:
    """A plan's title by language (a string is the English one), blank ones left out."""
    by_lang = {"en": title} if isinstance(title, str) else title if isinstance(title, dict) else {}
    return {lang: by_lang[lang].strip() for lang in TITLE_LANGS
            if isinstance(by_lang.get(lang), str) and by_lang[lang].strip()}


def count(v: Any) -> bool:
    """A JSON integer at or above 0."""
    return integer(v) and v >= 0


def chunk_pairs(v: Any) -> bool:
    """A list of [time, tokens or null] pairs, tokens a whole number up to MAX_COUNT."""
    return isinstance(v, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and number(p[0])
        and (p[1] is None or (integer(p[1]) and 0 <= p[1] <= MAX_COUNT)) for p in v)


# A point id as the collector makes it (bench/plan/spec.py Plan._point: `s1-L128-c4`, `L1024-r0.5`,
# `L64-r1e+06`): letters, digits and `.+-`, so an id is data wherever the report puts it (the
# `[[p.<id>.<key>]]` placeholders of its sentences, a file name), never markup.
POINT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]{0,63}")


def point_id(v: Any) -> bool:
    """A point id the collector makes (POINT_ID)."""
    return isinstance(v, str) and POINT_ID.fullmatch(v) is not None


# What each word names in a message.
WHAT = {number: "a number", integer: "an integer", text: "a string", boolean: "true or false",
        obj: "an object", array: "a list", numbers_by_name: "an object of numbers",
        chunk_pairs: "a list of [time, tokens or null] pairs",
        count: "a whole number at or above 0", point_id: "a point id of letters, digits and .+- "
        "(at most 64, as the collector makes them)", words: "a command line", texts_by_name: "an object of strings"}

# "search": a search sweep's verdict on a point (met_slo), which chose the next one.
POINT_EVENTS = ("start", "measure", "end", "server_start", "server_ready", "server_stop", "search")
POINT_STATUSES = ("ok", "failed")

# The fields of a point's `settings` (bench/plan/spec.py Plan.points writes them).
SETTINGS: dict[str, Check] = {
    "id": point_id, "server_flags": array, "server_set": count, "input_len": count,
    "output_len": count, "arrival": text, "concurrency": nullable(count),
    "request_rate": nullable(number), "ramp_s": number, "ramp": text,
}

@dataclass(frozen=True)
class Stream:
    """One sample stream of a bundle, declared once: the writer checks what it appends by it, the
    reader what it reads, and docs/bundle.md's table of files is written from it
    (tools/stream_table.py; a test holds them equal)."""

    name: str       # its file is `<name>.jsonl` (`.jsonl.gz` once compressed)
    what: str       # what a record is, as docs/bundle.md's table of files says it
    written: str    # when a record is appended, as that table says it
    # Each listed field's type; a record may hold others (a later collector's additions).
    fields: dict[str, Check]
    # The fields every record carries (the report reads them unguarded); a "t" among them a number.
    required: tuple[str, ...]
    # Written by one sampler on the bundle's clock: its `t` never goes back, and the reader
    # refuses a line whose `t` is before the one above it.
    ordered: bool = False
    # Small records read with every key checked for a repeat (the request and scrape streams
    # are read in bulk, their fields checked by type).
    unique_keys: bool = False

    @property
    def file(self) -> str:
        """The stream's file name in the bundle."""
        return f"{self.name}.jsonl"


SCRAPE: dict[str, Check] = {"t": number, "dt": number, "ok": boolean, "samples": numbers_by_name,
                            "error": text, "withheld": texts_by_name}

# A trace request's prompt is blocks of this many tokens (Mooncake's hash ids); its record's
# `shared_blocks` counts the leading ones an earlier request of the trace sent.
TRACE_BLOCK_TOKENS = 512

# Every sample stream, in the order the writer compresses and the reader reads them.
STREAMS: tuple[Stream, ...] = (
    Stream("points", "a point or server event", "appended", {
        "t": number, "event": text, "point": nullable(point_id), "settings": obj,
        "status": text, "reason": nullable(text), "seed": integer, "server_set": count,
        "command": nullable(array), "mode": text, "met_slo": boolean},
        required=("event", "t"), unique_keys=True),
    # Read into columns by bundle/request_table/; `requests.w{k}` (worker k's) share it.
    Stream("requests", "one request, every timestamp raw", "appended when a request ends", {
        "point": text, "i": integer, "warmup": boolean, "status": text, "error": nullable(text),
        "t_slot": nullable(number), "t_sched": nullable(number), "t_send": nullable(number),
        "t_headers": nullable(number), "t_first": nullable(number), "t_end": nullable(number),
        "input_len": nullable(number), "usage": nullable(obj),
        "server_metrics": nullable(numbers_by_name), "chunks": nullable(chunk_pairs),
        "max_tokens": nullable(count), "http_status": nullable(integer),
        "finish_reason": nullable(text),
        # A sessions workload's turn: its conversation, turn index (0 first), think time after it.
        "session": nullable(count), "turn": nullable(count), "think_s": nullable(number),
        # A trace workload's request: of its 512-token blocks, how many an earlier request sent.
        "shared_blocks": nullable(count),
        # A round against several endpoints: the index (in plan.engine.endpoints) it was sent to.
        "endpoint": count,
        # A Ray round's request: the worker (bundle manifest `ray.workers`: its node) that sent it.
        "worker": count},
        required=("point",)),
    # withheld: the scraped samples that were no measurement (not finite, out of range), each
    # key with its reason, kept out of `samples` (bundle/plausible.py).
    Stream("metrics", "one `/metrics` scrape or a gap", "appended every scrape", SCRAPE,
           required=("t", "ok"), ordered=True),
    Stream("gpu", "one GPU's NVML sample, with its GPM counters where the GPU has them",
           "appended every telemetry tick", {
        "t": number, "gpu": count, "power_w": nullable(number),
        "power_limit_w": nullable(number), "temperature_c": nullable(number),
        "sm_clock_mhz": nullable(number), "mem_clock_mhz": nullable(number),
        "gpu_util_pct": nullable(number), "mem_util_pct": nullable(number),
        "mem_used_bytes": nullable(number), "energy_mj": nullable(number),
        "throttle_reasons": nullable(count), "pstate": nullable(integer),
        "unsupported": array, "errors": obj,
        **{name: nullable(number) for name in GPM_FIELDS}},
        required=("t",), ordered=True, unique_keys=True),
    # `worker` and `node`: the load worker that took the sample (a worker process, a Ray
    # round's node); absent in the round's own samples and in bundles recorded before them.
    Stream("client", "the client's own lag: event loop and socket reads", "appended every 0.5 s", {
        "t": number, "loop_lag_s": number, "tasks": count, "reads": count,
        "reads_kernel_stamped": count, "read_wait_max_s": number, "worker": count,
        "node": text},
        required=("t",), unique_keys=True),
    Stream("host", "cumulative CPU seconds of the host, the engine's processes, the client",
           "appended every 0.5 s (or the `/metrics` interval, if shorter)", {
        "t": number, "cores": count, "cpu_busy_s": number, "cpu_total_s": number,
        "client_cpu_s": number, "engine_cpu_s": nullable(number),
        # The client's event loop's run-queue wait (runnable, not running), cumulative.
        "client_wait_s": nullable(number)},
        required=("t",), ordered=True, unique_keys=True),
    # Scrapes of an NVIDIA DCGM exporter's page (remote GPUs), recorded as metrics are.
    Stream("dcgm", "one scrape of an NVIDIA DCGM exporter's page (the `DCGM_FI_*` samples, as "
           "`metrics.jsonl` holds vLLM's) or a gap",
           "appended every `/metrics` tick, when `[sampler] gpu_metrics` (`--gpu-metrics URL`) "
           "names an exporter", SCRAPE,
           required=("t", "ok"), ordered=True),
    # A Ray round's worker per point (bench/ray_cluster.py): status "ok", "died" or "lost".
    Stream("shards", "one worker of the point: its node, what it was asked to send and sent, "
           "its clock offset (ray.md)", "appended at the end of each point of a Ray round", {
        "t": number, "point": text, "worker": count, "node": nullable(text),
        "status": text, "error": nullable(text), "planned": nullable(count),
        "sent": nullable(count), "done": nullable(count), "errors": nullable(count),
        "clock_offset_s": nullable(number), "clock_uncertainty_s": nullable(number),
        "clock_rtt_s": nullable(number), "clock_probes": nullable(count)},
        required=("t", "point", "worker", "status")),
)
# Each stream by its name; a request shard `requests.w{k}` is read as "requests".
STREAM: dict[str, Stream] = {s.name: s for s in STREAMS}
REQUEST = STREAM["requests"].fields

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
    bad = field_problem(rec, STREAM[stream].fields if stream in STREAM else {})
    if bad is None and stream == "dcgm" and isinstance(rec.get("samples"), dict):
        bad = next((f"sample {k!r:.80}: {why}" for k in rec["samples"] if k.startswith(DCGM_PREFIX)
                    and (why := label_problem(k))), None)
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


def not_finite(value: Any, where: str = "") -> str | None:
    """Where in VALUE (a JSON-ready object) a number is NaN or infinite, in words; None when none is."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'the value'} is {value!r}, not a finite number"
    if isinstance(value, dict):
        return next((bad for k, v in value.items() if (bad := not_finite(v, f"{where}.{k}" if where else str(k)))), None)
    if isinstance(value, (list, tuple)):
        return next((bad for i, v in enumerate(value) if (bad := not_finite(v, f"{where}[{i}]"))), None)
    return None


# The manifest's fields the report reads, typed (docs/bundle.md, manifest.json): each object's
# path -> its fields. A field of the wrong type is refused on read, naming it, and never written.
MANIFEST_FIELDS: dict[str, dict[str, Check]] = {
    "clock": {"t0_wall_unix": number, "source": text},
    "engine": {"mode": text, "endpoint": nullable(text), "endpoints": array, "engines": array,
               "command": nullable(words), "env": obj,
               "models": nullable(array), "vllm_version": nullable(text), "server_sets": obj},
    "model": {"config": nullable(obj), "config_source": nullable(text), "name": nullable(text),
              "served_name": nullable(text), "tokenizer_vocab_size": nullable(count),
              "load_format": nullable(text)},
    "plan": {"engine": obj, "workload": obj, "sweep": obj, "sampler": obj, "client": obj,
             "expect": obj, "slo": obj, "cost": obj, "seed": integer, "id": text, "title": plan_title},
    "plan.engine": {"mode": text, "endpoint": text, "endpoints": array, "commands": array,
                    "flags": array, "env": obj, "model_config": text},
    "plan.sweep": {"concurrency": array, "input_len": array, "request_rate": array,
                   "server_flags": array},
    "workload_source": {"kind": text, "path": text, "read": count, "kept": count, "dropped": obj,
                        "span_s": nullable(number)},
}
# The manifest's own fields the report reads, besides its objects.
MANIFEST_TOP: dict[str, Check] = {"gpu_absent_reason": nullable(text), "status_reason": nullable(text),
                                  "created_utc": text}
# A GPU of the manifest's `gpus` list.
MANIFEST_GPU: dict[str, Check] = {
    "index": count, "name": text, "uuid": text, "gpm_supported": boolean,
    "gpm_absent_reason": nullable(text), "memory_total_bytes": nullable(number),
    "max_sm_clock_mhz": nullable(number), "max_mem_clock_mhz": nullable(number),
    "power_limit_w": nullable(number), "power_limit_default_w": nullable(number),
}


def manifest_problem(manifest: dict) -> str | None:
    """Why MANIFEST (its top-level keys already checked) holds a field the report cannot read,
    in words naming the field; None when every typed field has its type and every number is finite."""
    bad = not_finite(manifest)
    if bad:
        return bad
    if bad := field_problem(manifest, MANIFEST_TOP):
        return bad
    for path, fields in MANIFEST_FIELDS.items():
        table = _at(manifest, path)
        if isinstance(table, dict) and (bad := field_problem(table, fields)):
            return f"{path} {bad}"
    for path in ("plan.engine.endpoints", "plan.engine.commands", "plan.engine.flags",
                 "engine.endpoints"):
        items = _at(manifest, path)
        if isinstance(items, list) and (i := next((i for i, x in enumerate(items) if not text(x)),
                                                  None)) is not None:
            return f"{path}[{i}] is {items[i]!r:.60}, not a string"
    for i, gpu in enumerate(manifest.get("gpus") or ()):
        if not isinstance(gpu, dict):
            return f"gpus[{i}] is {gpu!r:.60}, not an object"
        if bad := field_problem(gpu, MANIFEST_GPU):
            return f"gpus[{i}] {bad}"
    return None


def _at(table: Any, path: str) -> Any:
    """The value at the dotted PATH of TABLE, None where a step is missing or not an object."""
    for part in path.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    return table
