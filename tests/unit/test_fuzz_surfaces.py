"""Property-based: what a user or a server hands the tool on the newer surfaces (a round's
slo.toml, a trace's lines, an exporter's page, a point id, a sessions server's reply ids, a
manifest's fields) ends either in a clean result that
holds the invariants or in a one-line refusal naming where, never in anything else, and all
of it within a few seconds."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.client import EventSink
from bench.exposition import parse_exposition
from bench.prompts import PlanError
from bench.sessions import ReplyIds
from bench.traces import MAX_GAP_S, MAX_SPAN_S, load_trace
from bundle.files import BundleError
from bundle.plausible import DCGM_FIELDS, FIELD_RANGES, screen
from bundle.schema import record_problem
from bundle.slo import Slo, SloError, slo_of_file
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter
from report.derive.gpu.dcgm import dcgm_gpu_rows
from report.derive.round.read import NO_SLO, read_round
from report.judge.result import judge
from report.judge.verdicts import build_ledger
from report.publish.dumps import findings_json
from report.words import PLACEHOLDER
from tests.conftest import FIXTURES

FAST = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def one_line(e: Exception, starts: str) -> None:
    text = str(e)
    assert text.startswith(starts) and "\n" not in text, text


NUMBERS = st.sampled_from(["500", "0", "-1", "1e308", "1e400", "nan", "inf", "-inf", "99.5", "101",
                           '"500"', "true", "[1]", "{a = 1}", "[[[[1]]]]", "0x10", "1_000"])
SLO_LINES = st.one_of(
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(
        ["ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "percentile", "p99", "ttft_ms.x"]), NUMBERS),
    st.sampled_from(["[slo]", "[other]", "[slo.deeper]", "[[slo]]", "", "#", "[slo", "x ="]))


GOOD_SLO = st.lists(st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(
    ["ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "percentile"]), st.sampled_from(["500", "99.5", "1e3"])),
    min_size=1, max_size=4, unique_by=lambda line: line.split(" ")[0]).map(lambda ls: ["[slo]", *ls])


@FAST
@given(lines=GOOD_SLO | st.lists(SLO_LINES, max_size=8), junk=st.just(b"") | st.binary(max_size=4))
def test_a_slo_toml_is_an_slo_or_one_line_naming_the_file(tmp_path, lines, junk):
    p = tmp_path / "slo.toml"
    p.write_bytes("\n".join(lines).encode() + junk)
    try:
        slo = slo_of_file(p)
    except SloError as e:
        one_line(e, str(p))
        return
    assert isinstance(slo, Slo) and slo.objectives()
    assert all(math.isfinite(v) and v > 0 for v in slo.objectives().values())
    assert 0 < slo.percentile <= 100


def sorted_if_numbers(stamps: list) -> list:
    """STAMPS in time order when all are numbers (a trace is in order), else as drawn."""
    if all(isinstance(t, (int, float)) and not (isinstance(t, float) and math.isnan(t)) for t in stamps):
        return sorted(stamps)
    return stamps


STAMPS = st.one_of(st.integers(0, 10 ** 6), st.integers(0, 10 ** 13), st.integers(10 ** 300, 10 ** 400),
                   st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from(['"inf"', '"nan"', "true", "null", '"12"']))


@FAST
@given(stamps=st.lists(STAMPS, min_size=1, max_size=8).map(sorted_if_numbers) | st.lists(
           STAMPS, min_size=1, max_size=8), scale=st.sampled_from([1.0, 1e-3, 1e6]),
       lengths=st.integers(0, 3000))
def test_a_mooncake_trace_is_a_bounded_schedule_or_one_line_naming_its_line(tmp_path, stamps, scale,
                                                                            lengths):
    p = tmp_path / "t.jsonl"
    rows = []
    for t in stamps:
        t = t if isinstance(t, str) else json.dumps(t) if not isinstance(t, float) or math.isfinite(t) \
            else {math.inf: "Infinity", -math.inf: "-Infinity"}.get(t, "NaN")
        rows.append(f'{{"timestamp": {t}, "input_length": {lengths}, "output_length": 4}}')
    p.write_text("\n".join(rows) + "\n")
    try:
        trace = load_trace(str(p), "mooncake", time_scale=scale)
    except PlanError as e:
        one_line(e, str(p))
        return
    at = [r.send_at_s for r in trace.requests]
    assert all(math.isfinite(t) and 0 <= t <= MAX_SPAN_S for t in at)
    assert all(0 <= b - a <= MAX_GAP_S for a, b in zip(at, at[1:]))


@FAST
@given(stamps=st.lists(st.one_of(st.sampled_from(["nan", "inf", "-1", "1e308", "", "x",
                                                  "2024-05-10 00:00:00.0000000"]),
                                 st.floats(0, 1e9).map(str)), min_size=1, max_size=6))
def test_an_azure_trace_is_a_bounded_schedule_or_one_line_naming_its_line(tmp_path, stamps):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t},10,5\n" for t in stamps))
    try:
        trace = load_trace(str(p), "azure")
    except PlanError as e:
        one_line(e, str(p))
        return
    assert all(math.isfinite(r.send_at_s) and 0 <= r.send_at_s <= MAX_SPAN_S for r in trace.requests)


VALUES = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "-700", "0", "5.0", "1e308", "140737488355328",
                                    "9223372036854775794", "2147483632", "0.44", "692.847"]),
                   st.floats(-1e6, 1e6, allow_nan=False).map(repr))
SERIES = st.builds(lambda name, gpu, v: f'{name}{{gpu="{gpu}",modelName="H200"}} {v}',
                   st.sampled_from(sorted(DCGM_FIELDS) + ["DCGM_FI_DEV_MEMORY_TEMP"]),
                   st.sampled_from(["0", "1", "abc", "", "-1", "1.5", "٣"]), VALUES)


@FAST
@given(page=st.lists(SERIES, min_size=1, max_size=12, unique_by=lambda s: s.rsplit(" ", 1)[0]))
def test_an_exporters_page_is_recorded_readable_and_its_rows_plausible(tmp_path_factory, page):
    d = tmp_path_factory.mktemp("b")
    samples, withheld = screen(parse_exposition("\n".join(page) + "\n", "DCGM_FI_"))
    w = BundleWriter(d, {"engine": {}, "plan": {}, "tool": {}})
    w.append("dcgm", {"t": 0.0, "dt": 0.01, "ok": True, "samples": samples, "withheld": withheld})
    w.close("complete")
    (rec,) = read_bundle(d).dcgm                       # what was written, the reader takes
    assert rec["samples"] == samples and set(samples).isdisjoint(withheld)
    for row in dcgm_gpu_rows([rec]):
        for field, v in row.items():
            lo, hi, lo_ok = FIELD_RANGES.get(field, (-math.inf, math.inf, True))
            assert math.isfinite(v) and (lo < v or (lo_ok and v == lo)) and v <= hi, (field, v)


@FAST
@given(pid=st.text(max_size=70) | st.from_regex(r"s[0-9]-L[0-9]{1,5}-[cr][0-9.e+]{1,8}", fullmatch=True))
def test_a_point_id_is_read_whole_by_one_placeholder_or_refused_in_one_line(tmp_path_factory, pid):
    rec = {"t": 0.0, "event": "start", "point": pid, "settings": {"id": pid}}
    bad = record_problem("points", rec)
    if bad is None:
        (m,) = PLACEHOLDER.finditer(f"[[p.{pid}.ttft_ms_p99|pct]]")
        assert m.group(1) == f"p.{pid}.ttft_ms_p99" and m.group(2) == "pct"
        return
    d = tmp_path_factory.mktemp("b")
    w = BundleWriter(d, {"engine": {}, "plan": {}, "tool": {}})
    w.close("complete")
    (d / "points.jsonl").write_text(json.dumps(rec) + "\n")
    try:
        read_bundle(d)
        raise AssertionError(f"{pid!r} read")
    except BundleError as e:
        one_line(e, f"{d}/points.jsonl line 1: field 'point'")


IDS = st.one_of(st.integers(-5, 1200), st.text(max_size=3), st.booleans(), st.none(),
                st.floats(allow_nan=False, allow_infinity=False))
EVENT_IDS = st.lists(IDS, max_size=5) | st.integers(1000, 3000).map(lambda n: [1] * n)


@FAST
@given(events=st.lists(EVENT_IDS, max_size=6), max_tokens=st.integers(1, 40))
def test_a_sessions_reply_is_resent_only_as_ids_of_the_vocabulary(events, max_tokens):
    rec = {"point": "P", "i": 0, "warmup": False, "t_send": 0.0, "t_headers": 0.0, "t_first": None,
           "t_end": 1.0, "chunks": [], "status": "error", "http_status": 200, "error": None,
           "finish_reason": None, "usage": None, "server_metrics": None, "max_tokens": max_tokens}
    reply = ReplyIds(vocab=1000)
    sink = EventSink(rec, "completions", "token_ids", reply)
    sink.feed(b"".join(b"data: " + json.dumps({"choices": [{"index": 0, "text": "x", "token_ids": ids}]}).encode()
                       + b"\n\n" for ids in events), 0.5)
    sink.close()
    assert record_problem("requests", rec) is None
    assert all(type(x) is int and 0 <= x < 1000 for x in reply) and len(reply) <= max_tokens
    if rec["error"] is None:        # every event's ids were taken, and counted as they came
        assert list(reply) == [x for ids in events for x in ids]
        assert [n for _, n in rec["chunks"]] == [len(ids) for ids in events]


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2, 2 ** 70) | st.text(max_size=4)
                           | st.floats(allow_nan=False, allow_infinity=False),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               st.text(max_size=3), inner, max_size=3), max_leaves=6)
MANIFEST_PATHS = st.sampled_from([
    ("gpus",), ("gpus", 0), ("gpus", 0, "index"), ("gpus", 0, "name"), ("gpus", 0, "gpm_absent_reason"),
    ("plan",), ("plan", "engine"), ("plan", "engine", "endpoints"), ("plan", "engine", "mode"),
    ("plan", "sweep"), ("plan", "sweep", "concurrency"), ("plan", "workload"), ("plan", "slo"),
    ("engine",), ("engine", "mode"), ("engine", "models"), ("engine", "command"),
    ("model",), ("model", "config"), ("model", "tokenizer_vocab_size"), ("workload_source",),
    ("gpu_absent_reason",), ("host",), ("clock", "t0_wall_unix")])


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory):
    """A recorded manifest (tests/fixtures/cpu-demo's) with one GPU, over one point of one request."""
    m = json.loads((FIXTURES / "cpu-demo" / "manifest.json").read_text())
    m["gpus"] = [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-0", "gpm_supported": False,
                  "gpm_absent_reason": "NVML does not support GPM counters on this GPU"}]
    d = tmp_path_factory.mktemp("small") / "b"
    w = BundleWriter(d, {k: m[k] for k in ("tool", "host", "gpus", "gpu_absent_reason", "engine",
                                           "model", "plan")})
    w.append("points", {"point": "L8-c1", "event": "start", "t": 0.0, "settings": {"concurrency": 1}})
    w.append("gpu", {"t": 1.0, "gpu": 0, "power_w": 300.0})
    w.append("requests", {"point": "L8-c1", "i": 0, "warmup": False, "status": "ok", "t_send": 1.0,
                          "t_first": 1.1, "t_end": 1.5, "chunks": [[1.1, 1], [1.4, 1]]})
    w.append("points", {"point": "L8-c1", "event": "end", "t": 2.0, "status": "ok"})
    w.close("complete")
    return d


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=MANIFEST_PATHS, value=JSON_VALUES)
def test_a_manifest_field_of_any_value_is_read_into_findings_or_refused_in_one_line(
        small_bundle, tmp_path_factory, path, value):
    d = tmp_path_factory.mktemp("m")
    shutil.copytree(small_bundle, d, dirs_exist_ok=True)
    m = json.loads((d / "manifest.json").read_text())
    table = m
    for step in path[:-1]:
        table = table[step]
    table[path[-1]] = value
    (d / "manifest.json").write_text(json.dumps(m))
    try:
        bundle = read_bundle(d)
    except BundleError as e:
        one_line(e, f"{d}/manifest.json")
        return
    rd = read_round(bundle, slo=NO_SLO)
    findings_json(judge(d, "b", rd, build_ledger(rd), None))   # no exception escapes the readers
