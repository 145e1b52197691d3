"""The diagnosis through the command line and in whole reports: `report findings` and
`report ledger` as subprocesses, the rendered pages of the real GPU fixture, and the
reproducibility verdict of the two whole H200 rounds (runs/round-4 and round-5).

The rules themselves are unit-tested in tests/unit/report/test_diagnosis.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import FIXTURES, ROOT

FIX = FIXTURES


def run_report(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "serving_ledger", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_findings_json_gives_points_and_findings_with_evidence():
    out = run_report("findings", str(FIX / "h200-round-4"), "--json")
    by = {p["point"]: p for p in out["points"]}
    assert by["L1024-c256"]["valid"] is False and by["L1024-c256"]["invalid_reasons"] == ["lockstep"]
    assert by["L1024-c1"]["bottleneck"] == "gpu_bandwidth"
    assert by["L1024-c64"]["evidence"]["p.L1024-c64.mfu"] > 0.3
    ids = [f["id"] for f in out["findings"]]
    # page 1's answer first, then the headline point's mechanism, each point named as the page names it
    assert ids[0] == "thesis" and "invalid_points" in ids
    first = next(f for f in out["findings"] if f["id"] == "bottleneck")
    assert "C=64" in first["text_en"] and "C=64" in first["text_zh"]
    assert "[[" not in first["text_en"] + first["text_zh"]
    assert all(k.startswith(("p.", "r.")) for k in first["evidence"])


def test_ledger_json_has_the_new_values_and_reasons_for_absent_ones():
    out = run_report("ledger", str(FIX / "h200-round-4"), "--json")["values"]
    for name in ("engine_itl_ms_mean", "client_tpot_ms_mean", "server_running_median",
                 "held_concurrency_fraction", "gpu_util_median_pct"):
        v = out[f"p.L1024-c64.{name}"]
        assert isinstance(v["value"], (int, float)) and v["missing"] is None
    single = out["p.L1024-c1.send_synchrony"]
    assert single["value"] is None and "single stream" in single["missing"]


def test_the_whole_report_of_the_real_gpu_fixture_renders_in_both_languages(tmp_path):
    from report.publish.compose import compose_round
    from report.publish.site import build_site
    report = compose_round(FIX / "h200-round-4", "h200")
    build_site([report], tmp_path, formats=("html",))
    en = (tmp_path / "h200" / "index.en.html").read_text()
    zh = (tmp_path / "h200" / "index.zh.html").read_text()
    assert "Diagnosis" in en and "诊断" in zh
    assert "GPU memory bandwidth" in en and "GPU 显存带宽" in zh
    assert "lockstep waves" in en and "锁步波次" in zh
    assert "[[p." not in en + zh and "[[r." not in en + zh


def test_the_shared_point_of_two_h200_rounds_gets_a_reproducibility_verdict():
    from report.publish.compose import compose_rounds
    from report.publish.numbers import plain_text
    r4, r5 = compose_rounds([(ROOT / "runs" / "round-4" / "bundle", "round-4"),
                             (ROOT / "runs" / "round-5" / "bundle", "round-5")])
    found = [f for f in r5.facts.findings if f["id"] == "reproducibility"]
    assert len(found) == 1 and r5.facts.repro_points == 1   # L1024-c16 in both rounds
    text = plain_text(found[0]["texts"]["en"], r5.ledger, "en")
    # L1024-c16's throughput holds within 5 % but its TTFT p99 moved by more than 20 %: the
    # finding says so instead of "reproduced".
    assert text.startswith("Throughput reproduced, latency did not")
    assert " to " not in text.split("differs")[1].split(",")[0]
    assert abs(r5.ledger.value_of("x.repro_tput_min")) <= 0.05
    assert abs(r5.ledger.value_of("x.repro_ttft_p99_min")) > 0.2
    assert "可复现：" not in plain_text(found[0]["texts"]["zh"], r5.ledger, "zh")
    # silent where there is nothing to compare: round 4 is composed here without its round 3
    assert not [f for f in r4.facts.findings if f["id"] == "reproducibility"]
    assert "x.repro_tput_min" not in r4.ledger
