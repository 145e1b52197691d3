"""The store of a request table's columns, and the blocks of records it is built from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import orjson

from bundle.schema import MAX_COUNT

# Scalar columns: name -> how to read it from a record (float64, NaN where absent or null).
FLOAT_FIELDS = ("t_slot", "t_sched", "t_send", "t_headers", "t_first", "t_end", "input_len",
                "max_tokens", "session", "turn", "think_s", "shared_blocks", "endpoint", "worker")
class RecordError(ValueError):
    """A request record the table cannot hold: (the record's index in its block, what is wrong)."""

    def __init__(self, index: int, problem: str):
        super().__init__(index, problem)
        self.index, self.problem = index, problem


@dataclass(eq=False)
class Store:
    """Columns of every request read, shared by all selections of one table."""

    cols: dict[str, np.ndarray]       # per request: FLOAT_FIELDS, usage_*, warmup, ok, point
    points: list                      # point code -> the record's point value
    server: dict[str, np.ndarray]     # per request: numeric server_metrics fields (NaN absent)
    chunk_off: np.ndarray             # int64, n + 1
    chunk_t: np.ndarray               # float64
    chunk_n: np.ndarray               # int32, -1 = null
    heads: np.ndarray                 # uint8: each record's JSON with its chunk pairs removed
    head_off: np.ndarray              # int64, n + 1

    @property
    def n(self) -> int:
        return len(self.chunk_off) - 1



_NUMERIC = {int, float, type(None)}
_INTEGER = {int, type(None)}
_OBJECT = {dict, type(None)}
_FLAG = {bool, type(None)}
_TEXT = {str, type(None)}


def _numbers(values: list, name: str = "") -> np.ndarray:
    """VALUES as float64, NaN for null or a missing field; RecordError (naming the record's
    index and field NAME) for a value that is not a JSON number."""
    if set(map(type, values)) <= _NUMERIC:
        return np.array(values, dtype=np.float64).reshape(len(values))
    j = next(j for j, v in enumerate(values) if type(v) not in _NUMERIC)
    raise RecordError(j, f"field {name!r} is {values[j]!r:.60}, not a number or null")


def _of_types(values: list, types: set, name: str, what: str) -> None:
    """RecordError for the first of VALUES whose type is not among TYPES."""
    if not set(map(type, values)) <= types:
        j = next(j for j, v in enumerate(values) if type(v) not in types)
        raise RecordError(j, f"field {name!r} is {values[j]!r:.60}, not {what}")


def _field(dicts: list, key: str) -> list:
    """dict.get(KEY) of each element that is a dict, else None."""
    return [d.get(key) if type(d) is dict else None for d in dicts]


@dataclass
class Block:
    """The columns of one block of records (point codes local to the block)."""

    cols: dict[str, np.ndarray]
    points: list                  # local point code -> value
    server: dict[str, np.ndarray]
    counts: np.ndarray            # chunks per record
    t: np.ndarray
    n: np.ndarray
    heads: bytes                  # each record's JSON without its chunk pairs, newline-ended
    head_lens: np.ndarray

    def __len__(self) -> int:
        return len(self.counts)


def scalar_block(recs: list[dict]) -> tuple[dict[str, np.ndarray], list, dict[str, np.ndarray]]:
    """The scalar columns of RECS (records or their heads: chunks are not read here); a field of
    the wrong type is a RecordError naming the record's index."""
    n = len(recs)
    get = dict.get
    cols = {f: _numbers(list(map(get, recs, repeat(f))), f) for f in FLOAT_FIELDS}
    usage = list(map(get, recs, repeat("usage")))
    _of_types(usage, _OBJECT, "usage", "an object or null")
    for name, col in (("prompt_tokens", "usage_prompt"), ("completion_tokens", "usage_completion")):
        values = _field(usage, name)
        _of_types(values, _INTEGER, f"usage.{name}", "an integer or null")
        cols[col] = _numbers(values, f"usage.{name}")
    cols["usage_cached"] = _numbers(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"),
                                    "usage.prompt_tokens_details.cached_tokens")
    warmup = list(map(get, recs, repeat("warmup")))
    _of_types(warmup, _FLAG, "warmup", "true or false")
    cols["warmup"] = np.array([not not w for w in warmup], dtype=bool).reshape(n)
    status = list(map(get, recs, repeat("status")))
    _of_types(status, _TEXT, "status", "a string")
    cols["ok"] = np.array([s == "ok" for s in status], dtype=bool).reshape(n)
    points: list = []
    codes: dict = {}
    local = []
    pvalues = list(map(get, recs, repeat("point")))
    _of_types(pvalues, _TEXT, "point", "a string (the point's id)")
    for p in pvalues:
        c = codes.get(p)
        if c is None:
            c = codes[p] = len(points)
            points.append(p)
        local.append(c)
    cols["point"] = np.array(local, dtype=np.int32).reshape(n)
    sms = list(map(get, recs, repeat("server_metrics")))
    _of_types(sms, _OBJECT, "server_metrics", "an object or null")
    keys: dict[str, None] = {}
    last = None
    for sm in sms:
        if type(sm) is dict and sm.keys() != last:
            last = sm.keys()
            keys.update(dict.fromkeys(last))
    server = {k: _numbers(_field(sms, k), f"server_metrics.{k}") for k in keys}
    return cols, points, server


def records_block(recs: list[dict], heads: list[bytes] | None = None) -> Block:
    """A block of whole records (chunks included), checked one by one (RecordError names the
    first bad record's index)."""
    counts = np.zeros(len(recs), dtype=np.int64)
    ts: list[float] = []
    ns: list[int] = []
    hs = []
    for j, r in enumerate(recs):
        ch = r.get("chunks")
        if ch is not None and not isinstance(ch, list):
            raise RecordError(j, "'chunks' is not a list")
        for pair in ch or ():
            if (not isinstance(pair, (list, tuple)) or len(pair) != 2 or not is_number(pair[0])
                    or not (pair[1] is None or is_count(pair[1]))):
                raise RecordError(j, f"a chunk is {pair!r:.60}, not [time, tokens or null]")
            ts.append(float(pair[0]))
            ns.append(-1 if pair[1] is None else int(pair[1]))
        counts[j] = len(ch or ())
        if heads is None:
            hs.append(head_json(r))
    heads = hs if heads is None else heads
    cols, points, server = scalar_block(recs)
    return Block(cols, points, server, counts, np.array(ts, dtype=np.float64),
                  np.array(ns, dtype=np.int32), b"".join(heads),
                  np.array([len(h) for h in heads], dtype=np.int64))


def head_json(rec: dict, dumps=orjson.dumps) -> bytes:
    """REC's JSON with its chunk pairs left out (`"chunks":[]` keeps its place), newline-ended."""
    head = rec
    if isinstance(rec.get("chunks"), list) and rec["chunks"]:
        head = dict(rec)
        head["chunks"] = []
    try:
        if dumps is not None:
            return dumps(head) + b"\n"
    except (orjson.JSONEncodeError, TypeError):
        pass
    return json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class _Buffer:
    """A growing flat array. Reserved room is only address space until written, so reserving as
    much as a file can hold costs no memory, and nothing is copied at the end."""

    def __init__(self, dtype):
        self.a = np.empty(0, dtype=dtype)
        self.size = 0

    def reserve(self, extra: int) -> None:
        if self.size + extra > len(self.a):
            grown = np.empty(max(self.size + extra, len(self.a) * 3 // 2), dtype=self.a.dtype)
            grown[:self.size] = self.a[:self.size]
            self.a = grown

    def append(self, values) -> None:
        self.reserve(len(values))
        self.a[self.size:self.size + len(values)] = values
        self.size += len(values)

    def array(self) -> np.ndarray:
        return self.a[:self.size]


class Builder:
    """Joins blocks into one store; point codes become global."""

    def __init__(self):
        self.codes: dict[Any, int] = {}
        self.points: list = []
        self.blocks: list[Block] = []  # their scalar columns; chunks and heads go to the buffers
        self.t = _Buffer(np.float64)
        self.n = _Buffer(np.int32)
        self.heads = _Buffer(np.uint8)
        self.rows = 0

    def reserve(self, text_bytes: int) -> None:
        """Room for the records of TEXT_BYTES of JSON lines (a chunk takes at least 6 bytes)."""
        self.t.reserve(text_bytes // 6 + 1)
        self.n.reserve(text_bytes // 6 + 1)
        self.heads.reserve(text_bytes + 1)

    def add(self, blk: Block) -> None:
        remap = np.empty(len(blk.points), dtype=np.int32)
        for j, p in enumerate(blk.points):
            try:
                c = self.codes.get(p)
                if c is None:
                    c = self.codes[p] = len(self.points)
                    self.points.append(p)
            except TypeError:
                c = len(self.points)
                self.points.append(p)
            remap[j] = c
        if len(blk):
            blk.cols["point"] = remap[blk.cols["point"]]
        self.t.append(blk.t)
        self.n.append(blk.n)
        self.heads.append(np.frombuffer(blk.heads, dtype=np.uint8))
        blk.t = blk.n = blk.heads = None
        self.blocks.append(blk)
        self.rows += len(blk)

    def store(self) -> Store:
        """The blocks added so far joined into one store (the builder keeps none of them)."""
        blocks, self.blocks = self.blocks, []
        n = self.rows

        def cat(get, dtype):
            parts = [get(b) for b in blocks]
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

        cols = {f: cat(lambda b, f=f: b.cols[f], np.float64) for f in
                FLOAT_FIELDS + ("usage_prompt", "usage_completion", "usage_cached")}
        cols["warmup"] = cat(lambda b: b.cols["warmup"], bool)
        cols["ok"] = cat(lambda b: b.cols["ok"], bool)
        cols["point"] = cat(lambda b: b.cols["point"], np.int32)
        server: dict[str, np.ndarray] = {}
        row = 0
        for b in blocks:
            for k, c in b.server.items():
                server.setdefault(k, np.full(n, np.nan))[row:row + len(b)] = c
            row += len(b)
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(cat(lambda b: b.counts, np.int64), out=off[1:])
        head_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(cat(lambda b: b.head_lens, np.int64), out=head_off[1:])
        return Store(cols=cols, points=self.points, server=server, chunk_off=off,
                     chunk_t=self.t.array(), chunk_n=self.n.array(),
                     heads=self.heads.array(), head_off=head_off)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_count(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return v >= 0 and float(v).is_integer() and v <= MAX_COUNT


# ============================================================================ reading
