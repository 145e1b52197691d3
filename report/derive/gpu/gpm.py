"""GPM hardware counters over a window, from a bundle's gpu.jsonl rows (bench/samplers/gpm.py): bandwidth, tensor and SM activity, links."""

from __future__ import annotations

from typing import Mapping

from report.derive.gpu.power import Samples, rows_of_gpu
from report.ledger import Absent, Reason, reason_from_text
from report.registry import point_quantity

# The collector's text of why a GPU has no GPM counters, by GPU index (manifest `gpus[i].gpm_absent_reason`).
GpmTexts = Mapping[int, str | None] | None


# Each row's counters are NVML's figures over the interval (t - gpm_interval_s, t]; a window
# [t_start, t_end] takes the rows whose whole interval lies inside it, and a mean weights each
# row by its interval. Shares are fractions (0..1, comparable with MBU and MFU), bandwidths
# bytes/s. Functions are pure and raise Absent with the reason when the input is missing; a
# counter NVML refused is null in a row and skipped, never read as 0.

MIB = 2**20

# Reasons the collector records for a GPU without GPM counters (manifest `gpus[i].gpm_absent_reason`).
GPM_ABSENT_CODES = ("reason.gpm_no_bindings_api", "reason.gpm_gpu_unsupported",
                    "reason.gpm_not_permitted", "reason.gpm_no_driver_api",
                    "reason.gpm_not_supported", "reason.gpm_refused")


def gpm_absent_reason(text: str | None) -> Reason | None:
    """The manifest's gpm_absent_reason (English text the collector wrote) as a reason, None if none."""
    if not text:
        return None
    return reason_from_text(text, GPM_ABSENT_CODES) or Reason.of("reason.gpm_absent_recorded", text=text)


def window_rows(samples: Samples, t_start: float, t_end: float, gpu: int = 0,
                gpm_absent_texts: GpmTexts = None) -> list[dict]:
    """One GPU's rows with GPM counters whose interval lies inside [t_start, t_end], in time order;
    without any, Absent with the collector's reason for that GPU where it recorded one."""
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    rows = [s for s in rows_of_gpu(samples, gpu) if s.get("gpm_interval_s") is not None]
    if not rows:
        why = gpm_absent_reason((gpm_absent_texts or {}).get(gpu))
        raise Absent.because(why) if why else Absent("reason.no_gpm_counters", gpu=gpu)
    inside = [s for s in rows if t_start <= s["t"] - s["gpm_interval_s"] and s["t"] <= t_end]
    if not inside:
        raise Absent("reason.no_gpm_interval", gpu=gpu, t_start=t_start, t_end=t_end)
    return sorted(inside, key=lambda s: s["t"])


def time_weighted_mean(samples: Samples, t_start: float, t_end: float, name: str, gpu: int = 0,
                       gpm_absent_texts: GpmTexts = None) -> float:
    """Mean of the GPM counter NAME over the window, each row weighted by its interval."""
    pairs = [(s[name], s["gpm_interval_s"]) for s in window_rows(samples, t_start, t_end, gpu, gpm_absent_texts)
             if s.get(name) is not None and s["gpm_interval_s"] > 0]
    if not pairs:
        raise Absent("reason.gpm_no_field", name=name, gpu=gpu, t_start=t_start, t_end=t_end)
    return sum(v * dt for v, dt in pairs) / sum(dt for _, dt in pairs)


@point_quantity(unit="fraction")
def dram_bandwidth_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                         gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of the peak DRAM bandwidth the GPU used in the window, by its GPM counter (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_dram_bw_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def tensor_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                        gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of time the SMs ran any tensor-core operation in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_any_tensor_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def hmma_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                      gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of time the SMs ran half-precision (HMMA) tensor operations in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_hmma_tensor_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def sm_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                    gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of SMs that were busy in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_sm_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def sm_occupancy_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                       gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of the SMs' warp slots that held an active warp in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_sm_occupancy_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="B/s")
def dram_bytes_per_s(dram_bandwidth_share: float, peak_bandwidth: float) -> float:
    """Measured DRAM traffic: the GPM bandwidth share times the GPU's peak bandwidth (bytes/s)."""
    if not peak_bandwidth or peak_bandwidth <= 0:
        raise Absent("reason.no_peak_bandwidth", peak=peak_bandwidth)
    return dram_bandwidth_share * peak_bandwidth


@point_quantity(unit="B/s")
def nvlink_rx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                          gpm_absent_texts: GpmTexts = None) -> float:
    """Mean NVLink traffic into the GPU over all links in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_nvlink_rx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="B/s")
def nvlink_tx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                          gpm_absent_texts: GpmTexts = None) -> float:
    """Mean NVLink traffic out of the GPU over all links in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_nvlink_tx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="B/s")
def pcie_rx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                        gpm_absent_texts: GpmTexts = None) -> float:
    """Mean PCIe traffic into the GPU in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_pcie_rx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="B/s")
def pcie_tx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                        gpm_absent_texts: GpmTexts = None) -> float:
    """Mean PCIe traffic out of the GPU in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_pcie_tx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="fraction")
def power_peak_over_limit(power_peak_w: float, power_limit_w: float) -> float:
    """The highest power sample against the enforced limit: peak ÷ limit − 1 (positive: it passed the limit)."""
    if not power_limit_w or power_limit_w <= 0:
        raise Absent("reason.no_power_limit")
    return power_peak_w / power_limit_w - 1.0
