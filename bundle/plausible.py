"""Which sampled values are measurements: finite, and inside the range the quantity can take.

A GPU row's field (gpu.jsonl, or a DCGM exporter's sample read as one) outside its range is no
measurement: a power below 0 W, a share outside 0-100 %, a clock at or below 0 MHz, and a power
or a clock above the device's own maximum (`device_maxima`: the highest power limit and the
maximum clocks NVML states, or what the exporter's page states of its GPU). The collector keeps
such a sample out of the bundle with its reason (`withheld`), and the report leaves one out of a
bundle recorded before; both ask the functions here.
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


# A device's maximum of a field: the highest value a sample of it may take (W or MHz), and how
# that was reached, in words.
Maxima = dict[str, tuple[float, str]]

# How far above the device's stated maximum a sample may read before it is no measurement. Board
# power is averaged by the driver and may overshoot the power limit for a moment, never by half
# again (5,000 W on a 700 W board is no reading; the recorded H200 rounds peak at 710 W under a
# 700 W limit); a clock never passes NVML's maximum clock (they reach 1,980 MHz of 1,980 exactly),
# the 5 % leaves room for a board whose clock offsets take it past what NVML states.
POWER_HEADROOM = 1.5
CLOCK_HEADROOM = 1.05
# A device description's key (manifest `gpus[i]`, NVML's figures) -> the row fields it bounds.
_CLOCK_KEYS = {"max_sm_clock_mhz": ("sm_clock_mhz", "SM clock"),
               "max_mem_clock_mhz": ("mem_clock_mhz", "memory clock")}


# A stated maximum below these is no device's (the smallest board in the GPU table is rated
# 72 W; no GPU's clock tops out under 100 MHz): it would withhold every sample, so it states nothing.
LEAST_POWER_LIMIT_W, LEAST_MAX_CLOCK_MHZ = 10.0, 100.0


def _positive(v, least: float = 0.0) -> float | None:
    """V as a float when it is a finite number above 0 and at least LEAST, else None (a maximum
    nobody stated)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    return float(v) if v >= least else None


def device_maxima(power_limit_w=None, max_sm_clock_mhz=None, max_mem_clock_mhz=None,
                  power_source: str = "its highest power limit") -> Maxima:
    """The highest power and clocks a device's samples may take, from its highest power limit (W)
    and its maximum SM and memory clocks (MHz); a figure not given (or no positive number) bounds
    nothing."""
    out: Maxima = {}
    if (limit := _positive(power_limit_w, LEAST_POWER_LIMIT_W)) is not None:
        why = f"{POWER_HEADROOM:g} x {power_source}, {limit:g} W"
        out["power_w"] = out["power_limit_w"] = (limit * POWER_HEADROOM, why)
    for key, clock in (("max_sm_clock_mhz", max_sm_clock_mhz), ("max_mem_clock_mhz", max_mem_clock_mhz)):
        if (mhz := _positive(clock, LEAST_MAX_CLOCK_MHZ)) is not None:
            field, words = _CLOCK_KEYS[key]
            out[field] = (mhz * CLOCK_HEADROOM, f"{CLOCK_HEADROOM:g} x its maximum {words}, {mhz:g} MHz")
    return out


def described_maxima(gpu: dict) -> Maxima:
    """The maxima of a GPU as NVML described it (a manifest's `gpus[i]`): the highest of its power
    limits (the settable range's top, the default, the enforced one) and its maximum clocks."""
    if not isinstance(gpu, dict):
        return {}
    rng = gpu.get("power_limit_range_w")
    limits = [gpu.get("power_limit_w"), gpu.get("power_limit_default_w"),
              *(rng if isinstance(rng, list) else ())]
    limits = [x for x in map(_positive, limits) if x is not None]
    return device_maxima(max(limits, default=None), gpu.get("max_sm_clock_mhz"),
                         gpu.get("max_mem_clock_mhz"))


def field_problem(field: str, value: float, maxima: Maxima | None = None) -> str | None:
    """Why VALUE of the GPU row's FIELD is no measurement (not finite, out of its range, above the
    device's maximum in MAXIMA), or None."""
    if not math.isfinite(value):
        return f"a non-finite value ({value!r})"
    bounds = FIELD_RANGES.get(field)
    if bounds is None:
        return None
    lo, hi, lo_ok = bounds
    if value < lo or (value == lo and not lo_ok) or value > hi:
        return f"{value:g}, outside the {field} range {'[' if lo_ok else '('}{lo:g}, {hi:g}]"
    if maxima and field in maxima and value > maxima[field][0]:
        ceiling, why = maxima[field]
        unit = "W" if field.startswith("power") else "MHz"
        return f"{value:g} {unit}, above the device's maximum {field} of {ceiling:g} {unit} ({why})"
    return None


def dcgm_value_problem(name: str, value: float, maxima: Maxima | None = None) -> str | None:
    """Why the DCGM exporter's VALUE of NAME is no measurement (MAXIMA: its GPU's, `page_maxima`),
    None when it is one or a blank (DCGM's own way of saying no reading, kept as recorded and
    left out by the report)."""
    if not math.isfinite(value):
        return f"a non-finite value ({value!r})"
    if name not in DCGM_FIELDS or dcgm_blank(name, value):
        return None
    field, scale = DCGM_FIELDS[name]
    problem = field_problem(field, value * scale, maxima)
    return problem and (problem if scale == 1.0 else f"{value:g} reads as {problem}")


# What an exporter's page states of its GPU's maxima: its power limits (W; the highest one
# bounds the power samples) and its maximum clocks (MHz), DCGM's names.
DCGM_POWER_LIMITS = ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
                     "DCGM_FI_DEV_ENFORCED_POWER_LIMIT")
DCGM_MAX_CLOCKS = {"DCGM_FI_DEV_MAX_SM_CLOCK": "max_sm_clock_mhz",
                   "DCGM_FI_DEV_MAX_MEM_CLOCK": "max_mem_clock_mhz"}
_STATING = (*DCGM_POWER_LIMITS, *DCGM_MAX_CLOCKS)


@lru_cache(maxsize=1 << 16)
def device_of(key: str) -> tuple[str, str] | None:
    """The device a DCGM sample KEY is of: its (endpoint, gpu) labels, None without a `gpu` label."""
    try:
        _, labels = split_key(key)
    except ValueError:
        return None
    gpu = labels.get(GPU_LABEL)
    return None if gpu is None else (labels.get("endpoint", ""), gpu)


def page_maxima(samples: dict[str, float]) -> dict[tuple[str, str], Maxima]:
    """Each GPU's maxima as one exporter page (or one scrape of several endpoints) states them:
    the highest of its power limits, its maximum clocks; a figure that is no number above 0,
    or a DCGM blank, states nothing."""
    stated: dict[tuple[str, str], dict[str, float]] = {}
    for key, value in samples.items():
        if not key.startswith(_STATING):     # most keys of a page (and every vLLM key) state none
            continue
        name = key.split("{", 1)[0]
        if name not in DCGM_POWER_LIMITS and name not in DCGM_MAX_CLOCKS:
            continue
        what = DCGM_MAX_CLOCKS.get(name, "power_limit_w")
        if (value is None or dcgm_blank(name, value)
                or field_problem("power_limit_w" if what == "power_limit_w" else "sm_clock_mhz", value)):
            continue
        if (dev := device_of(key)) is None:
            continue
        figures = stated.setdefault(dev, {})
        figures[what] = max(figures.get(what, 0.0), float(value))
    return {dev: device_maxima(f.get("power_limit_w"), f.get("max_sm_clock_mhz"), f.get("max_mem_clock_mhz"),
                               power_source="its highest power limit on the exporter's page")
            for dev, f in stated.items()}


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


def sample_problem(key: str, value: float,
                   maxima: dict[tuple[str, str], Maxima] | None = None) -> str | None:
    """Why the scraped sample KEY = VALUE is no measurement, or None: a value that is not finite,
    and of a DCGM sample, a label that is not typed or a value out of its range or above its
    GPU's maximum (MAXIMA, by device: `page_maxima`)."""
    if not key.startswith(DCGM_PREFIX):
        return None if math.isfinite(value) else f"a non-finite value ({value!r})"
    if problem := label_problem(key):
        return problem
    dev = device_of(key) if maxima else None
    return dcgm_value_problem(key.split("{", 1)[0], value, maxima.get(dev) if dev else None)


def screen(samples: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """(the samples that are measurements, the others' keys -> why each is kept out)."""
    maxima = page_maxima(samples)
    withheld = {k: why for k, v in samples.items() if (why := sample_problem(k, v, maxima))}
    if not withheld:
        return samples, {}
    return {k: v for k, v in samples.items() if k not in withheld}, withheld
