"""The requests of a bundle as columns: one row per request, every chunk in two flat arrays.

A round of a million requests holds some 64 M chunks; as Python objects (`[t, n]` lists in
dicts) they take many GB and minutes to walk. A RequestTable keeps each scalar field the
report reads as a numpy column, one value per request (NaN where the record has null or no
such field), and the chunks of all requests as `chunk_t` (arrival time) and `chunk_n`
(tokens; -1 where the server said null), request i's chunks being
`chunk_off[i]:chunk_off[i + 1]`. The record itself stays available: `table[i]` rebuilds the
dict as it was read (the record's JSON without its chunk pairs is kept as bytes).

`take` selects rows (a point, its measured requests) without copying the store; every
selection keeps the order of the records in the bundle.

Reading (`read_request_files`) parses whole blocks of lines at once: the chunk pairs, most of
a line, go through pandas' C number parser in bulk; the rest of each record through orjson. A
block that is not of the usual shape is read line by line instead, with the same result and
the same checks and messages as any other stream (`bundle.store.iter_jsonl`).
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import orjson

from bundle.allocator import keep_freed_memory
from bundle.files import (
    INFLATE_ERRORS,
    MAX_INFLATE_RATIO,
    MAX_LINE_BYTES,
    BundleError,
    check_record,
    loads_finite,
    no_newline,
    open_stream,
)
from bundle.schema import MAX_COUNT

# Scalar columns: name -> how to read it from a record (float64, NaN where absent or null).
FLOAT_FIELDS = ("t_slot", "t_sched", "t_send", "t_headers", "t_first", "t_end", "input_len",
                "max_tokens", "session", "turn", "think_s", "shared_blocks", "endpoint", "worker")
BLOCK_BYTES = 32 << 20
PARALLEL_BYTES = 256 << 20      # request files of more text than this are parsed in parallel
MAX_PARSE_WORKERS = 8
_KEY = b'"chunks":'
_KEY_RE = re.compile(re.escape(_KEY))
# Bytes a block's chunk pairs may hold on the fast path: numbers, null, brackets, commas.
_CHUNK_TEXT = b"0123456789.eE+-,[]nul\n"


try:    # ISA-L's gzip decompresses a large request file 2-3x faster than zlib; same bytes
    from isal.isal_zlib import decompressobj
except ImportError:     # pragma: no cover - isal is a dependency where it installs
    from zlib import decompressobj


class RecordError(ValueError):
    """A request record the table cannot hold: (the record's index in its block, what is wrong)."""

    def __init__(self, index: int, problem: str):
        super().__init__(index, problem)
        self.index, self.problem = index, problem


@dataclass(eq=False)
class _Store:
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


class RequestTable(Sequence):
    """Requests as columns (see the module docstring); a sequence of record dicts when iterated."""

    def __init__(self, store: _Store, rows: np.ndarray | None = None):
        self._s = store
        self._rows = rows  # None: every row of the store, in order

    # ------------------------------------------------------------------ building

    @classmethod
    def from_records(cls, records: Sequence[dict]) -> RequestTable:
        """A table of request records (dicts as read from requests.jsonl)."""
        b = _Builder()
        try:
            b.add(_records_block(list(records)))
        except RecordError as e:
            raise ValueError(f"record {e.index}: {e.problem}") from None
        return b.table()

    @classmethod
    def empty(cls) -> RequestTable:
        return _Builder().table()

    # ------------------------------------------------------------------ selection

    def __len__(self) -> int:
        return self._s.n if self._rows is None else len(self._rows)

    @property
    def rows(self) -> np.ndarray:
        """Indices of this selection's requests in the whole table."""
        return np.arange(self._s.n) if self._rows is None else self._rows

    def take(self, which: np.ndarray) -> RequestTable:
        """The requests selected by WHICH (a boolean mask over this table, or positions in it)."""
        which = np.asarray(which)
        which = np.flatnonzero(which) if which.dtype == bool else which.astype(np.int64)
        return RequestTable(self._s, self.rows[which] if self._rows is not None else which)

    def concat(self, *others: RequestTable) -> RequestTable:
        """This table's requests followed by those of OTHERS (selections of the same table)."""
        for o in others:
            if o._s is not self._s:
                raise ValueError("only selections of one table can be joined")
        return RequestTable(self._s, np.concatenate([self.rows] + [o.rows for o in others]))

    # ------------------------------------------------------------------ columns

    def col(self, name: str) -> np.ndarray:
        """One scalar column (FLOAT_FIELDS, usage_prompt/usage_completion/usage_cached, warmup, ok)."""
        c = self._s.cols[name]
        return c if self._rows is None else c[self._rows]

    def point_is(self, point: Any) -> np.ndarray:
        """Mask of the requests whose `point` equals POINT."""
        codes = [k for k, p in enumerate(self._s.points) if p == point]
        c = self.col("point")
        if not codes:
            return np.zeros(len(c), dtype=bool)
        return np.isin(c, codes) if len(codes) > 1 else c == codes[0]

    def point_counts(self) -> dict[Any, int]:
        """Requests per point value, in first-seen order."""
        c = np.bincount(self.col("point"), minlength=len(self._s.points))
        return {p: int(c[k]) for k, p in enumerate(self._s.points) if c[k]}

    def server_metric(self, name: str) -> np.ndarray:
        """One numeric field of the records' server_metrics (NaN where a record lacks it)."""
        c = self._s.server.get(name)
        if c is None:
            return np.full(len(self), np.nan)
        return c if self._rows is None else c[self._rows]

    def chunk_counts(self) -> np.ndarray:
        """Chunks per request."""
        off = self._s.chunk_off
        if self._rows is None:
            return np.diff(off)
        return off[self._rows + 1] - off[self._rows]

    def chunks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(t, n, offsets) of this selection's chunks, request by request; n = -1 where null."""
        s = self._s
        if self._rows is None:
            return s.chunk_t, s.chunk_n, s.chunk_off
        rows = self._rows
        lo, hi = s.chunk_off[rows], s.chunk_off[rows + 1]
        counts = hi - lo
        off = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        if len(rows) == 0:
            return s.chunk_t[:0], s.chunk_n[:0], off
        # Runs of consecutive rows have consecutive chunks: copy them as slices.
        brk = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate(([0], brk))
        ends = np.concatenate((brk, [len(rows)]))
        if len(starts) * 8 <= len(rows):
            a, b = lo[starts].tolist(), hi[ends - 1].tolist()
            t = np.concatenate([s.chunk_t[x:y] for x, y in zip(a, b)])
            n = np.concatenate([s.chunk_n[x:y] for x, y in zip(a, b)])
        else:
            idx = np.repeat(lo - off[:-1], counts) + np.arange(off[-1])
            t, n = s.chunk_t[idx], s.chunk_n[idx]
        return t, n, off

    # ------------------------------------------------------------------ records

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("request index out of range")
        return self._record(int(i) if self._rows is None else int(self._rows[i]))

    def __iter__(self) -> Iterator[dict]:
        for r in (range(self._s.n) if self._rows is None else self._rows.tolist()):
            yield self._record(r)

    def _record(self, r: int) -> dict:
        s = self._s
        head = s.heads[s.head_off[r]:s.head_off[r + 1]].tobytes()
        try:
            rec = orjson.loads(head)
        except orjson.JSONDecodeError:
            rec = json.loads(head)  # NaN/Infinity, huge integers: what json accepts and orjson not
        a, b = int(s.chunk_off[r]), int(s.chunk_off[r + 1])
        if b > a:
            ts = s.chunk_t[a:b].tolist()
            ns = s.chunk_n[a:b].tolist()
            rec["chunks"] = [[t, n if n >= 0 else None] for t, n in zip(ts, ns)]
        return rec

    def __repr__(self) -> str:
        return f"<RequestTable: {len(self)} requests>"


def as_request_table(requests: RequestTable | Sequence[dict]) -> RequestTable:
    """REQUESTS as a RequestTable (a list of record dicts is converted)."""
    return requests if isinstance(requests, RequestTable) else RequestTable.from_records(requests)


# ============================================================================ building

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
class _Block:
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


def _scalar_block(recs: list[dict]) -> tuple[dict[str, np.ndarray], list, dict[str, np.ndarray]]:
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


def _records_block(recs: list[dict], heads: list[bytes] | None = None) -> _Block:
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
            if (not isinstance(pair, (list, tuple)) or len(pair) != 2 or not _is_number(pair[0])
                    or not (pair[1] is None or _is_count(pair[1]))):
                raise RecordError(j, f"a chunk is {pair!r:.60}, not [time, tokens or null]")
            ts.append(float(pair[0]))
            ns.append(-1 if pair[1] is None else int(pair[1]))
        counts[j] = len(ch or ())
        if heads is None:
            hs.append(_head_json(r))
    heads = hs if heads is None else heads
    cols, points, server = _scalar_block(recs)
    return _Block(cols, points, server, counts, np.array(ts, dtype=np.float64),
                  np.array(ns, dtype=np.int32), b"".join(heads),
                  np.array([len(h) for h in heads], dtype=np.int64))


def _head_json(rec: dict, dumps=orjson.dumps) -> bytes:
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


class _Builder:
    """Joins blocks into one store; point codes become global."""

    def __init__(self):
        self.codes: dict[Any, int] = {}
        self.points: list = []
        self.blocks: list[_Block] = []  # their scalar columns; chunks and heads go to the buffers
        self.t = _Buffer(np.float64)
        self.n = _Buffer(np.int32)
        self.heads = _Buffer(np.uint8)
        self.rows = 0

    def reserve(self, text_bytes: int) -> None:
        """Room for the records of TEXT_BYTES of JSON lines (a chunk takes at least 6 bytes)."""
        self.t.reserve(text_bytes // 6 + 1)
        self.n.reserve(text_bytes // 6 + 1)
        self.heads.reserve(text_bytes + 1)

    def add(self, blk: _Block) -> None:
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

    def table(self) -> RequestTable:
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
        return RequestTable(_Store(cols=cols, points=self.points, server=server, chunk_off=off,
                                   chunk_t=self.t.array(), chunk_n=self.n.array(),
                                   heads=self.heads.array(), head_off=head_off))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return v >= 0 and float(v).is_integer() and v <= MAX_COUNT


# ============================================================================ reading


def _pairs(csv: bytes) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(t, n, nulls) of CSV, one `t,n` pair a line (n = -1 where null, int64); None when it is not
    of that shape."""
    import pandas as pd
    opts = dict(header=None, names=["t", "n"], engine="c", skip_blank_lines=False)
    try:
        # Token counts are whole numbers nearly always: integers parse fastest.
        df = pd.read_csv(io.BytesIO(csv), dtype={"t": np.float64, "n": np.int64}, na_filter=False, **opts)
        return df["t"].to_numpy(np.float64), df["n"].to_numpy(np.int64), 0
    except Exception:  # noqa: BLE001 - a null or a non-integer count: the general parse below
        pass
    try:
        df = pd.read_csv(io.BytesIO(csv), dtype=np.float64, na_values=["null"],
                         keep_default_na=False, **opts)
    except Exception:  # noqa: BLE001 - whatever pandas refuses is read line by line
        return None
    t, nf = df["t"].to_numpy(np.float64), df["n"].to_numpy(np.float64)
    isnull = np.isnan(nf)
    known = nf[~isnull]
    if np.any(known != np.floor(known)) or np.any(np.abs(known) > MAX_COUNT):
        return None
    return t, np.where(isnull, -1, nf).astype(np.int64), int(isnull.sum())


def _fast_block(block: bytes) -> tuple[_Block | None, int]:
    """(the records of BLOCK parsed in bulk, its line count); the block is whole lines, each
    ending in a newline. The block is None when it is not of the usual shape (it must then be
    read line by line)."""
    arr = np.frombuffer(block, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    lines = len(nl)
    if lines == 0:
        return None, 0
    starts = np.concatenate(([0], nl[:-1] + 1))
    if np.any(nl == starts):                      # an empty line
        return None, lines
    # The first `"chunks":` key of each line. Inside a string a quote is escaped, so the
    # pattern is a key; were it a nested one, the check on the heads below finds out.
    keys = np.fromiter((m.start() for m in _KEY_RE.finditer(block)), dtype=np.int64)
    first = np.searchsorted(keys, starts)
    if np.any(first >= len(keys)) or np.any(keys[np.minimum(first, len(keys) - 1)] >= nl):
        return None, lines
    v = keys[first] + len(_KEY)
    c0, c1 = arr[v], arr[np.minimum(v + 1, len(arr) - 1)]
    nonempty = (c0 == 91) & (c1 == 91)            # "chunks":[[...
    if not np.all(nonempty | ((c0 == 91) & (c1 == 93)) | (c0 == 110)):   # or [] or null
        return None, lines
    # Pairs hold numbers and null only: the first `]]` after the key ends them.
    ends = np.flatnonzero((arr[:-1] == 93) & (arr[1:] == 93))
    vv = v[nonempty]
    at = np.searchsorted(ends, vv)
    if np.any(at >= len(ends)):
        return None, lines
    ee = ends[at]
    if np.any(ee >= nl[nonempty]):
        return None, lines
    vl, el, full = vv.tolist(), ee.tolist(), nonempty.tolist()
    mv = memoryview(block)
    # Each line's pairs as `a,b],[c,d`, lines joined by a sentinel row; then one pair a line.
    text = b"\n-1,-2\n".join([mv[x + 2:y] for x, y in zip(vl, el)])
    if text.translate(None, _CHUNK_TEXT):
        return None, lines
    counts = np.zeros(lines, dtype=np.int64)
    if vl:
        got = _pairs(text.replace(b"],[", b"\n"))
        if got is None:
            return None, lines
        t, n, nulls = got
        # Sentinel rows (n = -2) split the lines.
        sep = np.flatnonzero(n == -2)
        if len(sep) != len(vl) - 1:
            return None, lines
        per = np.diff(np.concatenate(([-1], sep, [len(n)]))) - 1
        keep = np.ones(len(n), dtype=bool)
        keep[sep] = False
        t, n = t[keep], n[keep]
        total = len(t)
        # A comma inside each pair and one between pairs (and one in each sentinel row); no
        # count below -1 (null), and as many -1 as nulls; times are finite.
        if (text.count(b",") != 2 * total - 1 or np.any(per < 1) or np.any(n < -1)
                or np.count_nonzero(n == -1) != nulls or nulls != text.count(b"null")
                or not np.all(np.isfinite(t))):
            return None, lines
        n = n.astype(np.int32)
        counts[nonempty] = per
    else:
        t, n = np.zeros(0), np.zeros(0, dtype=np.int32)
    del text
    # Heads: each line without its list's inside (`"chunks":[]` stays, keeping key order).
    cut = [0]
    for x, y in zip(vl, el):
        cut += (x + 1, y + 1)
    cut.append(len(block))
    heads = b"".join([mv[cut[j]:cut[j + 1]] for j in range(0, len(cut), 2)])
    head_lens = nl - starts + 1
    if vl:
        head_lens[nonempty] -= np.array(el) - np.array(vl)
    try:
        recs = orjson.loads(b"[" + heads[:-1].replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        return None, lines
    if len(recs) != lines:
        return None, lines
    for r, f in zip(recs, full):
        if type(r) is not dict or "point" not in r:
            return None, lines
        c = r.get("chunks", 0)
        if (c != []) if f else (c is not None and c != []):
            return None, lines
    try:
        cols, points, server = _scalar_block(recs)
    except RecordError:         # the line-by-line read names the line and the field
        return None, lines
    return _Block(cols, points, server, counts, t, n, heads, head_lens.astype(np.int64)), lines


def _slow_block(lines: list[bytes], first: int, path: Path, last_unterminated: bool,
                warnings: list[str], fields: tuple[str, ...]) -> _Block:
    """Records line by line, with iter_jsonl's checks and messages (line numbers from FIRST)."""
    recs, heads, where = [], [], []
    for j, line in enumerate(lines):
        no = first + j
        if not line.strip():
            continue
        try:
            rec = loads_finite(line, f"{path} line {no}")
        except BundleError:
            if last_unterminated and j == len(lines) - 1:
                if no == 1:
                    raise no_newline(path, len(line)) from None
                warnings.append(f"{path.name} line {no}: truncated last line skipped")
                continue
            raise
        where.append(f"{path} line {no}")
        recs.append(check_record(rec, where[-1], fields))
        heads.append(_head_json(rec))
    try:
        return _records_block(recs, heads)
    except RecordError as e:
        raise BundleError(f"{where[e.index]}: {e.problem}") from None


def line_blocks(path: Path, size: int | None = None) -> Iterator[tuple[bytes, int, bool]]:
    """(whole lines, their count, False) blocks of about SIZE bytes (BLOCK_BYTES) of PATH
    (plain or gzip), then (the unterminated rest, 1, True) if the file does not end in a newline."""
    rest, lines = b"", 0
    with open_stream(path) as f:
        while True:
            raw = f.read(size or BLOCK_BYTES)
            if not raw:
                break
            data = rest + raw if rest else raw
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                if len(rest) > MAX_LINE_BYTES:
                    raise BundleError(f"{path} line {lines + 1}: longer than "
                                      f"{MAX_LINE_BYTES >> 20} MiB without a newline; not a "
                                      "line of samples")
                continue
            rest = data[cut:]
            block = data[:cut] if cut < len(data) else data
            del data
            lines += block.count(b"\n")
            yield block, block.count(b"\n"), False
    if rest:
        yield rest, 1, True


def _read_file(path: Path, warnings: list[str], b: _Builder, fields: tuple[str, ...]) -> None:
    # A plain file's size bounds its records' chunks and heads; a compressed one grows as read.
    size = path.stat().st_size
    b.reserve(size * (1 if path.suffix != ".gz" else 4))
    workers = parse_workers(size if path.suffix != ".gz" else size * 4)
    lineno = 1
    for get_block, nlines, tail, blk in _parsed_blocks(path, workers):
        if blk is None:
            block = get_block()
            if not tail and block and not block.endswith(b"\n"):
                # A gzip member holding the file's unterminated last line after whole ones.
                cut = block.rfind(b"\n") + 1
                if cut:
                    b.add(_slow_block(block[:cut].split(b"\n")[:-1], lineno, path, False,
                                      warnings, fields))
                blk = _slow_block([block[cut:]], lineno + block.count(b"\n", 0, cut), path, True,
                                  warnings, fields)
            else:
                blk = _slow_block(block.split(b"\n")[:-1] if not tail else [block], lineno, path,
                                  tail, warnings, fields)
        b.add(blk)
        lineno += nlines


def parse_workers(text_bytes: int) -> int:
    """Processes to parse a request file of TEXT_BYTES with: 1 (in this process) below
    PARALLEL_BYTES, else one per core this process may use, up to MAX_PARSE_WORKERS."""
    if text_bytes < PARALLEL_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_PARSE_WORKERS))


def _parse(block: bytes) -> tuple[_Block | None, int]:
    """A worker's task: BLOCK parsed in bulk (None when it must be read line by line)."""
    return _fast_block(block)


def _parse_range(path: str, start: int, end: int) -> tuple[_Block | None, int]:
    """A worker's task: the whole lines at bytes [START, END) of PATH parsed in bulk."""
    return _fast_block(_read_range(path, start, end))


def _parse_member(path: str, start: int, end: int) -> tuple[_Block | None, int]:
    """A worker's task: the gzip member at bytes [START, END) of PATH inflated and parsed in
    bulk (None when it is not whole lines of the usual shape)."""
    block = _inflate_range(path, start, end)
    if not block.endswith(b"\n"):
        return None, block.count(b"\n") + 1
    return _fast_block(block)


def _inflate_range(path: str | Path, start: int, end: int) -> bytes:
    """The gzip member at bytes [START, END) of PATH inflated, refused past the bound every
    compressed stream has (the member's size trailer is not trusted: it can lie)."""
    member = _read_range(path, start, end)
    limit = max(MAX_LINE_BYTES, MAX_INFLATE_RATIO * len(member))
    try:
        d = decompressobj(wbits=31)
        data = d.decompress(member, limit + 1)
    except INFLATE_ERRORS as e:
        raise BundleError(f"{path}: corrupt compressed file ({e}); restore it from git") from None
    if len(data) > limit:
        raise BundleError(f"{path}: a gzip member of {len(member):,} bytes inflates to over "
                          f"{limit:,}, more than {MAX_INFLATE_RATIO} times its size; a "
                          "decompression bomb, not a recorded stream")
    if not d.eof:
        raise BundleError(f"{path}: corrupt compressed file (a gzip member ends early); restore "
                          "it from git")
    return data


# A member header as gzip.compress(..., mtime=0) writes it: no flags, no time. In compressed
# data the 8 bytes stand by chance about once in 2^64 positions.
_MEMBER_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"


def _gzip_members(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of the gzip members of PATH when it starts with one of the kind
    BundleWriter writes (else [], and the file is inflated in one stream)."""
    size = path.stat().st_size
    starts: list[int] = []
    keep = len(_MEMBER_HEAD) - 1
    with open(path, "rb") as f:
        base, carry = 0, b""
        while True:
            part = f.read(BLOCK_BYTES)
            if not part:
                break
            data = carry + part
            at = data.find(_MEMBER_HEAD)
            while at >= 0:
                starts.append(base - len(carry) + at)
                at = data.find(_MEMBER_HEAD, at + 1)
            carry = data[-keep:]
            base += len(part)
            if not starts:
                return []       # not a file of independent members from its first bytes on
    if not starts or starts[0] != 0:
        return []
    starts = sorted(set(starts))
    return list(zip(starts, starts[1:] + [size]))


def _read_range(path: str | Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _line_ranges(path: Path) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """Byte ranges of whole lines of a plain PATH, about BLOCK_BYTES each, and the range of an
    unterminated last line (None when the file ends with a newline)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        tail = None
        if size:
            back = min(size, 1 << 20)
            f.seek(size - back)
            end_part = f.read(back)
            if not end_part.endswith(b"\n"):
                cut = end_part.rfind(b"\n")
                if cut < 0 and back < size:
                    raise ValueError("last line over 1 MiB")
                whole = size - back + cut + 1
                tail, size = (whole, path.stat().st_size), whole
        ranges, start = [], 0
        while start < size:
            end = start + BLOCK_BYTES
            if end >= size:
                end = size
            else:
                f.seek(end)
                while True:
                    part = f.read(1 << 16)
                    if not part:
                        end = size
                        break
                    i = part.find(b"\n")
                    if i >= 0:
                        end = min(end + i + 1, size)
                        break
                    end += len(part)
            ranges.append((start, end))
            start = end
    return ranges, tail


def _parsed_blocks(path: Path, workers: int) -> Iterator[tuple[Any, int, bool, _Block | None]]:
    """(a function returning the block's bytes, its line count, is the unterminated tail, its
    bulk parse or None) for each block of PATH, in order. With WORKERS > 1 the bulk parses run
    in that many processes, a few blocks ahead (a plain file's workers read their own byte
    ranges); a block whose parse failed is read line by line by the caller."""
    if workers <= 1:
        for block, nlines, tail in line_blocks(path):
            yield (lambda block=block: block), nlines, tail, None if tail else _fast_block(block)[0]
        return
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    ahead: deque = deque()
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=keep_freed_memory) as pool:
        members = _gzip_members(path) if path.suffix == ".gz" else []
        try:
            ranges, tail = _line_ranges(path) if path.suffix != ".gz" else (None, None)
        except ValueError:      # an unterminated last line too long to find: read as .gz is
            ranges = None
        if len(members) > 1:
            # Independent gzip members (as BundleWriter.close() writes them): each worker
            # inflates and parses its own; the line count of a member is known once read.
            items = [((lambda a=a, z=z: _inflate_range(path, a, z)), False,
                      lambda a=a, z=z: pool.submit(_parse_member, str(path), a, z))
                     for a, z in members]
        elif ranges is not None:
            items = [((lambda a=a, z=z: _read_range(path, a, z)), False,
                      lambda a=a, z=z: pool.submit(_parse_range, str(path), a, z)) for a, z in ranges]
            if tail:
                items.append(((lambda t=tail: _read_range(path, *t)), True, None))
        else:
            items = (((lambda block=block: block), tail,
                      None if tail else (lambda block=block: pool.submit(_parse, block)))
                     for block, _nlines, tail in line_blocks(path))
        for get_block, tail, submit in items:
            ahead.append((get_block, tail, submit() if submit else None))
            while len(ahead) > 2 * workers:
                yield _resolved(ahead.popleft())
        while ahead:
            yield _resolved(ahead.popleft())


def _resolved(item: tuple) -> tuple[Any, int, bool, _Block | None]:
    get_block, tail, fut = item
    if fut is None:
        return get_block, 1, tail, None
    blk, nlines = fut.result()
    return get_block, nlines, tail, blk


def read_request_files(paths: Sequence[Path], warnings: list[str],
                       fields: tuple[str, ...] = ("point",)) -> RequestTable:
    """The requests of PATHS (requests.jsonl and its shards, plain or .gz), in order, as one table."""
    keep_freed_memory()     # the table and every statistic over it are large arrays
    b = _Builder()
    for p in paths:
        _read_file(Path(p), warnings, b, fields)
    return b.table()
