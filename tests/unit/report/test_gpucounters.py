"""report/derive/gpu/gpm.py over round 6's GPM counters (an H200) and over hand-made rows."""

from __future__ import annotations

import pytest

from bundle.store.reader import read_bundle
from report.derive.gpu import gpm, per_gpu
from report.ledger import Absent
from tests.conftest import ROOT

ROUND6 = ROOT / "runs" / "round-6" / "bundle"


def row(t, dt=1.0, gpu=0, **counters):
    return {"t": t, "gpu": gpu, "gpm_interval_s": dt, **counters}


@pytest.fixture(scope="module")
def round6():
    if not ROUND6.is_dir():
        pytest.skip("runs/round-6 is not in this checkout")
    b = read_bundle(ROUND6)
    windows = {}
    for e in b.points:
        if e.get("point") and e["event"] in ("measure", "end"):
            windows.setdefault(e["point"], {})[e["event"]] = e["t"]
    return b, {p: (w["measure"], w["end"]) for p, w in windows.items()}


def test_round6_counters_rise_with_load(round6):
    b, win = round6
    one, many = win["L1024-c1"], win["L1024-c64"]
    for fn in (gpm.dram_bandwidth_share, gpm.tensor_active_share, gpm.sm_active_share):
        a, c = fn(b.gpu, *one), fn(b.gpu, *many)
        assert 0 < a < 1 and 0 < c < 1, fn.__name__
    assert gpm.tensor_active_share(b.gpu, *many) > gpm.tensor_active_share(b.gpu, *one)
    assert gpm.hmma_active_share(b.gpu, *many) <= gpm.tensor_active_share(b.gpu, *many) + 1e-9
    assert 0 < gpm.sm_occupancy_share(b.gpu, *many) < 1
    assert gpm.pcie_rx_bytes_per_s(b.gpu, *many) > 0
    assert gpm.nvlink_rx_bytes_per_s(b.gpu, *many) == 0.0  # one GPU, no NVLink peer: NVML reads 0


def test_round6_window_takes_whole_intervals_only(round6):
    b, win = round6
    a, e = win["L1024-c64"]
    rows = gpm.window_rows(b.gpu, a, e)
    assert rows and all(a <= r["t"] - r["gpm_interval_s"] and r["t"] <= e for r in rows)


def test_round6_manifest_reason_is_none_and_unknown_text_kept(round6):
    b, _ = round6
    assert b.manifest["gpus"][0]["gpm_supported"] is True
    assert gpm.gpm_absent_reason(b.manifest["gpus"][0]["gpm_absent_reason"]) is None
    assert gpm.gpm_absent_reason("something new").code == "reason.gpm_absent_recorded"


def test_a_gpu_without_counters_is_absent_with_the_collectors_reason():
    rows = [{"t": 1.0, "gpu": 0, "power_w": 100.0}, {"t": 1.0, "gpu": 1, "power_w": 90.0}]
    text = "GPM counters are not permitted for this process (Insufficient Permissions)"
    with pytest.raises(Absent) as e:
        gpm.dram_bandwidth_share(rows, 0.0, 2.0, 0, {0: text, 1: None})
    assert e.value.reason.code == "reason.gpm_not_permitted" and str(e.value) == text
    with pytest.raises(Absent) as e:    # the collector recorded no reason for GPU 1
        per_gpu.gpu_row_tensor_active_share(rows, 0.0, 2.0, 1, {0: text, 1: None})
    assert e.value.reason.code == "reason.no_gpm_counters"


def test_mean_weights_rows_by_interval():
    rows = [row(1.0, 1.0, gpm_sm_util_pct=0.0), row(4.0, 3.0, gpm_sm_util_pct=100.0)]
    assert gpm.sm_active_share(rows, 0.0, 4.0) == pytest.approx(0.75)


def test_null_counter_is_skipped_not_zero():
    rows = [row(1.0, gpm_dram_bw_util_pct=None), row(2.0, gpm_dram_bw_util_pct=40.0)]
    assert gpm.dram_bandwidth_share(rows, 0.0, 2.0) == pytest.approx(0.4)


def test_absent_reasons():
    with pytest.raises(Absent) as e:
        gpm.tensor_active_share(None, 0, 1)
    assert e.value.reason.code == "reason.no_gpu_telemetry"
    with pytest.raises(Absent) as e:
        gpm.tensor_active_share([{"t": 1.0, "gpu": 0, "power_w": 100.0}], 0, 2)
    assert e.value.reason.code == "reason.no_gpm_counters"
    with pytest.raises(Absent) as e:
        gpm.tensor_active_share([row(1.0, 1.0, gpm_any_tensor_util_pct=5.0)], 0.5, 2)
    assert e.value.reason.code == "reason.no_gpm_interval"
    with pytest.raises(Absent) as e:
        gpm.tensor_active_share([row(1.0, gpm_any_tensor_util_pct=None)], 0, 1)
    assert e.value.reason.code == "reason.gpm_no_field"
    with pytest.raises(Absent) as e:
        gpm.dram_bytes_per_s(0.5, None)
    assert e.value.reason.code == "reason.no_peak_bandwidth"


def test_dram_bytes_per_s_and_link_units():
    assert gpm.dram_bytes_per_s(0.25, 4.8e12) == pytest.approx(1.2e12)
    rows = [row(1.0, gpm_pcie_tx_mib_s=2.0, gpm_nvlink_tx_mib_s=1.0)]
    assert gpm.pcie_tx_bytes_per_s(rows, 0, 1) == 2 * 2**20
    assert gpm.nvlink_tx_bytes_per_s(rows, 0, 1) == 2**20


def test_other_gpu_is_kept_apart():
    rows = [row(1.0, gpu=1, gpm_sm_util_pct=50.0)]
    assert gpm.sm_active_share(rows, 0, 1, gpu=1) == 0.5
    with pytest.raises(Absent):
        gpm.sm_active_share(rows, 0, 1, gpu=0)


@pytest.mark.parametrize("text,code", [
    ("NVML says this GPU does not support GPM counters (they need a Hopper or later GPU)",
     "reason.gpm_gpu_unsupported"),
    ("the installed nvidia-ml-py has no GPM API (nvmlGpmSampleGet is missing)", "reason.gpm_no_bindings_api"),
    ("GPM counters are not permitted for this process (Insufficient Permissions)", "reason.gpm_not_permitted"),
    ("NVML refused GPM counters: Uninitialized", "reason.gpm_refused"),
])
def test_collector_texts_read_back_as_codes(text, code):
    r = gpm.gpm_absent_reason(text)
    assert r.code == code and r.text("en") == text


def _collector_gpm_messages() -> list[str]:
    """Every reason text bench/samplers/gpm.py returns for a GPU without GPM, each {field} filled by a word."""
    import ast
    tree = ast.parse((ROOT / "bench" / "samplers" / "gpm.py").read_text(encoding="utf-8"))
    out = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)
               and n.name in ("gpm_absent_reason", "refusal_text")):
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                out.append(node.value.value)
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.JoinedStr):
                out.append("".join(v.value if isinstance(v, ast.Constant) else "Detail"
                                   for v in node.value.values))
    return out


def test_every_gpm_reason_the_collector_records_reads_back_as_a_code():
    msgs = _collector_gpm_messages()
    assert len(msgs) >= 6
    for msg in msgs:
        r = gpm.gpm_absent_reason(msg)
        assert r.code in gpm.GPM_ABSENT_CODES, msg
        assert r.text("en") == msg
