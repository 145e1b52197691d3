"""The report of a round with GPU telemetry: power section, MFU/MBU against a named peak.

The bundle here is HAND-BUILT for this test and never published: the request and /metrics
records of the recorded round 3 (a CPU engine) with the real NVML capture of an NVIDIA H200
(tests/fixtures/gpu-h200) laid over its time axis. The numbers it produces describe no real
run; the test checks that every GPU-dependent part of the ledger and the templates works.
"""

from __future__ import annotations

import json
import shutil

import pytest

from bundle.store.reader import read_bundle
from report.publish.compose import compose_rounds
from report.publish.render.output import render_round
from tests.conftest import FIXTURES, ROOT

ROUND = ROOT / "runs" / "round-3" / "bundle"
H200 = FIXTURES / "gpu-h200"


@pytest.fixture(scope="module")
def gpu_bundle(tmp_path_factory):
    if not (ROUND / "manifest.json").exists():
        pytest.skip("the recorded round 3 is not in runs/")
    dst = tmp_path_factory.mktemp("gpu") / "bundle"
    shutil.copytree(ROUND, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    h200 = json.loads((H200 / "manifest.json").read_text())
    manifest["origin"] = "hand-built-fixture"
    manifest["gpus"] = h200["gpus"]
    manifest["gpu_absent_reason"] = None
    # Repeat the 81 s capture over the round's time axis, one sample per second.
    samples = [json.loads(line) for line in (H200 / "gpu.jsonl").read_text().splitlines() if line]
    b = read_bundle(ROUND)
    t_end = max(e["t"] for e in b.points)
    span = samples[-1]["t"] - samples[0]["t"] + 1.0
    with open(dst / "gpu.jsonl", "w") as f:
        k = 0
        while k * span < t_end + span:
            for s in samples:
                rec = dict(s, t=s["t"] + k * span,
                           energy_mj=s["energy_mj"] + k * (samples[-1]["energy_mj"] - samples[0]["energy_mj"]))
                f.write(json.dumps(rec) + "\n")
            k += 1
    manifest["files"]["gpu"] = "gpu.jsonl"
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.fixture(scope="module")
def gpu_report(gpu_bundle):
    """The composed report of the bundle (composed once; the tests only read it)."""
    return compose_rounds([(gpu_bundle, "gpu-fixture")])[0]


def test_gpu_round_has_power_and_mfu_against_the_h200_peak(gpu_report):
    rep = gpu_report
    led, last = rep.ledger, rep.facts.ok_points[-1]
    assert "power" in rep.figures
    assert led["r.peak_flops"].present and led["r.peak_bandwidth"].present
    assert led["r.ridge"].present
    for q in ("power_median_w", "power_peak_w", "power_limit_w", "temp_max_c", "energy_j",
              "joules_per_token", "mfu", "mbu"):
        assert led[f"p.{last}.{q}"].present, (q, led[f"p.{last}.{q}"].missing)
    assert led[f"p.{last}.power_limit_w"].value == 700.0
    assert 0 < led[f"p.{last}.mfu"].value < 1e-3  # a CPU engine's FLOP rate against an H200
    assert rep.notices, "a hand-built bundle is labelled as such on the page"


def test_gpu_round_renders_in_both_languages(gpu_report, tmp_path):
    out = render_round(gpu_report, tmp_path, formats=("html",))
    pages = {p.name: p.read_text() for p in out.paths if p.suffix == ".html"}
    assert "功耗墙" in pages["index.zh.html"] or "功耗" in pages["index.zh.html"]
    assert "Power and thermals" in pages["index.en.html"]
    assert "NVIDIA H200" in pages["index.en.html"]
    assert "not computed" not in pages["index.en.html"].split("Power and thermals")[0].split("MFU / MBU")[-1]
