"""One block of request lines parsed: in bulk where it has the usual shape, else line by line."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import orjson

from bundle.files import (
    BundleError,
    check_record,
    loads_finite,
    no_newline,
)
from bundle.request_table.columns import (
    Block,
    RecordError,
    head_json,
    records_block,
    scalar_block,
)
from bundle.schema import MAX_COUNT

_KEY = b'"chunks":'
_KEY_RE = re.compile(re.escape(_KEY))
# Bytes a block's chunk pairs may hold on the fast path: numbers, null, brackets, commas.
_CHUNK_TEXT = b"0123456789.eE+-,[]nul\n"


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


def fast_block(block: bytes) -> tuple[Block | None, int]:
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
        cols, points, server = scalar_block(recs)
    except RecordError:         # the line-by-line read names the line and the field
        return None, lines
    return Block(cols, points, server, counts, t, n, heads, head_lens.astype(np.int64)), lines


def slow_block(lines: list[bytes], first: int, path: Path, last_unterminated: bool,
                warnings: list[str], fields: tuple[str, ...]) -> Block:
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
        heads.append(head_json(rec))
    try:
        return records_block(recs, heads)
    except RecordError as e:
        raise BundleError(f"{where[e.index]}: {e.problem}") from None
