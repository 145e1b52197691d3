"""Property-based: what a user or a server hands the tool on the newer surfaces (a round's
slo.toml, a trace's lines, an exporter's page, a point id) ends either in a clean result that
holds the invariants or in a one-line refusal naming where, never in anything else, and all
of it within a few seconds."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.exposition import parse_exposition
from bench.prompts import PlanError
from bench.traces import MAX_GAP_S, MAX_SPAN_S, load_trace
from bundle.files import BundleError
from bundle.plausible import DCGM_FIELDS, FIELD_RANGES, screen
from bundle.schema import record_problem
from bundle.slo import Slo, SloError, slo_of_file
from bundle.store import BundleWriter, read_bundle
from report.derive.power import dcgm_gpu_rows
from report.words import PLACEHOLDER

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
