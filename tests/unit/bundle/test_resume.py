"""Resuming a bundle: the writer appends after what an interrupted round left, compressed
streams and a crash-truncated last line included."""

from __future__ import annotations

from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter


def test_resume_appends_to_compressed_and_crash_truncated_streams(tmp_path):
    """A resumed bundle keeps every earlier record in order, even after close() compressed a
    stream (large rounds) or a crash left half a line (which the reader skips)."""
    out = tmp_path / "b"
    base = {"tool": {"name": "test"}, "engine": {"mode": "endpoint"}, "plan": {}}
    w = BundleWriter(out, base)
    for i in range(40):
        w.append("requests", {"point": "a", "i": i})
    w.append("points", {"point": "a", "event": "start", "t": w.now()})
    w.close("interrupted", "interrupted by the user", compress_over=100)
    assert (out / "requests.jsonl.gz").exists() and not (out / "requests.jsonl").exists()
    with open(out / "points.jsonl", "a") as f:  # a crash in the middle of a line
        f.write('{"point": "a", "event": "me')
    assert read_bundle(out).warnings == ["points.jsonl line 2: truncated last line skipped"]

    w = BundleWriter(out, base, resume=True)
    for i in range(40, 50):
        w.append("requests", {"point": "a", "i": i})
    w.append("points", {"point": "a", "event": "end", "t": w.now(), "status": "ok"})
    w.close("complete", compress_over=100)
    b = read_bundle(out)
    assert b.warnings == []
    assert [r["i"] for r in b.requests] == list(range(50))
    assert [e["event"] for e in b.points] == ["start", "end"]
    assert b.manifest["files"]["requests"] == "requests.jsonl.gz"
