"""RequestTable: a round's requests as columns, a sequence of record dicts when iterated."""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

import numpy as np
import orjson

from bundle.request_table.columns import Builder, RecordError, Store, records_block


class RequestTable(Sequence):
    """Requests as columns, as the package's docstring says; iterated, a sequence of dicts."""

    def __init__(self, store: Store, rows: np.ndarray | None = None):
        self._s = store
        self._rows = rows  # None: every row of the store, in order

    # ------------------------------------------------------------------ building

    @classmethod
    def from_records(cls, records: Sequence[dict]) -> RequestTable:
        """A table of request records (dicts as read from requests.jsonl)."""
        b = Builder()
        try:
            b.add(records_block(list(records)))
        except RecordError as e:
            raise ValueError(f"record {e.index}: {e.problem}") from None
        return cls(b.store())

    @classmethod
    def empty(cls) -> RequestTable:
        return cls(Builder().store())

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
