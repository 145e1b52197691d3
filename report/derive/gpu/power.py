"""Power, temperature, utilisation and clocks of a window, from a bundle's raw NVML samples, and the peak at the clock the GPU ran at.

Each function is pure, takes the `gpu` stream's records as read (`Bundle.gpu`) plus a window
[t_start, t_end] on the bundle's clock, and raises Absent (with the reason in words) when the
window holds no usable sample. A field NVML refused is null in a sample and skipped here,
never read as 0.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from bundle.gpu_fields import reason_bits
from report.derive.arith import ratio
from report.derive.sizes import peak_at_clock
from report.ledger import Absent, Reason
from report.registry import bound_quantity, point_quantity

Samples = Iterable[dict[str, Any]]


SW_POWER_CAP = dict((name, bit) for bit, name in reason_bits())["sw_power_cap"]


class GpuRows(list):
    """GPU rows (gpu.jsonl's, or an exporter's read as them) with an index by GPU, built on first
    use: a quantity of one GPU reads that GPU's rows, so the cost of all GPUs' quantities is
    linear in the rows, however many GPUs a page names."""

    def __init__(self, rows=()):
        super().__init__(rows)
        self._by_gpu: dict[int, list[dict]] | None = None

    def of_gpu(self, gpu: int) -> list[dict]:
        """The rows of GPU, in their order."""
        if self._by_gpu is None:
            self._by_gpu = {}
            for s in self:
                self._by_gpu.setdefault(s.get("gpu", 0), []).append(s)
        return self._by_gpu.get(gpu, [])


def rows_of_gpu(samples: Samples, gpu: int) -> list[dict]:
    """The rows of SAMPLES that are GPU's, in their order (through the index of GpuRows)."""
    if isinstance(samples, GpuRows):
        return samples.of_gpu(gpu)
    return [s for s in samples if s.get("gpu", 0) == gpu]


def window_samples(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> list[dict]:
    """The samples of one GPU with t_start <= t <= t_end, in time order."""
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    out = sorted((s for s in rows_of_gpu(samples, gpu) if t_start <= s["t"] <= t_end),
                 key=lambda s: s["t"])
    if not out:
        raise Absent("reason.no_gpu_sample", gpu=gpu, t_start=t_start, t_end=t_end)
    return out


def field_values(samples: Samples, t_start: float, t_end: float, gpu: int, name: str) -> list:
    """The non-null values of NAME in the window; Absent when NVML gave none."""
    vals = [s.get(name) for s in window_samples(samples, t_start, t_end, gpu)]
    vals = [v for v in vals if v is not None]
    if not vals:
        raise Absent("reason.nvml_no_field", name=name, gpu=gpu, t_start=t_start, t_end=t_end)
    return vals


def median_power_w(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Median of the sampled board power in the window (W)."""
    return float(statistics.median(field_values(samples, t_start, t_end, gpu, "power_w")))


def median_gpu_util_pct(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Median of NVML's GPU utilisation (share of time a kernel ran) in the window, %."""
    return float(statistics.median(field_values(samples, t_start, t_end, gpu, "gpu_util_pct")))


def peak_power_w(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Highest sampled board power in the window (W)."""
    return float(max(field_values(samples, t_start, t_end, gpu, "power_w")))


@point_quantity(unit="W")
def power_limit_w(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0) -> float:
    """The enforced power limit in the window (W); the highest if it changed."""
    return float(max(field_values(gpu_samples, t_measure, t_end, gpu, "power_limit_w")))


def max_temperature_c(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Highest sampled GPU temperature in the window (°C)."""
    return float(max(field_values(samples, t_start, t_end, gpu, "temperature_c")))


@point_quantity(unit="fraction")
def power_cap_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0) -> float:
    """Fraction (0..1) of the window's samples whose clocks the SW power cap was holding down."""
    masks = field_values(gpu_samples, t_measure, t_end, gpu, "throttle_reasons")
    return sum(1 for m in masks if m & SW_POWER_CAP) / len(masks)


def _clock_where(samples: Samples, t_start: float, t_end: float, gpu: int, busy, what: Reason):
    w = window_samples(samples, t_start, t_end, gpu)
    clocks = [s["sm_clock_mhz"] for s in w
              if s.get("gpu_util_pct") is not None and s.get("sm_clock_mhz") is not None
              and busy(s["gpu_util_pct"])]
    if not clocks:
        raise Absent("reason.no_sm_clock_sample", gpu=gpu, what=what, t_start=t_start, t_end=t_end)
    return float(statistics.median(clocks))


def median_sm_clock_under_load_mhz(samples: Samples, t_start: float, t_end: float, gpu: int = 0,
                                   busy_util_pct: float = 50.0) -> float:
    """Median SM clock over the window's samples with GPU utilisation >= busy_util_pct (MHz)."""
    return _clock_where(samples, t_start, t_end, gpu, lambda u: u >= busy_util_pct,
                        Reason.of("reason.util_at_least", pct=busy_util_pct))


# The point's quantities of the NVML samples above: each names the point's GPU rows and window.

# The first GPU's statistics of one NVML field (name, function, unit), in the order they are resolved.
NVML_STATS = (("power_median_w", median_power_w, "W"), ("power_peak_w", peak_power_w, "W"),
              ("temp_max_c", max_temperature_c, "°C"))
for _name, _func, _unit in NVML_STATS:
    bound_quantity("point", _name, _func, unit=_unit, samples="gpu_samples", t_start="t_measure", gpu=0)


@point_quantity(unit="MHz")
def sm_clock_load_mhz(gpu_samples: Samples, t_measure: float, t_end: float) -> float:
    """Median SM clock over the point's samples with the GPU busy (utilisation at least the default busy_util_pct, MHz)."""
    return median_sm_clock_under_load_mhz(gpu_samples, t_measure, t_end)


@point_quantity(unit="fraction")
def sm_clock_below_max(sm_clock_load_mhz: float, max_sm_clock_mhz: float) -> float:
    """How far the SM clock under load ran below the GPU's maximum: 1 - clock / maximum (0 at the maximum)."""
    if max_sm_clock_mhz <= 0:
        raise Absent("reason.denominator_zero")
    return 1.0 - sm_clock_load_mhz / max_sm_clock_mhz


bound_quantity("point", "gpu_util_median_pct", median_gpu_util_pct, unit="%", samples="gpu_samples", t_start="t_measure", gpu=0)


@point_quantity(unit="TFLOP/s")
def peak_tflops_at_clock(peak_tflops: float, sm_clock_load_mhz: float, peak_clock_mhz: float) -> float:
    """The dense peak at the SM clock the point ran at, scaled from the clock the datasheet specifies it at: under a power cap the ceiling is the clock's."""
    return peak_at_clock(peak_tflops, sm_clock_load_mhz, peak_clock_mhz)


@point_quantity(unit="fraction")
def mfu_at_clock(tflops_s: float, peak_tflops_at_clock: float) -> float:
    """Measured TFLOP/s against the peak at the point's SM clock."""
    return ratio(tflops_s, peak_tflops_at_clock)
