"""One row per GPU: each sampled GPU's values over the point's window."""

from __future__ import annotations

import statistics

from report.derive.gpu.gpm import (
    GpmTexts,
    dram_bandwidth_share,
    sm_active_share,
    tensor_active_share,
)
from report.derive.gpu.power import (
    Samples,
    field_values,
    max_temperature_c,
    median_gpu_util_pct,
    median_power_w,
    median_sm_clock_under_load_mhz,
)
from report.registry import bound_quantity, point_quantity

# One row per GPU: each sampled GPU's values over the point's window (per="gpu": key
# p.<point>.gpu<k>.<name>, one for each GPU `gpu_items` names).


def gpu_items(samples: Samples | None) -> dict[str, dict[str, int]]:
    """Each GPU of the round's samples as an item ("gpu1" -> {"gpu": 1}), in index order; none without samples."""
    return {f"gpu{g}": {"gpu": g} for g in sorted({s.get("gpu", 0) for s in samples or ()})}


bound_quantity("point", "gpu_row_power_median_w", median_power_w, unit="W", per="gpu", samples="gpu_samples",
               t_start="t_measure")


@point_quantity(unit="MHz", per="gpu")
def gpu_row_sm_clock_load_mhz(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int) -> float:
    """This GPU's median SM clock over the window's samples with utilisation at 50 % or more (MHz)."""
    return median_sm_clock_under_load_mhz(gpu_samples, t_measure, t_end, gpu)


bound_quantity("point", "gpu_row_util_median_pct", median_gpu_util_pct, unit="%", per="gpu", samples="gpu_samples",
               t_start="t_measure")


@point_quantity(unit="B", per="gpu")
def gpu_row_mem_used_bytes(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int) -> float:
    """This GPU's median memory in use in the window (B)."""
    return float(statistics.median(field_values(gpu_samples, t_measure, t_end, gpu, "mem_used_bytes")))


bound_quantity("point", "gpu_row_temperature_max_c", max_temperature_c, unit="°C", per="gpu", samples="gpu_samples",
               t_start="t_measure")


@point_quantity(unit="fraction", per="gpu")
def gpu_row_dram_bandwidth_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int,
                                 gpm_absent_texts: GpmTexts = None) -> float:
    """This GPU's mean share of its peak DRAM bandwidth in the window, by GPM (0 to 1)."""
    return dram_bandwidth_share(gpu_samples, t_measure, t_end, gpu, gpm_absent_texts)


@point_quantity(unit="fraction", per="gpu")
def gpu_row_tensor_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int,
                                gpm_absent_texts: GpmTexts = None) -> float:
    """This GPU's mean share of time its SMs ran any tensor-core operation in the window, by GPM (0 to 1)."""
    return tensor_active_share(gpu_samples, t_measure, t_end, gpu, gpm_absent_texts)


@point_quantity(unit="fraction", per="gpu")
def gpu_row_sm_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int,
                            gpm_absent_texts: GpmTexts = None) -> float:
    """This GPU's mean share of busy SMs in the window, by GPM (0 to 1)."""
    return sm_active_share(gpu_samples, t_measure, t_end, gpu, gpm_absent_texts)
