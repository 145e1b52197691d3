"""A DCGM exporter's page read as GPU rows (report/derive/gpu/dcgm.py): fields mapped and scaled,
DCGM's blanks left out, one row per GPU, and the GPUs described by the exporter's labels.
The page is tests/fixtures/dcgm/exporter-page.txt, built by hand from the documented format."""

from __future__ import annotations

import pytest

from bench.exposition import parse_exposition
from report.derive.gpu import across, dcgm, gpm, power
from report.derive.gpu import energy as EN
from report.ledger import Absent
from tests.conftest import FIXTURES

PAGE = (FIXTURES / "dcgm" / "exporter-page.txt").read_text()


def page(e0: int, e1: int, text: str = PAGE) -> str:
    """The page with GPU 0's and GPU 1's energy counters (mJ) filled in."""
    return text.replace("{energy0}", str(e0)).replace("{energy1}", str(e1))


def scrapes(*energies_mj: tuple[int, int]) -> list[dict]:
    """One answered scrape a second, the energy counters at each."""
    return [{"t": float(i), "dt": 0.01, "ok": True,
             "samples": parse_exposition(page(e0, e1), "DCGM_FI_")}
            for i, (e0, e1) in enumerate(energies_mj)]


def test_each_gpu_is_one_row_per_scrape_with_the_fields_the_functions_read():
    rows = dcgm.dcgm_gpu_rows(scrapes((1000, 5000), (693_847, 79_512)))
    assert [(r["t"], r["gpu"]) for r in rows] == [(0.0, 0), (0.0, 1), (1.0, 0), (1.0, 1)]
    busy = rows[2]
    assert busy["power_w"] == 692.847 and busy["sm_clock_mhz"] == 1470 and busy["gpu_util_pct"] == 100
    assert busy["gpm_dram_bw_util_pct"] == pytest.approx(44.0)        # DCGM's ratio, as a share in %
    assert busy["gpm_pcie_rx_mib_s"] == pytest.approx(54_840_000 / 2**20)
    assert busy["gpm_interval_s"] == 1.0 and "gpm_interval_s" not in rows[0]
    assert "memory_temp" not in busy and all("DCGM" not in k for k in busy)


def test_dcgm_blanks_are_no_reading_not_a_number():
    blank = PAGE.replace("} 1470", "} 2147483632")                  # GPU 0's SM clock: int32 blank
    rows = dcgm.dcgm_gpu_rows([{"t": 0.0, "ok": True, "samples": parse_exposition(page(1, 1, blank), "DCGM_FI_")}])
    assert "sm_clock_mhz" not in rows[0] and rows[1]["sm_clock_mhz"] == 1980


def test_the_window_functions_read_the_exporters_rows_as_nvmls():
    rows = dcgm.dcgm_gpu_rows(scrapes(*[(1_000_000 + 692_847 * i, 0) for i in range(6)]))
    assert power.median_power_w(rows, 0.0, 5.0) == 692.847
    assert EN.energy_counter_j(rows, 0.0, 5.0, gpu=0) == pytest.approx(5 * 692.847)
    assert gpm.dram_bandwidth_share(rows, 0.0, 5.0) == pytest.approx(0.44)
    assert gpm.tensor_active_share(rows, 0.0, 5.0, gpu=1) == 0.0


def test_the_gpus_are_named_by_the_exporters_labels():
    gpus = dcgm.dcgm_gpus(scrapes((1, 1)))
    assert [(g["index"], g["name"]) for g in gpus] == [(0, "NVIDIA H200"), (1, "NVIDIA H200")]
    assert dcgm.dcgm_gpus([{"t": 0.0, "ok": False, "error": "refused"}]) == []


def test_two_gpus_are_counted_summed_and_their_spread_said():
    # The hand-built page: GPU 0 under load (DRAM 44 %, tensor 49.5 %, 692.847 W), GPU 1 idle
    # (0 %, 0 %, 74.512 W): a data-parallel or a mis-placed engine, not two TP ranks.
    rows = dcgm.dcgm_gpu_rows(scrapes((1000, 5000), (693_847, 79_512), (1_386_694, 154_024)))
    assert across.gpus_sampled(rows, 0.0, 2.0) == 2
    assert across.total_power_median_w(rows, 0.0, 2.0) == pytest.approx(692.847 + 74.512)
    assert across.dram_bandwidth_share_spread(rows, 0.0, 2.0) == pytest.approx(0.44)
    assert across.tensor_active_share_spread(rows, 0.0, 2.0) == pytest.approx(0.495)
    one = [r for r in rows if r["gpu"] == 0]
    assert across.gpus_sampled(one, 0.0, 2.0) == 1
    with pytest.raises(Absent) as e:
        across.dram_bandwidth_share_spread(one, 0.0, 2.0)
    assert e.value.reason.code == "reason.one_gpu_no_spread"
