"""One row per GPU: each sampled GPU's quantities under `p.<point>.gpu<k>.` (report/derive/gpu/per_gpu.py,
per="gpu" in report/registry.py) and the page's table of them (report/publish/compose.py).

No multi-GPU round could be recorded (no machine with two GPUs was lent): the two-GPU samples
below are HAND-BUILT in gpu.jsonl's format (docs/bundle.md), not measured."""

from __future__ import annotations

import pytest

from report.derive.gpu import across, per_gpu
from report.ledger import Ledger
from report.publish.tables import GPU_COLUMNS, item_table
from report.registry import RawSources, resolve_point


def row(t: float, gpu: int, power: float, clock: float, util: float, dram: float | None) -> dict:
    r = {"t": t, "gpu": gpu, "power_w": power, "power_limit_w": 700.0, "temperature_c": 40.0 + gpu,
         "sm_clock_mhz": clock, "mem_clock_mhz": 3200.0, "gpu_util_pct": util, "mem_util_pct": 30.0,
         "mem_used_bytes": 5e10 + gpu, "energy_mj": 1e6 + t, "throttle_reasons": 0, "pstate": 0,
         "unsupported": []}
    if dram is not None:
        r.update(gpm_interval_s=1.0, gpm_dram_bw_util_pct=dram, gpm_any_tensor_util_pct=10.0,
                 gpm_sm_util_pct=80.0)
    return r


# GPU 0 draws 500 W with GPM counters; GPU 1 draws 200 W at a lower clock and has none.
SAMPLES = [row(t, 0, 500.0, 1980.0, 100.0, 60.0 if t else None) for t in (0.0, 1.0, 2.0, 3.0)] + \
          [row(t, 1, 200.0, 1500.0, 90.0, None) for t in (0.0, 1.0, 2.0, 3.0)]


def ledger_of(samples) -> Ledger:
    led = Ledger()
    raw = RawSources()
    raw.add("gpu_samples", samples, ("gpu.jsonl",))
    raw.add("t_measure", 0.0)
    raw.add("t_end", 3.0)
    raw.add("gpu_items", per_gpu.gpu_items(samples), ("gpu.jsonl",))
    for module in (across, per_gpu):
        resolve_point(led, module.__name__, "c8", raw)
    return led


def test_every_gpu_sampled_has_its_own_values():
    led = ledger_of(SAMPLES)
    assert led.value_of("p.c8.gpus_sampled") == 2
    assert led.value_of("p.c8.gpu0.gpu_row_power_median_w") == 500.0
    assert led.value_of("p.c8.gpu1.gpu_row_power_median_w") == 200.0
    assert led.value_of("p.c8.gpu1.gpu_row_sm_clock_load_mhz") == 1500.0
    assert led.value_of("p.c8.gpu0.gpu_row_dram_bandwidth_share") == pytest.approx(0.6)
    # GPU 1 has no GPM counters: absent with the reason, never 0.
    gpm1 = led["p.c8.gpu1.gpu_row_dram_bandwidth_share"]
    assert not gpm1.present and "GPM" in str(gpm1.missing)
    # An item's value cites its inputs: the samples, and which GPU it is.
    assert ("gpu", "1") in led["p.c8.gpu1.gpu_row_power_median_w"].inputs
    assert led.value_of("p.c8.total_power_median_w") == 700.0


def test_the_gpu_table_has_a_row_per_gpu_and_none_without_samples():
    led = ledger_of(SAMPLES)
    t = item_table(led, "c8", "gpu", "gpu_table", {"en": "", "zh": ""}, GPU_COLUMNS, "label.row_gpu")
    assert [lab["en"] for lab in t.row_labels] == ["GPU 0", "GPU 1"]
    assert t.rows[1][0] == "p.c8.gpu1.gpu_row_power_median_w"
    assert len(t.rows[0]) == len(GPU_COLUMNS)
    assert per_gpu.gpu_items(None) == {} and per_gpu.gpu_items([]) == {}
    empty = item_table(ledger_of([]), "c8", "gpu", "gpu_table", {"en": "", "zh": ""}, GPU_COLUMNS,
                       "label.row_gpu")
    assert empty.rows == []


def test_gpu_items_follow_index_order_past_nine():
    samples = [row(0.0, g, 100.0, 1000.0, 50.0, None) for g in (10, 2, 0)]
    assert list(per_gpu.gpu_items(samples)) == ["gpu0", "gpu2", "gpu10"]
    led = ledger_of(samples)
    t = item_table(led, "c8", "gpu", "gpu_table", {"en": "", "zh": ""}, GPU_COLUMNS, "label.row_gpu")
    assert [lab["en"] for lab in t.row_labels] == ["GPU 0", "GPU 2", "GPU 10"]
