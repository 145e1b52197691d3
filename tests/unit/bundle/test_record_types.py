"""The reader refuses records no collector writes, naming file, line and field: a field of the
wrong type, a key twice, points whose events do not follow start → end, scrapes out of order,
a file without newlines; and it warns of requests that belong to no point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundle.files import BundleError
from bundle.schema import record_problem
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter

MANIFEST = {"tool": {"name": "test"}, "engine": None, "plan": {}}
SETTINGS = {"id": "A", "concurrency": 2, "input_len": 8, "output_len": 3, "server_set": 0}


def request(pid: str, i: int, t: float) -> dict:
    return {"point": pid, "i": i, "warmup": False, "t_send": t, "t_first": t + 0.1, "t_end": t + 0.3,
            "chunks": [[t + 0.1, 1], [t + 0.3, 2]], "status": "ok",
            "usage": {"prompt_tokens": 8, "completion_tokens": 3}}


def bundle(path: Path, points=None, requests=None, metrics=None, gpu=None) -> Path:
    """A hand-built bundle (labelled so by its origin) of the given stream records."""
    w = BundleWriter(path, {**MANIFEST, "origin": "hand-built-fixture"})
    for rec in points if points is not None else [
            {"point": "A", "event": "start", "t": 1.0, "settings": SETTINGS},
            {"point": "A", "event": "end", "t": 5.0, "status": "ok", "reason": None}]:
        w.append("points", rec)
    for rec in requests if requests is not None else [request("A", 0, 1.5), request("A", 1, 2.0)]:
        w.append("requests", rec)
    for rec in metrics or []:
        w.append("metrics", rec)
    for rec in gpu or []:
        w.append("gpu", rec)
    w.close("complete")
    return path


def edit_line(path: Path, n: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[n - 1] = text + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("stream,line,text,needle", [
    ("points", 1, json.dumps({"point": "A", "event": "start", "t": 1.0,
                              "settings": {**SETTINGS, "concurrency": "2"}}),
     "points.jsonl line 1: settings field 'concurrency' is '2', not a whole number at or above 0 or null"),
    ("requests", 2, json.dumps({**request("A", 1, 2.0), "t_send": "2.0"}),
     "requests.jsonl line 2: field 't_send' is '2.0', not a number or null"),
    ("requests", 1, json.dumps({**request("A", 0, 1.5), "usage": {"completion_tokens": "3"}}),
     "requests.jsonl line 1: field 'usage.completion_tokens' is '3', not an integer or null"),
    ("points", 2, '{"point": "A", "event": "start", "t": 5.0, "event": "end", "status": "ok"}',
     "points.jsonl line 2: the key 'event' appears twice in one object"),
    ("points", 2, json.dumps({"point": "A", "event": "end", "t": 0.5, "status": "ok"}),
     "points.jsonl line 2: the end of point 'A' at t=0.5 is before its start at t=1.0 (line 1)"),
    ("points", 2, json.dumps({"point": "A", "event": "end", "t": 5.0, "status": "fine"}),
     "points.jsonl line 2: field 'status' is 'fine', not one of ok, failed"),
])
def test_a_record_no_collector_writes_is_refused_naming_file_line_and_field(tmp_path, stream, line,
                                                                            text, needle):
    d = bundle(tmp_path / "b")
    edit_line(d / f"{stream}.jsonl", line, text)
    with pytest.raises(BundleError) as e:
        read_bundle(d)
    assert str(e.value).endswith(needle) or needle in str(e.value), str(e.value)


def test_a_point_id_used_twice_is_refused(tmp_path):
    start = {"point": "A", "event": "start", "t": 1.0, "settings": SETTINGS}
    end = {"point": "A", "event": "end", "t": 5.0, "status": "ok", "reason": None}
    again = [start, end, {**start, "t": 6.0}, {**end, "t": 9.0}]
    with pytest.raises(BundleError, match=r"points.jsonl line 3: point 'A' starts again after it "
                                          r"ended ok on line 2"):
        read_bundle(bundle(tmp_path / "b", points=again))
    # A resumed round re-runs a point that failed or was cut short: the later run counts.
    rerun = [start, {**end, "status": "failed"}, {**start, "t": 6.0}, {**end, "t": 9.0}]
    assert len(read_bundle(bundle(tmp_path / "c", points=rerun)).points) == 4


def test_requests_of_no_point_and_a_point_without_requests_are_warned_of(tmp_path):
    points = [{"point": "A", "event": "start", "t": 1.0, "settings": SETTINGS},
              {"point": "A", "event": "end", "t": 5.0, "status": "ok", "reason": None},
              {"point": "B", "event": "start", "t": 6.0, "settings": {**SETTINGS, "id": "B"}},
              {"point": "B", "event": "end", "t": 9.0, "status": "ok", "reason": None}]
    reqs = [request("A", 0, 1.5), request("Z", 1, 2.0), request("Z", 2, 2.5)]
    b = read_bundle(bundle(tmp_path / "b", points=points, requests=reqs))
    assert b.warnings == [
        "requests.jsonl: 2 request(s) of point 'Z', which points.jsonl never starts, are not counted",
        "points.jsonl: point 'B' started but no request of it was recorded"]


def test_scrapes_out_of_order_are_refused(tmp_path):
    scrapes = [{"t": 2.0, "dt": 0.01, "ok": True, "samples": {"x": 1.0}},
               {"t": 1.0, "dt": 0.01, "ok": True, "samples": {"x": 2.0}}]
    with pytest.raises(BundleError, match=r"metrics.jsonl line 2: 't' is 1.0, before line 1's 2.0"):
        read_bundle(bundle(tmp_path / "b", metrics=scrapes))


@pytest.mark.parametrize("value,needle", [("81 W", "field 'power_w' is '81 W', not a number or null"),
                                          (True, "field 'power_w' is True, not a number or null")])
def test_a_gpu_sample_of_the_wrong_type_is_refused(tmp_path, value, needle):
    d = bundle(tmp_path / "b", gpu=[{"t": 1.0, "gpu": 0, "power_w": 80.0, "unsupported": []}])
    edit_line(d / "gpu.jsonl", 1, json.dumps({"t": 1.0, "gpu": 0, "power_w": value, "unsupported": []}))
    with pytest.raises(BundleError, match=needle):
        read_bundle(d)


def test_a_null_scrape_value_is_read_and_a_string_refused():
    assert record_problem("metrics", {"t": 1.0, "ok": True, "samples": {"x": None}}) is None
    assert "samples" in record_problem("metrics", {"t": 1.0, "ok": True, "samples": {"x": "1"}})


def test_a_file_without_newlines_is_refused_not_skipped_as_a_truncated_line(tmp_path):
    d = bundle(tmp_path / "b")
    p = d / "requests.jsonl"
    p.write_text(p.read_text().replace("\n", ""))
    with pytest.raises(BundleError, match=r"requests.jsonl line 1: [0-9,]+ bytes without a newline"):
        read_bundle(d)
    p = d / "points.jsonl"
    bundle(tmp_path / "c")
    p = tmp_path / "c" / "points.jsonl"
    p.write_text(p.read_text().replace("\n", ""))
    with pytest.raises(BundleError, match=r"points.jsonl line 1: [0-9,]+ bytes without a newline"):
        read_bundle(tmp_path / "c")


def test_a_line_nested_past_what_json_can_read_is_refused_in_one_line(tmp_path):
    w = BundleWriter(tmp_path / "b", {"engine": {}, "plan": {}, "tool": {}})
    w.append("points", {"point": "L8-c1", "event": "start", "t": 0.0, "settings": {"concurrency": 1}})
    w.close("complete")
    with open(tmp_path / "b" / "points.jsonl", "a") as f:
        f.write('{"point": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(BundleError, match=r"points.jsonl line 2: JSON nested deeper than it can be read"):
        read_bundle(tmp_path / "b")
