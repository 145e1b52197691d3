"""The columnar request table: the same records and statistics as the record dicts it replaced.

The statistics are checked against the list-of-dicts definitions they had before the table
(kept here as the reference), on records with every awkward shape the client can write:
null and multi-token chunks, no chunks, errors, warm-ups, missing usage and send times.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from bundle.files import BundleError
from bundle.request_table import fileread
from bundle.request_table.table import RequestTable
from bundle.store.reader import read_bundle
from bundle.store.writer import compress_in_members
from report.derive.reconcile.estimator import requests_inside_window
from report.derive.stats import point as STP
from report.derive.stats import requests as RQ
from report.derive.stats import samples as SA
from report.derive.timing.server import per_request_server_ms
from tests.conftest import FIXTURES, output_tokens
from tests.oracles import engine_busy_periods, requests_straddling_window

# The committed bundles of tests/fixtures here; the whole rounds of runs/ in
# tests/integration/test_committed_rounds.py.
FIXTURE_BUNDLES = [FIXTURES / name for name in ("cpu-demo", "h200-lockstep", "h200-round-4")]


# ---------------------------------------------------------------- the reference definitions

def ref_ttfts(rs):
    return [(r["t_first"] - r["t_send"]) * 1e3 for r in rs if r.get("t_first") is not None]


def ref_e2es(rs):
    return [(r["chunks"][-1][0] - r["t_send"]) * 1e3 for r in rs if r.get("chunks")]


def ref_itl(rs):
    out = []
    for r in rs:
        ch = r.get("chunks") or []
        for (t0, _), (t1, n) in zip(ch, ch[1:]):
            k = n if isinstance(n, int) and n > 0 else 1
            out.extend([(t1 - t0) * 1e3 / k] * k)
    return out


def ref_tpots(rs):
    out = []
    for r in rs:
        n = output_tokens(r)
        if r.get("chunks") and n and n > 1:
            out.append((r["chunks"][-1][0] - r["t_first"]) * 1e3 / (n - 1))
    return out


def ref_window_tokens(rs, a, b):
    return sum((n or 1) for r in rs if r.get("status") == "ok"
               for t, n in r.get("chunks") or [] if a <= t <= b)


def ref_total_tok_s(rs, a, b):
    prompt = sum((r.get("usage") or {}).get("prompt_tokens", r.get("input_len") or 0)
                 for r in rs if r.get("status") == "ok" and r.get("t_first") is not None
                 and a <= r["t_first"] <= b)
    return (ref_window_tokens(rs, a, b) + prompt) / (b - a)


def ref_busy(rs, t_end):
    spans = sorted((r["t_send"], r["t_end"]) for r in rs
                   if r.get("t_send") is not None and r.get("t_end") is not None)
    ends = []
    for t0, t1 in spans:
        if not ends or t0 > ends[-1]:
            ends.append(t1)
        else:
            ends[-1] = max(ends[-1], t1)
    return sum(1 for e in ends if e <= t_end)


def awkward_records(n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    recs = []
    for i in range(n):
        t = rng.uniform(0, 100)
        kind = rng.choice(["ok", "ok", "ok", "nulls", "multi", "empty", "error", "nousage", "nosend"])
        chunks = []
        tt = t + rng.uniform(0.01, 0.2)
        for _ in range(0 if kind in ("empty", "error", "nosend") else rng.randint(1, 12)):
            n_tok = rng.choice([1, 1, 2, 3]) if kind == "multi" else 1
            chunks.append([tt, None if kind == "nulls" and rng.random() < 0.5 else n_tok])
            tt += rng.uniform(0.001, 0.05)
        r = {"point": rng.choice(["A", "B", "C"]), "i": i, "warmup": rng.random() < 0.1,
             "t_slot": t - rng.uniform(0, 0.01), "t_sched": None, "input_len": 16,
             "max_tokens": 16, "group": None, "t_send": None if kind == "nosend" else t,
             "t_headers": t + 0.005, "t_first": chunks[0][0] if chunks else None,
             "t_end": None if kind == "nosend" else tt, "chunks": chunks if chunks or rng.random() < 0.5 else None,
             "status": "error" if kind == "error" else "ok", "http_status": 200,
             "error": "boom" if kind == "error" else None, "finish_reason": "length",
             "usage": None if kind in ("nousage", "nulls") else
             {"prompt_tokens": 16, "completion_tokens": sum(c[1] or 1 for c in chunks),
              "total_tokens": 16 + len(chunks)},
             "server_metrics": {"queue_time_ms": rng.uniform(0, 5)} if rng.random() < 0.7 else None}
        recs.append(r)
    return recs


def close(a, b) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=0, abs_tol=0) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def recs():
    return awkward_records(600)


def test_statistics_equal_the_record_definitions(recs):
    table = RequestTable.from_records(recs)
    assert list(table) == recs
    for pid in "ABC":
        w = RQ.Window(pid, 10.0, 20.0, 90.0, "ok", None, {})
        ref_point = [r for r in recs if r["point"] == pid
                     and (r["t_send"] is None or 10.0 <= r["t_send"] <= 90.0)]
        point = RQ.requests_of_point(table, w)
        assert list(point) == ref_point
        ref_meas = [r for r in ref_point if not r["warmup"] and r["status"] == "ok"]
        meas = RQ.measured(point)
        assert list(meas) == ref_meas
        assert list(RQ.failed_requests(point)) == [r for r in ref_point if not r["warmup"] and r["status"] != "ok"]
        assert SA.ttfts_ms(meas).tolist() == ref_ttfts(ref_meas)
        assert SA.e2es_ms(meas).tolist() == ref_e2es(ref_meas)
        assert SA.itl_gaps_ms(meas).tolist() == ref_itl(ref_meas)
        assert SA.tpots_ms(meas).tolist() == ref_tpots(ref_meas)
        assert STP.output_tokens_in_window(point, 30.0, 60.0) == ref_window_tokens(ref_point, 30.0, 60.0)
        assert STP.total_tok_s(point, 30.0, 60.0) == ref_total_tok_s(ref_point, 30.0, 60.0)
        assert STP.multi_token_chunks(meas) == sum(1 for r in ref_meas for _, n in r["chunks"] or []
                                                  if isinstance(n, int) and n > 1)
        vals = ref_itl(ref_meas)
        for q in (0, 50, 90, 99, 100):
            assert SA.percentile(SA.itl_gaps_ms(meas), q) == SA.percentile(vals, q)
        qs = [r["server_metrics"]["queue_time_ms"] for r in ref_meas if r["server_metrics"]]
        assert per_request_server_ms(meas, "queue_time_ms") == sum(qs) / len(qs)
        assert SA.mean(SA.ttfts_ms(meas)) == sum(ref_ttfts(ref_meas)) / len(ref_ttfts(ref_meas))
        inside = requests_inside_window(point, 30.0, 60.0)
        assert list(inside) == [r for r in ref_point if r["status"] == "ok" and r["t_send"] is not None
                                and 30.0 <= r["t_send"] and r["t_end"] <= 60.0]
        straddling = requests_straddling_window(point, 30.0, 60.0)
        assert all(r not in list(inside) for r in straddling)
        assert engine_busy_periods(point, 60.0) == ref_busy(ref_point, 60.0)


def test_output_tokens_per_request(recs):
    table = RequestTable.from_records(recs)
    got = SA.output_token_counts(table).tolist()
    ref = [output_tokens(r) for r in recs]
    assert [None if math.isnan(g) else int(g) for g in got] == ref


def _write(path: Path, recs: list[dict]) -> None:
    path.write_bytes(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in recs))


def _same_store(a: RequestTable, b: RequestTable) -> None:
    sa, sb = a._s, b._s
    assert sa.cols.keys() == sb.cols.keys() and sa.server.keys() == sb.server.keys()
    for k in sa.cols:
        assert np.array_equal(sa.cols[k], sb.cols[k], equal_nan=True), k
    for k in sa.server:
        assert np.array_equal(sa.server[k], sb.server[k], equal_nan=True), k
    for k in ("chunk_off", "chunk_t", "chunk_n", "heads", "head_off"):
        assert np.array_equal(getattr(sa, k), getattr(sb, k)), k
    assert sa.points == sb.points


def test_bulk_and_line_by_line_parses_agree(tmp_path, recs, monkeypatch):
    p = tmp_path / "requests.jsonl"
    _write(p, recs)
    bulk = fileread.read_request_files([p], [])
    monkeypatch.setattr(fileread, "fast_block", lambda block: (None, block.count(b"\n")))
    slow = fileread.read_request_files([p], [])
    _same_store(bulk, slow)
    _same_store(bulk, RequestTable.from_records(recs))
    assert list(bulk) == recs


@pytest.mark.parametrize("gz", [False, "one stream", "members"])
@pytest.mark.parametrize("cut_short", [False, True])
def test_parallel_parse_equals_the_serial_one(tmp_path, recs, monkeypatch, gz, cut_short):
    # Small blocks and a low threshold, so that a small file goes through the worker
    # processes in many blocks; one bad line in the middle is read line by line, in order.
    p = tmp_path / ("requests.jsonl.gz" if gz else "requests.jsonl")
    lines = [json.dumps(r).encode() + b"\n" for r in recs]
    lines[len(lines) // 2] = b'{"point":"A","chunks":[[1.0,1],[2.0,null]],"odd":[[1]]}\n'
    data = b"".join(lines) + (b'{"point":"A","chunks":[[1.0,' if cut_short else b"")
    if gz == "members":     # as BundleWriter.close() writes it, in members of ~4 KB
        raw = tmp_path / "raw.jsonl"
        raw.write_bytes(data)
        compress_in_members(raw, p, member_bytes=4096)
        assert len(fileread._gzip_members(p)) > 10 and gzip.decompress(p.read_bytes()) == data
    else:
        p.write_bytes(gzip.compress(data, mtime=1) if gz else data)
        assert fileread._gzip_members(p) == []
    warned: list[str] = []
    serial = fileread.read_request_files([p], warned)
    assert len(warned) == cut_short
    monkeypatch.setattr(fileread, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(fileread, "PARALLEL_BYTES", 0)
    assert fileread.parse_workers(1) >= 1
    monkeypatch.setattr(fileread, "parse_workers", lambda text_bytes: 2)
    warned_too: list[str] = []
    parallel = fileread.read_request_files([p], warned_too)
    assert warned_too == warned
    _same_store(parallel, serial)
    assert list(parallel) == [json.loads(ln) for ln in lines]


def check_reads_as_json(bundle) -> None:
    """The bundle's request table holds the records json reads, column for column."""
    # A small requests file stays plain (BundleWriter.close compresses those over 1 MiB).
    gz = bundle / "requests.jsonl.gz"
    lines = gzip.open(gz, "rt") if gz.exists() else open(bundle / "requests.jsonl", encoding="utf-8")
    with lines:
        ref = [json.loads(line) for line in lines]
    table = read_bundle(bundle).request_table
    assert len(table) == len(ref) and list(table) == ref
    _same_store(table, RequestTable.from_records(ref))


@pytest.mark.parametrize("bundle", FIXTURE_BUNDLES, ids=lambda p: p.name)
def test_committed_fixture_bundles_read_as_json_reads_them(bundle):
    check_reads_as_json(bundle)


@pytest.mark.parametrize("line, needle", [
    (b'{"point":"A","chunks":[[1.0,1],[2.0]]}', "a chunk is [2.0]"),
    (b'{"point":"A","chunks":[[1.0,-3]]}', "a chunk is [1.0, -3]"),
    (b'{"point":"A","chunks":"x"}', "'chunks' is not a list"),
    (b'{"point":"A","chunks":[[1.0,1]]', "not valid JSON"),
    (b'{"chunks":[[1.0,1]]}', "no 'point' field"),
])
def test_a_bad_record_in_the_middle_is_named_by_its_line(tmp_path, recs, line, needle):
    p = tmp_path / "requests.jsonl"
    _write(p, recs[:5])
    p.write_bytes(p.read_bytes() + line + b"\n" + json.dumps(recs[5]).encode() + b"\n")
    with pytest.raises(BundleError, match="line 6"):
        try:
            fileread.read_request_files([p], [])
        except BundleError as e:
            assert needle in str(e), str(e)
            raise


def test_an_unterminated_last_line_is_skipped_with_a_warning(tmp_path, recs):
    p = tmp_path / "requests.jsonl"
    _write(p, recs[:20])
    p.write_bytes(p.read_bytes() + b'{"point":"A","chunks":[[1.0,')
    warnings: list[str] = []
    table = fileread.read_request_files([p], warnings)
    assert list(table) == recs[:20]
    assert warnings == ["requests.jsonl line 21: truncated last line skipped"]
