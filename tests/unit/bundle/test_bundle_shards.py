"""Request shards (`requests.w{k}.jsonl`, one per load-generating worker): close, read, resume."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bundle.files import BundleError
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter

MANIFEST = {"tool": {"name": "test"}, "engine": None, "plan": {}}


def rec(point: str, i: int, t: float) -> dict:
    return {"point": point, "i": i, "warmup": False, "t_send": t, "t_first": t + 0.1,
            "t_end": t + 0.3, "chunks": [[t + 0.1, 1], [t + 0.2, 2], [t + 0.3, None]],
            "status": "ok", "usage": {"prompt_tokens": 8, "completion_tokens": 3},
            "pad": "x" * 200}


def start_points(w: BundleWriter, *pids: str) -> None:
    """The points' start events, so their requests count (the reader warns of any that do not)."""
    for pid in pids:
        w.append("points", {"point": pid, "event": "start", "t": 0.0, "settings": {}})


def write_shard(path: Path, k: int, recs: list[dict], tail: str = "") -> None:
    """Append RECS to worker K's shard as a worker process does (one flushed line each)."""
    with open(path / f"requests.w{k}.jsonl", "a") as f:
        for r in recs:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
        f.write(tail)


def shard_bundle(path: Path) -> dict[str, list[dict]]:
    w = BundleWriter(path, MANIFEST)
    start_points(w, "A", "B")
    main = [rec("A", i, float(i)) for i in range(3)]
    for r in main:
        w.append("requests", r)
    parts = {"main": main}
    for k in (10, 0, 2, 1):  # k = 10 reads after k = 2: numeric order, not the names' order
        # sends from different workers never share a time (the reader refuses a repeated one)
        parts[k] = [rec("A", 100 * (k + 1) + i, 10.0 + i + k / 100) for i in range(40 if k == 1 else 4)]
        write_shard(path, k, parts[k])
    w.close("complete", compress_over=4096)
    return parts


def test_close_compresses_large_shards_and_lists_every_shard(tmp_path):
    shard_bundle(tmp_path)
    files = json.loads((tmp_path / "manifest.json").read_text())["files"]
    assert files["requests"] == "requests.jsonl"
    assert files["requests.w1"] == "requests.w1.jsonl.gz"  # over the threshold
    assert not (tmp_path / "requests.w1.jsonl").exists()
    assert {files[f"requests.w{k}"] for k in (0, 2, 10)} == {f"requests.w{k}.jsonl" for k in (0, 2, 10)}


def test_reader_takes_requests_jsonl_then_the_shards_in_k_order(tmp_path):
    parts = shard_bundle(tmp_path)
    b = read_bundle(tmp_path)
    want = parts["main"] + parts[0] + parts[1] + parts[2] + parts[10]
    assert b.requests == want
    assert len(b.request_table) == len(want)
    assert b.file_for("requests") == ("requests.jsonl + requests.w0.jsonl + requests.w1.jsonl.gz"
                                      " + requests.w2.jsonl + requests.w10.jsonl")


def test_shards_alone_and_no_shards(tmp_path):
    w = BundleWriter(tmp_path / "a", MANIFEST)
    write_shard(tmp_path / "a", 0, [rec("A", 1, 1.0)])
    w.close("complete")
    b = read_bundle(tmp_path / "a")
    assert [r["i"] for r in b.requests] == [1]
    assert b.file_for("requests") == "requests.w0.jsonl"
    w = BundleWriter(tmp_path / "b", MANIFEST)
    w.append("requests", rec("A", 2, 2.0))
    w.close("complete")
    assert read_bundle(tmp_path / "b").file_for("requests") == "requests.jsonl"


def test_a_truncated_last_line_of_a_shard_is_reported_and_skipped(tmp_path):
    w = BundleWriter(tmp_path, MANIFEST)
    start_points(w, "A")
    write_shard(tmp_path, 0, [rec("A", 1, 1.0), rec("A", 2, 2.0)], tail='{"point":"A","i":3,"ch')
    write_shard(tmp_path, 1, [rec("A", 4, 4.0)])
    w.close("interrupted", "SIGINT")
    b = read_bundle(tmp_path)
    assert [r["i"] for r in b.requests] == [1, 2, 4]
    assert b.warnings == ["requests.w0.jsonl line 3: truncated last line skipped"]


def test_a_record_without_point_in_a_shard_is_refused_with_its_line(tmp_path):
    w = BundleWriter(tmp_path, MANIFEST)
    write_shard(tmp_path, 0, [rec("A", 1, 1.0), {"i": 2}])
    w.close("complete")
    with pytest.raises(BundleError, match=r"requests.w0.jsonl line 2: the record has no 'point' field"):
        read_bundle(tmp_path)


def test_resume_reopens_shards_like_the_other_streams(tmp_path):
    parts = shard_bundle(tmp_path)
    # A crash had left half a line at the end of shard 2 before the resume.
    with open(tmp_path / "requests.w2.jsonl", "a") as f:
        f.write('{"point":"A","i":9')
    w = BundleWriter(tmp_path, MANIFEST, resume=True)
    # Compressed shards are plain again, whole, and appendable; the half line is gone.
    assert not (tmp_path / "requests.w1.jsonl.gz").exists()
    lines = (tmp_path / "requests.w1.jsonl").read_text().splitlines()
    assert [json.loads(ln) for ln in lines] == parts[1]
    assert (tmp_path / "requests.w2.jsonl").read_text().endswith("\n")
    more = [rec("B", 900 + i, 50.0 + i) for i in range(2)]
    write_shard(tmp_path, 1, more[:1])
    write_shard(tmp_path, 2, more[1:])
    w.append("requests.w0", rec("B", 999, 60.0))  # the writer appends to a shard stream too
    w.close("complete", compress_over=4096)
    b = read_bundle(tmp_path)
    assert b.warnings == []
    assert b.requests == (parts["main"] + parts[0] + [rec("B", 999, 60.0)] + parts[1] + more[:1]
                          + parts[2] + more[1:] + parts[10])
    with gzip.open(tmp_path / "requests.w1.jsonl.gz", "rt") as f:
        assert len(f.read().splitlines()) == len(parts[1]) + 1


def test_a_gzip_member_whose_size_trailer_lies_is_refused_in_bounded_memory(tmp_path):
    from bundle.request_table.fileread import _inflate_range
    member = bytearray(gzip.compress(b"\n" * (256 << 20), mtime=0))
    member[-4:] = (100).to_bytes(4, "little")      # says 100 bytes; holds 256 MiB
    p = tmp_path / "requests.jsonl.gz"
    p.write_bytes(bytes(member))
    with pytest.raises(BundleError, match="decompression bomb"):
        _inflate_range(p, 0, len(member))
    honest = gzip.compress(b'{"point":"A"}\n', mtime=0)
    p.write_bytes(honest)
    assert _inflate_range(p, 0, len(honest)) == b'{"point":"A"}\n'
    p.write_bytes(honest[:-9])                       # cut inside its deflate stream
    with pytest.raises(BundleError, match="corrupt compressed file"):
        _inflate_range(p, 0, len(honest) - 9)
