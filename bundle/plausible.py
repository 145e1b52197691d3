"""Which sampled values are measurements: finite, and inside the range the quantity can take.

A GPU row's field (gpu.jsonl, or a DCGM exporter's sample read as one) outside its range is no
measurement: a power below 0 W, a share outside 0-100 %, a clock at or below 0 MHz. The
collector keeps such a sample out of the bundle with its reason (`withheld`), and the report
leaves one out of a bundle recorded before; both ask the functions here.
"""

from __future__ import annotations

import math
from functools import lru_cache

from bundle.metric_keys import split_key

MIB = 1 << 20

# A GPU row's field -> (lowest, highest, whether the lowest is allowed). Shares are per cent;
# the highest power and clock are far above any device's, so only the impossible is refused.
FIELD_RANGES: dict[str, tuple[float, float, bool]] = {
    "power_w": (0.0, 10_000.0, True), "power_limit_w": (0.0, 10_000.0, False),
    "sm_clock_mhz": (0.0, 100_000.0, False), "mem_clock_mhz": (0.0, 100_000.0, False),
    "temperature_c": (-60.0, 200.0, True), "gpu_util_pct": (0.0, 100.0, True),
    "mem_util_pct": (0.0, 100.0, True), "mem_used_bytes": (0.0, math.inf, True),
    "energy_mj": (0.0, math.inf, True), "gpm_interval_s": (0.0, math.inf, True),
    **{f"gpm_{s}_pct": (0.0, 100.0, True) for s in (
        "dram_bw_util", "any_tensor_util", "hmma_tensor_util", "sm_util", "sm_occupancy")},
    **{f"gpm_{s}_mib_s": (0.0, math.inf, True) for s in (
        "nvlink_rx", "nvlink_tx", "pcie_rx", "pcie_tx")},
}

# An NVIDIA DCGM exporter's page (dcgm.jsonl, a remote server's GPUs) read as GPU rows: each
# field's exporter name -> (the row's field, the scale to it). DCGM's profiling ratios are
# 0..1 where the rows' shares are per cent; its link rates are bytes/s.
DCGM_FIELDS = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", float(MIB)),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gpm_dram_bw_util_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gpm_any_tensor_util_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": ("gpm_hmma_tensor_util_pct", 100.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("gpm_sm_util_pct", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gpm_sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("gpm_nvlink_rx_mib_s", 1.0 / MIB),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("gpm_nvlink_tx_mib_s", 1.0 / MIB),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gpm_pcie_rx_mib_s", 1.0 / MIB),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gpm_pcie_tx_mib_s", 1.0 / MIB),
}
DCGM_PREFIX = "DCGM_FI_"
# DCGM's "blank" values (no reading): its int32 and int64 blanks and above, and its FP64 blank.
DCGM_BLANK_INT32, DCGM_BLANK_INT64, DCGM_BLANK_FP64 = 0x7FFFFFF0, 0x7FFFFFFFFFFFFFF0, 140737488355328.0
# Fields DCGM keeps as int32 (a value from its int32 blank up is no reading).
DCGM_INT32 = {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
              "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}
# The labels of a DCGM sample that the report reads as a GPU's index.
GPU_LABEL = "gpu"


def dcgm_blank(name: str, value: float) -> bool:
    """Whether DCGM's VALUE of NAME is one of its blanks (no reading), not a measurement."""
    return (value >= DCGM_BLANK_INT64 or value == DCGM_BLANK_FP64
            or (name in DCGM_INT32 and value >= DCGM_BLANK_INT32))


def field_problem(field: str, value: float) -> str | None:
    """Why VALUE of the GPU row's FIELD is no measurement (not finite, out of its range), or None."""
    if not math.isfinite(value):
        return f"a non-finite value ({value!r})"
    bounds = FIELD_RANGES.get(field)
    if bounds is None:
        return None
    lo, hi, lo_ok = bounds
    if value < lo or (value == lo and not lo_ok) or value > hi:
        return f"{value:g}, outside the {field} range {'[' if lo_ok else '('}{lo:g}, {hi:g}]"
    return None


def dcgm_value_problem(name: str, value: float) -> str | None:
    """Why the DCGM exporter's VALUE of NAME is no measurement, None when it is one or a blank
    (DCGM's own way of saying no reading, kept as recorded and left out by the report)."""
    if not math.isfinite(value):
        return f"a non-finite value ({value!r})"
    if name not in DCGM_FIELDS or dcgm_blank(name, value):
        return None
    field, scale = DCGM_FIELDS[name]
    problem = field_problem(field, value * scale)
    return problem and (problem if scale == 1.0 else f"{value:g} reads as {problem}")


@lru_cache(maxsize=1 << 16)
def label_problem(key: str) -> str | None:
    """Why a DCGM sample KEY's labels cannot be read (a `gpu` label that is no GPU index), or None."""
    try:
        _, labels = split_key(key)
    except ValueError as e:
        return str(e)
    gpu = labels.get(GPU_LABEL)
    if gpu is not None and not (gpu.isascii() and gpu.isdigit() and len(gpu) <= 6):
        return f"its label gpu={gpu!r:.40} is not a GPU index (a whole number)"
    return None


def sample_problem(key: str, value: float) -> str | None:
    """Why the scraped sample KEY = VALUE is no measurement, or None: a value that is not finite,
    and of a DCGM sample, a label that is not typed or a value out of its range."""
    if not key.startswith(DCGM_PREFIX):
        return None if math.isfinite(value) else f"a non-finite value ({value!r})"
    return label_problem(key) or dcgm_value_problem(key.split("{", 1)[0], value)


def screen(samples: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """(the samples that are measurements, the others' keys -> why each is kept out)."""
    withheld = {k: why for k, v in samples.items() if (why := sample_problem(k, v))}
    if not withheld:
        return samples, {}
    return {k: v for k, v in samples.items() if k not in withheld}, withheld
