"""Request traces to replay at their own times: Mooncake-style JSONL and Azure LLM inference CSV.

Formats:
  mooncake  one JSON object a line: `timestamp` (ms), `input_length`, `output_length`,
            `hash_ids` (one id per 512-token block of the prompt; equal ids are equal blocks)
  azure     CSV with a header: `TIMESTAMP` (a date-time), `ContextTokens`, `GeneratedTokens`
Each kept request is scheduled at (its time − the first request's time) × time_scale seconds;
a replay sends it then whatever is in flight (open loop) and measures its latency from then.
Bad input is one PlanError naming the file, the line and the field; timestamps must not go
back in time (a trace is a record of arrivals, in order).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
from dataclasses import dataclass, field
from datetime import datetime

from bench.prompts import MAX_TOKENS, PlanError, read_text_file
from bundle.schema import TRACE_BLOCK_TOKENS

FORMATS = ("mooncake", "azure")
BLOCK_TOKENS = TRACE_BLOCK_TOKENS   # Mooncake's hash ids name blocks of this many tokens
AZURE_FIELDS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it is sent, its lengths and its prompt blocks."""

    send_at_s: float             # scheduled send time, from the trace's first request, scaled
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    shared_blocks: int = 0       # of its blocks, how many an earlier request of the trace sent


@dataclass
class Trace:
    """A trace's kept requests, in send order, and counts of what was read and left out."""

    requests: list[TraceRequest]
    read: int                                            # request lines read from the file
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> requests left out


def _count(value, path: str, n: int, name: str, low: int = 0) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TOKENS:
        raise PlanError(f"{path} line {n}: field {name}: {value!r:.40} is not a whole number "
                        f"from {low} to {MAX_TOKENS:,}")
    return value


def _mooncake_rows(text: str, path: str):
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlanError(f"{path} line {n}: not a JSON object ({e.msg})") from None
        except RecursionError:
            raise PlanError(f"{path} line {n}: nested deeper than it can be read; a trace line "
                            "is one flat object") from None
        if not isinstance(row, dict):
            raise PlanError(f"{path} line {n}: not a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in row:
                raise PlanError(f"{path} line {n}: field {key}: missing")
        t = row["timestamp"]
        try:
            ok = not isinstance(t, bool) and isinstance(t, (int, float)) and 0 <= float(t) < math.inf
        except OverflowError:       # an integer past the float range
            ok = False
        if not ok:
            raise PlanError(f"{path} line {n}: field timestamp: {t!r:.40} is not a time in ms")
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                                for h in ids):
            raise PlanError(f"{path} line {n}: field hash_ids: expected a list of integers")
        yield (n, t / 1000.0, _count(row["input_length"], path, n, "input_length"),
               _count(row["output_length"], path, n, "output_length"), tuple(ids))


def _azure_time(value: str, path: str, n: int) -> float:
    s = (value or "").strip()
    if "." in s:  # the published traces write 7 fraction digits; datetime reads 6
        head, frac = s.split(".", 1)
        s = f"{head}.{frac[:6]}"
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        try:
            t = float(s)
        except ValueError:
            t = math.nan
        if not 0 <= t < math.inf:       # nan, inf and negative times too
            raise PlanError(f"{path} line {n}: field TIMESTAMP: {value!r:.40} is not a date-time "
                            "or a number of seconds") from None
        return t


def _azure_rows(text: str, path: str):
    reader = csv.DictReader(io.StringIO(text))
    missing = [f for f in AZURE_FIELDS if f not in (reader.fieldnames or [])]
    if missing:
        raise PlanError(f"{path} line 1: field {missing[0]}: missing from the header "
                        f"(expected {', '.join(AZURE_FIELDS)})")
    for row in reader:
        n = reader.line_num
        if None in row.values() or None in row:
            raise PlanError(f"{path} line {n}: expected {len(reader.fieldnames)} fields")
        yield (n, _azure_time(row["TIMESTAMP"], path, n),
               _count(row["ContextTokens"], path, n, "ContextTokens"),
               _count(row["GeneratedTokens"], path, n, "GeneratedTokens"), ())


# The longest a replay may run (s, scaled): a point's longest duration. The longest wait
# between two kept requests: a trace that idles an hour is no arrival record of one service.
MAX_SPAN_S = 7 * 86400
MAX_GAP_S = 3600


def load_trace(path: str, fmt: str, time_scale: float = 1.0, max_duration_s: float | None = None,
               max_requests: int | None = None, max_model_len: int | None = None) -> Trace:
    """The requests of a trace file, scheduled and filtered, with counts of what was left out."""
    if fmt not in FORMATS:
        raise PlanError(f"[workload].format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
        raise PlanError(f"[workload].time_scale: must be a number above 0, got {time_scale!r}")
    text = read_text_file(path, f"[workload].trace: {path}")
    rows = (_mooncake_rows if fmt == "mooncake" else _azure_rows)(text, path)
    kept: list[TraceRequest] = []
    dropped: dict[str, int] = {}
    seen: set[int] = set()
    t0 = last = None
    read = 0
    for n, t, n_in, n_out, ids in rows:
        read += 1
        if last is not None and t < last:
            raise PlanError(f"{path} line {n}: field {'timestamp' if fmt == 'mooncake' else 'TIMESTAMP'}: "
                            "earlier than the line before (a trace must be in time order)")
        last = t
        t0 = t if t0 is None else t0
        at = (t - t0) * time_scale
        reason = None
        if max_requests is not None and len(kept) >= max_requests:
            reason = "past_max_requests"
        elif max_duration_s is not None and at > max_duration_s:
            reason = "past_max_duration"
        elif n_in < 1 or n_out < 1:
            reason = "zero_length"
        elif max_model_len is not None and n_in + n_out > max_model_len:
            reason = "over_model_len"
        if reason:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        field = "timestamp" if fmt == "mooncake" else "TIMESTAMP"
        if at > MAX_SPAN_S:
            raise PlanError(f"{path} line {n}: field {field}: sent {at:,.6g} s after the first "
                            f"request (time_scale applied), past the {MAX_SPAN_S:,} s a replay may "
                            "run; give [workload].max_duration_s to replay its start")
        if kept and at - kept[-1].send_at_s > MAX_GAP_S:
            raise PlanError(f"{path} line {n}: field {field}: {at - kept[-1].send_at_s:,.6g} s after "
                            f"the request before it (time_scale applied), over {MAX_GAP_S:,} s")
        ids = ids[:blocks_for(n_in)]
        kept.append(TraceRequest(at, n_in, n_out, ids, sum(h in seen for h in ids)))
        seen.update(ids)
    if not kept:
        raise PlanError(f"{path}: no request kept ({read} read, dropped {dropped or 'none'})")
    return Trace(kept, read, dropped)


def blocks_for(input_len: int) -> int:
    """How many 512-token blocks a prompt of INPUT_LEN tokens spans."""
    return -(-input_len // BLOCK_TOKENS)


def block_tokens(hash_id: int, seed: int, low: int, high: int) -> list[int]:
    """The 512 token ids that hash id HASH_ID stands for: a function of (seed, id) alone."""
    digest = hashlib.blake2b(f"{seed}:{hash_id}".encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    return [rng.randrange(low, high) for _ in range(BLOCK_TOKENS)]


def trace_prompt(req: TraceRequest, index: int, seed: int, low: int, high: int) -> list[int]:
    """The token ids of request INDEX: its hash ids' blocks, then tokens of its own, cut to length."""
    ids = list(req.hash_ids)
    # Blocks the trace names no id for are the request's own: ids no trace line can carry
    # (negative, keyed by the request's index) so they are shared with no other request.
    ids += [-(index * 4096 + k + 1) for k in range(blocks_for(req.input_len) - len(ids))]
    tokens: list[int] = []
    for h in ids:
        tokens += block_tokens(h, seed, low, high)
    return tokens[:req.input_len]
